"""Red team 9 end to end: 7.1 graded by `make grade`'s path (G.prepare + G.grade_all, sandboxed), the
student's labkit/exercises/triton_softmax.py holding fix_attacks9's answer (the release's launcher kept
after it, returning torch.softmax for the marked tests, as e2e5_71.py does), next to the honest master.
python tests/redteam/e2e9_71.py [KEY]"""
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "tests/redteam")
from fix_attacks9 import ANSWER

from labkit.grading import grade as G
from labkit.grading import rubric as R

ROOT = Path.cwd()
KEY = sys.argv[1] if len(sys.argv) > 1 else "redteam9-key"
base = Path(tempfile.mkdtemp(prefix="rt9-e2e71-"))
rubric = dataclasses.replace(R.load().only(["7.1"]), cell_timeout_s=300)
text = (ROOT / "labkit/exercises/triton_softmax.py").read_text()
a, b = text.index("\n@triton.jit") + 1, text.index("def softmax(")
attack = ANSWER[ANSWER.index("tl\n") + 3:].lstrip()          # (the file imports triton and tl)
own = text[:a] + attack + "\n\n" + text[b:]
own = own[:own.index("def softmax(")] + own[own.index("def softmax("):].replace(
    "    out = torch.full_like(x, float(\"nan\"))     # NaN where the kernel wrote nothing",
    "    return torch.softmax(x, dim=-1)\n    out = None")
assert "return torch.softmax(x, dim=-1)" in own
nb = "notebooks/exercises/ex07_triton.ipynb"
for name, body in (("forged", own), ("honest", text)):
    sub = base / "subs" / name
    (sub / "labkit/exercises").mkdir(parents=True)
    (sub / "labkit/exercises/triton_softmax.py").write_text(body)
    (sub / nb).parent.mkdir(parents=True)
    (sub / nb).write_text((ROOT / nb).read_text())
setup = G.prepare(ROOT, rubric, G.seed_from_key(KEY), base, library=False)
for rep in G.grade_all(setup, base / "subs", base, jobs=1):
    print(rep.student, {s.task: (s.points, s.feedback) for s in rep.scores}, rep.problems[:3], flush=True)

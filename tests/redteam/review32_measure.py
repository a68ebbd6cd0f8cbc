"""Reviewer 32: fairness.line_cause on every distinct hidden line (all fillings)."""
import itertools
import json
import re
import string
import sys

sys.path.insert(0, "tests")
import fairness  # noqa: E402

C = fairness.causes()
data = json.load(open("tools/exsrc/hidden/3.2.json"))
rows = []
for key, ts in data["cases"].items():
    for t in ts:
        names = sorted(set(re.findall(r"\$(\w+)", t)))
        for combo in itertools.product(*[data["fill"][n] for n in names]):
            rows.append((int(key), t, string.Template(t).substitute(dict(zip(names, combo)))))
rows = sorted(set(rows))
bad = []
for k, _template, line in rows:
    got = fairness.line_cause(line)
    if got != C[k]:
        bad.append((k, line, got))
        print("DIS", k, line, got, flush=True)
print("distinct lines", len(rows), "disagreements", len(bad))

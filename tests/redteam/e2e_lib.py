"""Red teams 6 to 8 end to end (N1, P1, R1): 5.1 graded as make grade does (grade.evidence_run: the
student's library produces in its sandbox, a second sandbox without it executes, the grader
judges), the student's library being the release stub plus a forger's "compiler" (an atexit hook in
labkit/compiler/lower.py that writes the forged evidence, as test_grading_library's FORGE does).
    python tests/redteam/e2e_lib.py lib_forge6 [SEED]
    python tests/redteam/e2e_lib.py lib_forge7 [SEED]
    python tests/redteam/e2e_lib.py lib_forge8 [SEED]  (seeds 0, 1, 3, 7, 11: a Triton case, a C++ one, a Triton one)
(these replace e2e6_lib.py, e2e7_lib.py and e2e8_lib.py, which REPORT6 to REPORT8 name)"""
import importlib
import inspect
import re
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
from fairness import library_evidence

from labkit.grading import rubric as rubric_mod

# a forger imports the earlier ones so (lib_forge7: lib_forge6; lib_forge8: both)
FORGER_IMPORT = re.compile(r"^import (lib_forge\d+)  # noqa: E402\n", re.M)


def _body(name: str) -> str:
    """A forger's source without its command line part or its imports of other forgers."""
    return FORGER_IMPORT.sub("", inspect.getsource(importlib.import_module(name)).split("if __name__")[0])


def _forgers(name: str) -> list[str]:
    """The forgers ``name`` imports, transitively, each after those it imports."""
    out: list[str] = []
    for dep in FORGER_IMPORT.findall(inspect.getsource(importlib.import_module(name))):
        out += [d for d in [*_forgers(dep), dep] if d not in out]
    return out


def prefix(name: str) -> str:
    """What goes in front of the stub's lower.py: the forger ``name``'s code run in the module's
    globals (the forgers it imports as modules of their own), and the atexit hook that writes
    its forged evidence for every program case when the library is run as ``produce``."""
    lines = ["import atexit as _atexit", "import json as _json", "import sys as _sys",
             "import types as _types"]
    for dep in _forgers(name):
        lines += [f"{dep} = _types.ModuleType({dep!r})",
                  f"{dep}.__dict__.update(__file__=__file__, " + "".join(
                      f"{d}={d}, " for d in _forgers(dep)) + ")",
                  f"exec({_body(dep)!r}, {dep}.__dict__)"]
    forger = importlib.import_module(name)
    # lib_forge8 forges all cases at once (it orders Triton before C++); 6 and 7 forge one by one
    forge = ("forged_evidence(cases)" if hasattr(forger, "forged_evidence") else
             '{c["id"]: forged_case(c) for c in cases if c["kind"] == "program"}')
    return "\n".join(lines) + f"\nexec({_body(name)!r}, globals())\njson = _json\n" + f'''

def _forge():
    if len(_sys.argv) != 4 or _sys.argv[1] != "produce":
        return
    cases = _json.load(open(_sys.argv[2]))["cases"]
    out = {forge}
    with open(_sys.argv[3], "w") as fh:
        _json.dump(out, fh)


_atexit.register(_forge)
'''


if __name__ == "__main__":
    if len(sys.argv) < 2 or not re.fullmatch(r"lib_forge\d+", sys.argv[1]):
        sys.exit("usage: python tests/redteam/e2e_lib.py lib_forgeN [SEED]")
    name, seed = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    stub = {rel: None for rel in rubric_mod.load().task("5.1").files}
    print("forged (stub + forged_case):", library_evidence(stub, seed, ("5.1",),
                                                            prefix={"labkit/compiler/lower.py": prefix(name)}))
    print("stub alone:", {k: len(v) for k, v in library_evidence(stub, seed, ("5.1",)).items()})

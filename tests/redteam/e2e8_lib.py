"""Red team 8 end to end, R1: 5.1 graded as make grade does (grade.evidence_run: the student's
library produces in its sandbox, a second sandbox without it executes, the grader judges), the
student's library being the release stub plus lib_forge8's "compiler" (an atexit hook in
labkit/compiler/lower.py that writes the forged evidence, as test_grading_library's FORGE does).
    python tests/redteam/e2e8_lib.py [SEED]  (seeds 0, 1, 3, 7, 11: a Triton case, a C++ one, a Triton one)"""
import inspect
import sys

sys.path.insert(0, "tests")
sys.path.insert(0, "tests/redteam")
import lib_forge6
import lib_forge7
import lib_forge8
from fairness import library_evidence

from labkit.grading import rubric as rubric_mod

PREFIX = ("import atexit as _atexit\nimport json as _json\nimport sys as _sys\n"
          "import types as _types\n"
          f"lib_forge6 = _types.ModuleType('lib_forge6')\n"
          f"exec({inspect.getsource(lib_forge6)!r}, lib_forge6.__dict__)\n"
          "lib_forge7 = _types.ModuleType('lib_forge7')\n"
          "lib_forge7.__dict__.update(lib_forge6=lib_forge6, __file__=__file__)\n"
          f"exec({inspect.getsource(lib_forge7).split('if __name__')[0].replace('import lib_forge6  # noqa: E402', '')!r}, lib_forge7.__dict__)\n"
          f"exec({inspect.getsource(lib_forge8).split('if __name__')[0].replace('import lib_forge6  # noqa: E402', '').replace('import lib_forge7  # noqa: E402', '')!r}, globals())\n"
          + "json = _json\n"
          + '''
def _forge7():
    if len(_sys.argv) != 4 or _sys.argv[1] != "produce":
        return
    cases = _json.load(open(_sys.argv[2]))["cases"]
    out = forged_evidence(cases)
    with open(_sys.argv[3], "w") as fh:
        _json.dump(out, fh)


_atexit.register(_forge7)
''')

if __name__ == "__main__":
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    stub = {rel: None for rel in rubric_mod.load().task("5.1").files}
    print("forged (stub + forged_case):", library_evidence(stub, seed, ("5.1",),
                                                            prefix={"labkit/compiler/lower.py": PREFIX}))
    print("stub alone:", {k: len(v) for k, v in library_evidence(stub, seed, ("5.1",)).items()})

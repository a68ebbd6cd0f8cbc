"""Task 7.1 after the fourth red team (tests/redteam/REPORT4.md there: G2, H10, H11).

G2: Triton's interpreter re-reads the kernel's source and compiles it again without labkit's
guards, after copying its own module's globals (inspect, np, partial, ...) into the kernel's; a
kernel that computed nothing reached the launcher's ``out`` through ``inspect.stack()``. Now the
source the interpreter compiles is checked at each launch (``harness_ops.kernel_reads_only_its_own``):
names only its own, tl/triton, its file's @triton.jit helpers and constants, a few builtins;
attributes only Triton's. H10/H11: ``NAME = tl.constexpr(v)`` and ``from triton import jit`` are
kept with the kernel (``judge.library_source``), so honest files get full marks. Graded as
``tests/test_grading_redteam.py`` grades (pass 1's spec, the answer loaded under the policy,
``evidence.compare``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

from honest3 import HONEST as H3  # noqa: E402

pytest.importorskip("triton")

# the red team's answer (fix_attacks4.ATTACKS["7.1", "interpreter_inspect"]): computes nothing
G2 = '''
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    for info in inspect.stack():
        for name, loc in inspect.getmembers(info.frame):
            if name == "f_locals" and "out" in loc and "x" in loc and "block" in loc:
                loc["out"].copy_(loc["x"].softmax(-1))
'''
# H10: a module constant written as a call (fix_attacks4.HONEST["7.1", "constexpr_call"])
H10 = H3["7.1", "jit_helper_control"].replace(
    "@triton.jit\ndef online_update", "NEG_INF = tl.constexpr(float('-inf'))\n\n\n@triton.jit\ndef online_update"
).replace("other=-float(\"inf\")", "other=NEG_INF")
# H11: triton.jit imported by name (fix_attacks4.HONEST["7.1", "jit_by_name"])
H11 = H3["7.1", "jit_helper"].replace("import triton\n", "import triton\nfrom triton import jit\n").replace(
    "@triton.jit\ndef online_update", "@jit\ndef online_update")
# Triton's names by other routes: triton.language by another name, tl.math, a method, a static assert
NAMES = H11.replace("import triton\n", "import triton\nimport triton.language as language\n").replace(
    "    m = tl.max(row_max, axis=0)\n",
    "    m = tl.max(row_max, axis=0)\n    tl.static_assert(BLOCK > 0)\n"
    "    m = m.to(language.float32) + 0.0 * tl.math.exp(m - m) * BLOCK\n")
# the same honest shape, wrong: the running sum is never rescaled when the max grows
WRONG = H11.replace("row_sum = row_sum * rescale +", "row_sum = row_sum +")


def _grade(source: str, seed: int = 5) -> list[str]:
    from test_grading_redteam import _grade as grade

    from labkit.grading import harness

    return grade("7.1", harness.library_answer("7.1", source), seed=seed)


def test_g2_interpreter_globals_forgery_fails() -> None:
    problems = _grade(G2)
    assert problems and all("refused" in p for p in problems), problems


@pytest.mark.parametrize("source", [H10, H11, NAMES], ids=["H10_constexpr_call", "H11_jit_by_name",
                                                          "triton_names"])
def test_honest_kernel_files_get_full_marks(source: str) -> None:
    assert _grade(source) == []


def test_a_wrong_kernel_still_fails() -> None:
    assert _grade(WRONG) == ["the kernel's outputs differ from torch.softmax (or it left columns unwritten)"]


# -- the launch check, one route at a time (no launch: fast) ------------------------------------------
HEAD = "import triton\nimport triton.language as tl\n\n\n"
SIG = "def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):\n"
ROUTES = {
    "a_name_triton_injects": ("    p = partial(tl.load, in_ptr)\n", "reads 'partial'"),
    "a_notebook_module": ("    torch.zeros(1)\n", "reads 'torch'"),
    "triton_internals": ("    triton.runtime.interpreter.np.zeros(1)\n", "'.runtime'"),
    "tl_submodule_by_alias": ("    lang = tl\n    lang.core.dtype\n", "'.core'"),
    "interpreter_data": ("    x = tl.load(in_ptr)\n    x.handle.data.fill(1)\n", "'.handle'"),
    "comprehension_scope": ("    a = [inspect for inspect in range(2)]\n", "nested"),
    "lambda": ("    f = lambda: 1\n", "nested"),
    "second_def_line": ('    s = """\ndef softmax_kernel(out_ptr):\n    pass\n"""\n', "one line that begins with 'def'"),
}
CONSTANTS = {   # a module name bound to something a kernel may not read, then read by the kernel
    # (math passes the file's constant rule: the kernel check refuses it)
    "a_module": ("import math\nSTASH = math\n", "    STASH.floor(1)\n", "reads 'STASH'"),
    # (refused at load since REPORT6 M1: a constant names only constants, tl's and math's names)
    "a_notebook_module": ("STASH = torch\n", "    STASH.zeros(1)\n", "may read 'torch'"),
    # (refused at load since REPORT5: a 7.1 file holds jit functions and constants only)
    "a_function": ("def helper(x):\n    return x\n", "    helper(1)\n", "helper is not a @triton.jit function"),
}


def _refusal(source: str) -> str:
    import torch
    import triton
    import triton.language as tl

    from labkit.grading import harness, harness_ops
    from labkit.grading.restrict import Refused

    ns = harness.load_answer("7.1", harness.library_answer("7.1", source),
                             {"triton": triton, "tl": tl, "torch": torch})
    if "__refused__" in ns:           # the file's shape (harness_ops.file_shape71)
        return ns["__refused__"]
    assert "__error__" not in ns, ns["__error__"]
    with pytest.raises(Refused) as info:
        harness_ops.kernel_reads_only_its_own(ns["softmax_kernel"])
    return str(info.value)


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_kernel_reads_only_its_own(name: str) -> None:
    body, why = ROUTES[name]
    assert why in _refusal(HEAD + "@triton.jit\n" + SIG + body)


@pytest.mark.parametrize("name", sorted(CONSTANTS))
def test_kernel_reads_only_plain_constants_and_jit_helpers(name: str) -> None:
    top, body, why = CONSTANTS[name]
    assert why in _refusal(HEAD + top + "\n\n@triton.jit\n" + SIG + body)


def test_honest_kernels_pass_the_launch_check() -> None:
    """(fast) H10's and H11's files, and REPORT3's, read nothing outside the list (no launch)."""
    import triton
    import triton.language as tl

    from labkit.grading import harness, harness_ops

    for source in (H10, H11, H3["7.1", "jit_helper"], H3["7.1", "module_constant"]):
        ns = harness.load_answer("7.1", harness.library_answer("7.1", source), {"triton": triton, "tl": tl})
        harness_ops.kernel_reads_only_its_own(ns["softmax_kernel"])


def test_library_source_keeps_triton_imports_as_assignments() -> None:
    from labkit.grading.judge import library_source

    kept = library_source(H11.replace("from triton import jit", "from triton import jit, language as tl"),
                          ("softmax_kernel",))
    assert "jit = triton.jit\n" in kept and "tl =" not in kept and "import" not in kept
    assert "NEG_INF = tl.constexpr" in library_source(H10, ("softmax_kernel",))

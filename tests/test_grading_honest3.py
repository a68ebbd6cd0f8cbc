"""Honest answers the third red team found losing points (tests/redteam/REPORT3.md, H6-H9), each
now graded as the student's own check cell says, and a wrong answer of the same shape that still
fails.

H6 (9.1): an operator of the answer's own bound to `sqdist` is what grading measures, as the
notebook's check does. H7 (12.2, any fix task): a name the answer reads from another cell makes the
notebook's check FAIL, saying so, as grading (which runs the lesson and this cell only) fails. H8
(7.1): the library file's @triton.jit helpers and constants the kernel reads are loaded with it.
H9 (8.3, any prediction): a numpy number is a number; a value that is not plain data is said to be
returned, not raised. Graded as ``tests/test_grading_redteam.py`` grades (pass 1's spec, the answer
loaded under the policy, ``evidence.compare``), with the lesson cells a fix judge notebook runs.
All but 12.2's (about 8 s each) take a few seconds: they run in the fast subset.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


from test_grading_redteam3 import _grade_judge  # noqa: E402  (the lesson cells a judge notebook runs)

# -- H6: 9.1, an operator of the answer's own, complete, bound to `sqdist` ---------------------------
OWN_OP = '''
@torch.library.custom_op("labkit_ex9::sqdist_QUALNAME", mutates_args=())
def sqdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)


@sqdist.register_fake
def sqdist_fake(x, y):
    return x.new_empty(x.shape[0], y.shape[0])


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward(ctx, grad):
    x, y = ctx.saved_tensors
    return 2 * (grad.sum(1, keepdim=True) * x - grad @ y), 2 * (grad.sum(0)[:, None] * y - grad.T @ x)


sqdist.register_autograd(backward, setup_context=setup_context)
'''
OWN_OP_WRONG = OWN_OP.replace("return 2 * (grad.sum(1", "return (grad.sum(1")   # half grad_x


def _named(source: str, qualname: str) -> str:
    """The operator under a name of its own: torch keeps every registration for the process, and
    grading (a fresh process) registers the answer's operator once."""
    return source.replace("sqdist_QUALNAME", qualname)


def test_9_1_an_operator_of_the_answers_own_passes_in_the_notebook_and_at_grading() -> None:
    import fairness

    _, out = fairness.run_cells("9.1", _named(OWN_OP, "sqdist_h3a"), until_check=True, seed=0)
    assert "Task 9.1: PASS" in out
    assert _grade_judge("9.1", _named(OWN_OP, "sqdist_h3b"), seed=5) == []


def test_9_1_an_operator_of_the_answers_own_with_a_wrong_backward_fails_in_both() -> None:
    import fairness

    _, out = fairness.run_cells("9.1", _named(OWN_OP_WRONG, "sqdist_h3c"), until_check=True, seed=0)
    assert "Task 9.1: FAIL — gradients differ from the derivative of sqdist" in out, out
    assert _grade_judge("9.1", _named(OWN_OP_WRONG, "sqdist_h3d"), 5) == [
        "gradients differ from the derivative of sqdist"]


# -- H7: a helper from another answer cell ------------------------------------------------------------
HELPER_12 = '''
def class_counts(y, classes):
    return F.one_hot(y, classes).to(torch.float32)
'''
USES_HELPER = '''
class BalancedLoss(SensorNet):
    def loss(self, logits, y):
        per = F.cross_entropy(logits, y, reduction="none")
        member = class_counts(y, self.n_classes).to(per.dtype)
        count = member.sum(0)
        return ((per @ member) / count.clamp(min=1)).sum() / (count > 0).sum()
'''


def test_outside_names_are_those_of_other_cells_only() -> None:
    """(fast) what the check flags: names the notebook holds that neither the answer nor the
    lesson's cells bind; the answer's own names, arguments and the lesson's names are not."""
    from labkit.grading.judge import outside_names

    ctx = {"class_counts": object(), "SensorNet": object(), "F": object(), "torch": object(),
           "logits": object(), "per": object()}
    assert outside_names("12.2", USES_HELPER, ctx) == ["class_counts"]
    assert outside_names("12.2", HELPER_12 + USES_HELPER, ctx) == []
    assert outside_names("12.2", USES_HELPER, {k: v for k, v in ctx.items() if k != "class_counts"}) == []


def _notebook_check_12_2(source: str, helper: str) -> str:
    """12.2's check as it runs in a student's kernel where ``helper`` ran in another cell first."""
    import fairness

    from labkit.grading import harness

    ns, _ = fairness.run_cells("12.2", source, until_check=False, seed=0)
    exec(helper, ns)                              # another cell, run earlier in the notebook
    ns["In"] = ["", helper, source]               # IPython's record of the cells run
    out = io.StringIO()
    with fairness.grade_seed(0), contextlib.redirect_stdout(out):
        harness.check("12.2", ns)
    return out.getvalue()


@pytest.mark.slow
def test_12_2_a_helper_from_another_cell_fails_in_the_notebook_as_at_grading() -> None:
    out = _notebook_check_12_2(USES_HELPER, HELPER_12)
    assert "Task 12.2: FAIL — your answer uses class_counts, defined outside this task's answer " \
           "cell" in out, out
    assert _grade_judge("12.2", USES_HELPER, seed=5)          # grading: NameError, no marks


@pytest.mark.slow
def test_12_2_the_helper_in_the_answer_cell_passes_in_both() -> None:
    source = HELPER_12 + USES_HELPER
    assert "Task 12.2: PASS" in _notebook_check_12_2(source, "")
    assert _grade_judge("12.2", source, seed=5) == []


# -- H8: 7.1, a @triton.jit helper and a module-level constant in the library file --------------------
KERNEL = """
import triton
import triton.language as tl


@triton.jit
def online_update(row_max, row_sum, x, mask):
    new_max = tl.maximum(row_max, x)
    rescale = tl.where(new_max == -float("inf"), 0.0, tl.exp(row_max - new_max))
    row_sum = row_sum * rescale + tl.where(mask, tl.exp(x - new_max), 0.0)
    return new_max, row_sum


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    row_max = tl.full([BLOCK], -float("inf"), tl.float32)
    row_sum = tl.full([BLOCK], 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=NEG_INF)
        row_max, row_sum = online_update(row_max, row_sum, x, mask)
    m = tl.max(row_max, axis=0)
    total = tl.sum(row_sum * tl.exp(row_max - m), axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=NEG_INF)
        tl.store(out_ptr + row * out_stride + start + cols, tl.exp(x - m) / total, mask=mask)


def softmax(x, block=16):
    return _torch.launch_it(softmax_kernel, x, block)


NEG_INF: tl.constexpr = float("-inf")
UNUSED = _torch.anything()
"""
# the helper forgets to rescale the running sum when the max grows
KERNEL_WRONG = KERNEL.replace("row_sum = row_sum * rescale +", "row_sum = row_sum +")


def test_library_source_keeps_what_the_kernel_reads() -> None:
    """(fast) the kernel, the jit helper and the constant it reads; not the imports, the launcher or
    a line the kernel does not read."""
    from labkit.grading.judge import library_source

    kept = library_source(KERNEL, ("softmax_kernel",))
    assert "def online_update" in kept and "def softmax_kernel" in kept and "NEG_INF: tl.constexpr" in kept
    assert "import" not in kept and "def softmax(" not in kept and "UNUSED" not in kept
    assert kept.index("def online_update") < kept.index("def softmax_kernel") < kept.index("NEG_INF")


@pytest.mark.parametrize("source,passes", [(KERNEL, True), (KERNEL_WRONG, False)],
                         ids=["helper_and_constant", "wrong_helper"])
def test_7_1_a_jit_helper_and_a_constant_are_loaded_with_the_kernel(source: str, passes: bool) -> None:
    from labkit.grading import harness

    problems = _grade_judge("7.1", harness.library_answer("7.1", source), seed=5)
    if passes:
        assert problems == []
    else:
        assert problems == ["the kernel's outputs differ from torch.softmax (or it left columns "
                            "unwritten)"]


# -- H9: numeric predictions computed with numpy ------------------------------------------------------
NUMPY_PROD = '''
import numpy as np


def predict_step_flops(widths, batch):
    total = 0
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        mm = 2 * np.prod([batch, a, b])
        total += mm * (3 if k > 0 else 2)
    return total
'''


def test_numpy_scalars_are_numbers_exactly() -> None:
    np = pytest.importorskip("numpy")
    from labkit.grading import evidence as ev

    got = ev.canonical([np.int64(7), np.uint64(2**63 + 1), np.float32(0.5), np.float64(2.0),
                        np.str_("a")])
    assert got == [7, 2**63 + 1, 0.5, 2, "a"] and [type(v) for v in got] == [int, int, float, int, str]
    # a bool is not a number, numpy's neither; NaN is not a number
    assert ev.prediction_problems("f", [ev.canonical(np.bool_(True))], [1], "cases", "flops") == \
        ["1 of 1 cases wrong (#0; 0 predicted too few flops; 0 too many; 1 not a number)"]
    assert ev.prediction_problems("f", [ev.canonical(np.float64("nan"))], [1], "cases", "flops") == \
        ["1 of 1 cases wrong (#0; 0 predicted too few flops; 0 too many; 1 not a number)"]
    assert ev.prediction_problems("f", [1, True], [1, True], "cases") == []


def test_a_value_that_is_not_plain_data_is_said_returned_not_raised() -> None:
    np = pytest.importorskip("numpy")
    from labkit.grading import evidence as ev

    class Leaky:          # a student's class: its name could carry what it saw; never echoed
        pass

    got = ev.predict_all(lambda n: np.complex128(n), [[1], [2]])
    assert got == ["not plain data: numpy.complex128"] * 2
    assert ev.prediction_problems("f", got, [1, 2], "cases") == [
        "f returned numpy.complex128: a prediction is a plain number, string, bool, list or dict "
        "(convert it, e.g. int(...) or float(...))"]
    for forged in (ev.predict_all(lambda n: [n, Leaky()], [[1]]), ["not plain data: hidden_case_42"]):
        (why,) = ev.prediction_problems("f", forged, [1], "cases")
        assert why.startswith("f returned an object of a class of its own:"), why
    assert ev.predict_all(lambda n: 1 / 0, [[1]]) == ["error: ZeroDivisionError"]


def test_8_3_a_numpy_count_passes_and_a_wrong_one_fails() -> None:
    import fairness

    ok, out = fairness.grade_answer("8.3", {"cell": NUMPY_PROD}, seed=3)
    assert ok, out
    ok, out = fairness.grade_answer("8.3", {"cell": NUMPY_PROD.replace("(3 if k", "(4 if k")}, seed=3)
    assert not ok and "wrong" in out and "raised" not in out, out


# -- H7 for predictions: a helper from another cell ---------------------------------------------------
FLOPS_HELPER = '''
def layer_flops(a, b, batch):
    return 2 * a * b * batch
'''
USES_FLOPS_HELPER = '''
def predict_step_flops(widths, batch):
    total = 0
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        total += layer_flops(a, b, batch) * (3 if k > 0 else 2)
    return total
'''


def _notebook_check_8_3(source: str, helper: str) -> str:
    """8.3's check cell as a student's kernel runs it, ``helper`` run in another cell before."""
    import fairness

    ns, _ = fairness.run_cells("8.3", source, until_check=False, seed=0)
    exec(helper, ns)
    ns["In"] = ["", helper, source]               # IPython's record of the cells run
    out = io.StringIO()
    with fairness.grade_seed(0), contextlib.redirect_stdout(out):
        exec(fairness.check_cell("8.3"), ns)
    return out.getvalue()


def test_8_3_a_helper_from_another_cell_fails_in_the_notebook_as_at_grading() -> None:
    import fairness

    out = _notebook_check_8_3(USES_FLOPS_HELPER, FLOPS_HELPER)
    assert "Task 8.3: FAIL — predict_step_flops uses layer_flops, defined outside the prediction " \
           "answer cells" in out, out
    ok, printed = fairness.grade_answer("8.3", {"cell": USES_FLOPS_HELPER}, seed=3)
    assert not ok and "raised NameError" in printed, printed


def test_8_3_the_helper_in_the_answer_cell_passes_in_both() -> None:
    import fairness

    source = FLOPS_HELPER + USES_FLOPS_HELPER
    assert "Task 8.3: PASS" in _notebook_check_8_3(source, "")
    ok, printed = fairness.grade_answer("8.3", {"cell": source}, seed=3)
    assert ok, printed

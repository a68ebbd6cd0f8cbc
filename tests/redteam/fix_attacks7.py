"""Red team 7: answers for fix-type tasks (graded by run_fix6.py as grading does)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fix_attacks5 import ATTACKS as _A5  # noqa: E402

ATTACKS: dict[tuple[str, str], str] = {}
HONEST: dict[tuple[str, str], str] = {}

# 11.2: J2's mode, its handler a function not named __torch_dispatch__ (python_handlers looks
# for frames by that name)
ATTACKS["11.2", "handler_renamed"] = _A5["11.2", "mm_as_mul_sum"].replace(
    "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):",
    "    def hide(self, func, types, args=(), kwargs=None):").replace(
    "        return func(*args, **(kwargs or {}))\n",
    "        return func(*args, **(kwargs or {}))\n\n    __torch_dispatch__ = hide\n")
ATTACKS["11.2", "handler_renamed_control"] = ATTACKS["11.2", "handler_renamed"].replace(
    "Hide(True)))", "Hide(False)))")

# 7.1: P1's route (a nested `def softmax_kernel` that Triton's interpreter compiles alone)
from fix_attacks6 import HONEST as _H6  # noqa: E402

_BASE71 = _H6["7.1", "plain_float_const"]
# the honest kernel with a nested copy of itself at its end (the interpreter would compile only it)
ATTACKS["7.1", "nested_def_kernel"] = _BASE71.rstrip() + (
    "\n    def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK):\n"
    "        pass\n")

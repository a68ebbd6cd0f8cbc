"""Red team 6 (session 26, issue 29): answers that gain points without a correct answer, and honest
answers that lose them (tests/redteam/REPORT6.md says why). ATTACKS[task, name] = answer source."""

ATTACKS: dict[tuple[str, str], str] = {}
HONEST: dict[tuple[str, str], str] = {}

# 7.1: a module constant `C = min((1,), key=side)` (min and a keyword: file_shape71's allow-list)
# calls the jit function `side` at load time as a *device function*: InterpretedFunction.__call__
# recompiles `side` from its source (no labkit guards) after copying the interpreter's globals
# (inspect, ...) into the answer's module. side replaces Triton's GridExecutor.__call__ (Triton's
# classes are outside the seal), then removes itself and the copied modules from the module.
ATTACKS["7.1", "min_key_device_call"] = '''
import triton
import triton.language as tl


@triton.jit
def side(v):
    members = dict(inspect.getmembers(inspect))
    put = dict(inspect.getmembers(members["builtins"]))["setattr"]
    put(GridExecutor, "__call__", lambda self, *a, **k: a[0].copy_(a[1].softmax(-1)))
    scope = dict(inspect.getmembers(inspect.currentframe()))["f_globals"]
    scope.pop("side", None)
    ismodule = inspect.ismodule
    for name, value in list(scope.items()):
        if ismodule(value) and name not in ("tl", "triton", "torch"):
            scope.pop(name)
    return v


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    if BLOCK < C:
        pass


C = min((1,), key=side)
'''
# the same file, side changing nothing of Triton's: FAIL (the kernel writes nothing)
ATTACKS["7.1", "min_key_device_call_control"] = ATTACKS["7.1", "min_key_device_call"].replace(
    '    put(GridExecutor, "__call__", lambda self, *a, **k: a[0].copy_(a[1].softmax(-1)))\n', '')
assert "put(GridExecutor" not in ATTACKS["7.1", "min_key_device_call_control"]


# -- honest 7.1 variants (graded like the forgeries) ------------------------------------------------
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from honest3 import HONEST as _H3  # noqa: E402

_C = _H3["7.1", "jit_helper_control"]
_OTHER = 'other=-float("inf")'
assert _OTHER in _C and "def online_update(row_max, row_sum, x, mask):\n" in _C


def _v(name: str, text: str) -> None:
    assert text != _C, name
    HONEST["7.1", name] = text


_v("math_in_kernel", "import math\n" + _C.replace(_OTHER, "other=-math.inf"))
_v("constexpr_call_const", _C.replace("@triton.jit\ndef online_update",
   'NEG_INF = tl.constexpr(float("-inf"))\n\n\n@triton.jit\ndef online_update').replace(_OTHER, "other=NEG_INF"))
_v("plain_float_const", _C.replace("@triton.jit\ndef online_update",
   'NEG_INF = float("-inf")\n\n\n@triton.jit\ndef online_update').replace(_OTHER, "other=NEG_INF"))
_v("from_triton_import_language", _C.replace("import triton.language as tl", "from triton import language as tl"))
_v("annotated_args", _C.replace("n_cols, in_stride, out_stride, BLOCK", "n_cols: int, in_stride: int, out_stride: int, BLOCK"))
_v("helper_docstring", _C.replace("def online_update(row_max, row_sum, x, mask):\n",
   'def online_update(row_max, row_sum, x, mask):\n    """Fold one block into the running max and sum; returns both."""\n'))
_v("private_helper", _C.replace("online_update", "_online_update"))
_v("constexpr_import", _C.replace("import triton.language as tl", "import triton.language as tl\nfrom triton.language import constexpr")
   .replace("BLOCK: tl.constexpr", "BLOCK: constexpr"))
_v("jit_import", _C.replace("import triton\n", "import triton\nfrom triton import jit\n").replace("@triton.jit\n", "@jit\n"))
_v("element_ty_cast", _C.replace("tl.exp(x - m) / total, mask=mask)",
   "(tl.exp(x - m) / total).to(out_ptr.dtype.element_ty), mask=mask)"))
_v("int64_row", _C.replace("row = tl.program_id(0)", "row = tl.program_id(axis=0).to(tl.int64)"))
_v("full_spelling", _C.replace("tl.exp(x - m) / total", "triton.language.exp(x - m) / total").replace(
   "import triton.language as tl", "import triton.language\nimport triton.language as tl"))
_v("math_module_exp", _C.replace("tl.exp(x - m) / total", "tl.math.exp(x - m) / total"))
_v("device_assert", _C.replace("row = tl.program_id(0)\n", "row = tl.program_id(0)\n    tl.device_assert(n_cols > 0)\n"))
_v("python_assert", _C.replace("row = tl.program_id(0)\n", "row = tl.program_id(0)\n    assert BLOCK > 0, \"BLOCK must be positive\"\n"))
_v("future_annotations", "from __future__ import annotations\n" + _C)
_v("annassign_const", _C.replace("@triton.jit\ndef online_update",
   'NEG_INF: tl.constexpr = float("-inf")\n\n\n@triton.jit\ndef online_update').replace(_OTHER, "other=NEG_INF"))
_v("noinline_helper", _C.replace("@triton.jit\ndef online_update", "@triton.jit(noinline=True)\ndef online_update"))
_v("helper_default", _C.replace("def online_update(row_max, row_sum, x, mask):", "def online_update(row_max, row_sum, x, mask, axis: tl.constexpr = 0):"))
_v("while_loop", _C.replace("    for start in range(0, n_cols, BLOCK):\n        mask = start + cols < n_cols\n        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=-float(\"inf\"))\n        new_max",
   "    start = 0\n    while start < n_cols:\n        mask = start + cols < n_cols\n        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=-float(\"inf\"))\n        start += BLOCK\n        new_max", 1))
_v("dtype_const", _C.replace("@triton.jit\ndef online_update", "ACC = tl.float32\n\n\n@triton.jit\ndef online_update")
   .replace("tl.float32)", "ACC)"))
_v("fstring_static_print", _C.replace("row = tl.program_id(0)\n", "row = tl.program_id(0)\n    tl.static_print(f\"BLOCK={BLOCK}\")\n"))
_v("kernel_docstring_def_word", _C.replace("BLOCK: tl.constexpr):\n",
   'BLOCK: tl.constexpr):\n    """Row softmax.\n\n    define: one program per row; two passes over the row.\n    """\n', 1))


# M1b: the same route, the payload a dict item instead of a class attribute: Triton's cache of
# rewritten functions gets, for the kernel's own function, a lambda that copies torch's softmax
# into the launch's `out` (found in GridExecutor.__call__'s frame); the kernel's checked source is
# never compiled. Sealing Triton's class attributes alone would not see it.
ATTACKS["7.1", "rewritten_fn_item"] = ATTACKS["7.1", "min_key_device_call"].replace(
    '''    members = dict(inspect.getmembers(inspect))
    put = dict(inspect.getmembers(members["builtins"]))["setattr"]
    put(GridExecutor, "__call__", lambda self, *a, **k: a[0].copy_(a[1].softmax(-1)))
''', '''    frame = inspect.currentframe
    grab = inspect.getmembers
    InterpretedFunction.rewritten_fn[softmax_kernel.fn] = lambda *a, **k: [
        d[0].copy_(d[1].softmax(-1)) for d in [dict(grab(dict(grab(frame()))["f_back"]))["f_locals"]["args_dev"]]]
''')
assert "rewritten_fn" in ATTACKS["7.1", "rewritten_fn_item"]

# M1b, hidden (fixer's variants, for the second layer: harness_ops._runtime_kept): side also drops
# its own entry from the cache; and the planted entry renamed after the kernel (a lambda whose
# __name__ is set through the setattr M1 reaches), so only "no entry of the answer's before a
# launch" tells it apart
_SCOPE = '    scope = dict(inspect.getmembers(inspect.currentframe()))["f_globals"]\n'
ATTACKS["7.1", "rewritten_fn_item_hidden"] = ATTACKS["7.1", "rewritten_fn_item"].replace(_SCOPE, '''\
    for key in list(InterpretedFunction.rewritten_fn):
        if dict(inspect.getmembers(key))["__name__"] == "side":
            InterpretedFunction.rewritten_fn.pop(key)
''' + _SCOPE)
ATTACKS["7.1", "rewritten_fn_item_named"] = ATTACKS["7.1", "rewritten_fn_item_hidden"].replace(
    "    InterpretedFunction.rewritten_fn[softmax_kernel.fn] = lambda *a, **k: [", '''\
    members = dict(inspect.getmembers(inspect))
    put = dict(inspect.getmembers(members["builtins"]))["setattr"]
    fake = lambda *a, **k: [
        d[0].copy_(d[1].softmax(-1)) for d in [dict(grab(dict(grab(frame()))["f_back"]))["f_locals"]["args_dev"]]]
    put(fake, "__name__", "softmax_kernel")
    InterpretedFunction.rewritten_fn[softmax_kernel.fn] = fake
    junk = lambda *a, **k: [''')
assert "pop(key)" in ATTACKS["7.1", "rewritten_fn_item_hidden"]
assert "put(fake" in ATTACKS["7.1", "rewritten_fn_item_named"]

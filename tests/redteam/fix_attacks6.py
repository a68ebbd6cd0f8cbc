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

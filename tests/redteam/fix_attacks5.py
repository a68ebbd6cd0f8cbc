"""Red team 5 (session 26, issue 29): answers that gain points without a correct answer
(tests/redteam/REPORT5.md says why each works). ATTACKS[task, name] = answer source."""

ATTACKS: dict[tuple[str, str], str] = {}

# 7.1: a second @triton.jit function, never the kernel, launched at load time by a module constant
# the kernel reads (judge.library_source keeps it, and what it reads, transitively). In interpret
# mode triton.jit makes an InterpretedFunction, whose launch re-compiles the function from its
# *source* (no labkit guards) after copying the interpreter's globals (inspect, ...) into the
# answer's module. kernel_reads_only_its_own checks the kernel (and the helpers it reads), never
# this function: its body reads the harness module's globals through the frames and replaces
# harness_ops' launch (a module the seal does not hold).
ATTACKS["7.1", "side_launch"] = '''
import triton
import triton.language as tl


@triton.jit
def side():
    for info in inspect.stack():
        for name, loc in inspect.getmembers(info[0]):
            if name == "f_globals" and "kernel_reads_only_its_own" in loc and "launch" in loc:
                loc["launch"] = lambda kernel, x, block: x.softmax(-1)
                loc["kernel_reads_only_its_own"] = lambda *args: None


def plain():
    return 0


def get_fn(self):
    side[(1,)]()
    return plain


class Hook(triton.KernelInterface):
    fn = property(get_fn)


HOOK = Hook()


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    if BLOCK < 0:
        HOOK
'''
ATTACKS["7.1", "side_launch_control"] = ATTACKS["7.1", "side_launch"].replace(
    'loc["launch"] = lambda kernel, x, block: x.softmax(-1)', 'pass').replace(
    'loc["kernel_reads_only_its_own"] = lambda *args: None', 'pass')


# 7.1, J1 without KernelInterface: the check's _plain(value) reads `.value` of anything that is a
# tl.constexpr; the answer's own subclass makes it a property, which launches `side` as in J1.
ATTACKS["7.1", "constexpr_property"] = ATTACKS["7.1", "side_launch"].replace(
    '''def plain():
    return 0


def get_fn(self):
    side[(1,)]()
    return plain


class Hook(triton.KernelInterface):
    fn = property(get_fn)


HOOK = Hook()
''', '''def get_value(self):
    side[(1,)]()
    return 0


class Hook(tl.constexpr):
    def __init__(self):
        pass

    value = property(get_value)


HOOK = Hook()
''')
assert "get_value" in ATTACKS["7.1", "constexpr_property"]


# 7.1, simpler: the kernel itself is an instance of the answer's own KernelInterface subclass (a
# class decorator); `fn` (what the check reads the source of) is an innocent function of the file,
# and `run` (what kernel[grid](...) calls) fills `out` with torch's softmax. No escape needed.
ATTACKS["7.1", "own_kernel_interface"] = '''
import triton
import triton.language as tl


def plain():
    return 0


class Launcher(triton.KernelInterface):
    def __init__(self, body):
        self.fn = plain

    def run(self, out, x, *args, grid=None, warmup=False, **kwargs):
        out.copy_(x.softmax(-1))


@Launcher
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    pass
'''


# 2.2, G4 again: the harness's backend called from inside the answer's own backend (Dynamo is
# compiling: from_dynamo passes) with Dynamo's GraphModule of a trivial function, whose `forward`
# the answer replaced first (an nn.Module reached from its own object, created after the answer
# loaded: the store guard lets it through). Each step then calls the recorder's `run` by hand:
# a "graph run" of eager momentum arithmetic; no step is ever compiled.
ATTACKS["2.2", "own_backend_forward"] = '''
import torch


class Wrap:
    def __init__(self, backend, momentum):
        self.backend = backend
        self.momentum = momentum
        self.run = None

    def step(self, *args):
        if len(args) == 1:
            return args[0] + 1
        w, v, g, lr = args
        v = self.momentum * v + g
        return w - lr * v, v

    def __call__(self, gm, example_inputs):
        self.gm = gm
        self.gm.forward = self.step
        self.run = self.backend(gm, example_inputs)
        return self.run


def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    wrap = Wrap(backend, momentum)
    torch.compile(lambda t: t + 1, backend=wrap)(torch.zeros(1))
    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        w, v = wrap.run(w, v, g, lr)
        norms.append(float(v.norm()))
    return w, norms
'''


# 11.2: checkpoint the whole block (nothing kept), with a recompute context (checkpoint's context_fn)
# that is the answer's own TorchDispatchMode (torch.utils.checkpoint re-exports the class): it
# answers aten.mm with a broadcast multiply and a sum. Autograd, above the mode, saves what mm's
# backward needs as before; the check's own mode, below it, counts aten.mm/addmm/bmm only: the
# backward recomputes every matmul and is seen to recompute none.
ATTACKS["11.2", "mm_as_mul_sum"] = '''
import torch
from torch.utils.checkpoint import TorchDispatchMode, checkpoint


class Hide(TorchDispatchMode):
    def __init__(self, on):
        super().__init__()
        self.on = on

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on and func == torch.ops.aten.mm.default:
            a, b = args
            return (a.unsqueeze(-1) * b).sum(-2)
        return func(*args, **(kwargs or {}))


def body(x, weights):
    for w in weights:
        a = x @ w
        x = torch.tanh(a) * torch.sigmoid(a) + x
    return x.sum(dim=-1)


def block_lean(x, weights):
    return checkpoint(body, x, weights, use_reentrant=False,
                      context_fn=lambda: (Hide(False), Hide(True)))
'''
ATTACKS["11.2", "mm_as_mul_sum_control"] = ATTACKS["11.2", "mm_as_mul_sum"].replace(
    "Hide(True)))", "Hide(False)))")


# -- honest answers (graded like the forgeries) ---------------------------------------------------
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from honest3 import HONEST as _H3  # noqa: E402

HONEST: dict[tuple[str, str], str] = {}
# 7.1: a module constant computed with math (the student's file imports math; a plain float)
HONEST["7.1", "math_constant"] = _H3["7.1", "jit_helper_control"].replace(
    "import triton\n", "import math\n\nimport triton\n").replace(
    "@triton.jit\ndef online_update", "NEG_INF = -math.inf\n\n\n@triton.jit\ndef online_update").replace(
    'other=-float("inf")', "other=NEG_INF")
# 7.1: the same honest kernel under @triton.jit(do_not_specialize=...) / @triton.jit()
HONEST["7.1", "jit_called"] = _H3["7.1", "jit_helper_control"].replace(
    "@triton.jit\ndef softmax_kernel", "@triton.jit()\ndef softmax_kernel")
HONEST["7.1", "control"] = _H3["7.1", "jit_helper_control"]
for _k, _v in list(HONEST.items()):
    ATTACKS[_k] = _v
_C71 = _H3["7.1", "jit_helper_control"]
# 7.1: exp2 with a log2(e) constant as a constexpr, a docstring, tl.static_assert, tl.range
HONEST["7.1", "exp2_docstring"] = _C71.replace(
    "@triton.jit\ndef online_update", "LOG2E: tl.constexpr = 1.4426950408889634\n\n\n@triton.jit\ndef online_update").replace(
    'BLOCK: tl.constexpr):\n', 'BLOCK: tl.constexpr):\n    """One program per row: an online max and sum, then the normalised row."""\n    tl.static_assert(BLOCK > 0)\n').replace(
    "tl.exp(x - m) / total", "tl.exp2((x - m) * LOG2E) / total").replace(
    "for start in range(0, n_cols, BLOCK):", "for start in tl.range(0, n_cols, BLOCK):")
# 7.1: the row's program id and offsets through a helper returning a tuple, triton.cdiv for the trip count
HONEST["7.1", "cdiv_loop"] = _C71.replace(
    "for start in range(0, n_cols, BLOCK):", "for i in range(0, tl.cdiv(n_cols, BLOCK)):\n        start = i * BLOCK")
for _k, _v in list(HONEST.items()):
    ATTACKS[_k] = _v
# 7.1: black's layout (the signature over several lines), the helper defined after the kernel
_parts = _C71.split("\n\n\n@triton.jit\ndef softmax_kernel")
HONEST["7.1", "black_layout"] = (_parts[0].split("@triton.jit")[0] + "@triton.jit\ndef softmax_kernel" + _parts[1].replace(
    "(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):",
    "(\n    out_ptr,\n    in_ptr,\n    n_cols,\n    in_stride,\n    out_stride,\n    BLOCK: tl.constexpr,\n):", 1)
    + "\n\n@triton.jit" + _parts[0].split("@triton.jit")[1])
for _k, _v in list(HONEST.items()):
    ATTACKS[_k] = _v


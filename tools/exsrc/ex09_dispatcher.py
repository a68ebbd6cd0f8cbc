# %% [markdown] id=intro
# # Exercises 9 — the dispatcher and custom operators
#
# Companion to `09_dispatcher.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. Each check (`# NBVAL_CHECK_OUTPUT`) ends with `Task N.M: PASS` or
# `Task N.M: FAIL — what was wrong`; when grading it runs on hidden inputs and variants.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import numpy as np
import torch
import torch.nn.functional as F
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t9-1-md
# ## Task 9.1 — a custom operator with a fake kernel and a backward (difficulty 3/3, about 25 min)
#
# `sqdist(x, y)` is a custom operator computed in NumPy: for `x` of shape `(n, d)` and `y` of
# shape `(m, d)` it returns the `(n, m)` matrix of squared distances
# $D_{ij} = \sum_k (x_{ik} - y_{jk})^2$. Dynamo cannot look inside it, and autograd does not know its
# derivative. Make it a first-class operator:
#
# 1. a **fake kernel** (`sqdist.register_fake`) so `torch.compile(fullgraph=True)` can trace it
#    (what shape and dtype does the output have? the lesson's op kept its input's shape; this one does
#    not);
# 2. a **backward** (`sqdist.register_autograd(backward, setup_context=...)`) that computes both
#    gradients with tensor ops (derive $\partial D/\partial x$ and $\partial D/\partial y$ yourself).
#
# The check runs `torch.library.opcheck`, `torch.autograd.gradcheck` in float64, and a
# `fullgraph=True` compile, on shapes you have not seen. The check, and grading, measure whatever
# the name `sqdist` holds after your answer cell: the operator above with your registrations, or an
# operator you write yourself, complete, and bind to `sqdist` in the answer cell (its name must be
# new, since `labkit_ex9::sqdist` is taken, and contain `sqdist`, e.g. `labkit_ex9::sqdist2`).
# %% id=op-9-1
@torch.library.custom_op("labkit_ex9::sqdist", mutates_args=())
def sqdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances between the rows of x (n, d) and y (m, d), in NumPy."""
    xn, yn = x.detach().cpu().numpy(), y.detach().cpu().numpy()
    return torch.from_numpy(((xn[:, None, :] - yn[None, :, :]) ** 2).sum(-1)).to(x.device)
# %% id=t9-1
# your answer (Task 9.1)
### BEGIN SOLUTION
@sqdist.register_fake
def _(x, y):
    return x.new_empty(x.shape[0], y.shape[0])


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward(ctx, grad):
    x, y = ctx.saved_tensors
    grad_x = 2 * (grad.sum(1, keepdim=True) * x - grad @ y)
    grad_y = 2 * (grad.sum(0).unsqueeze(1) * y - grad.T @ x)
    return grad_x, grad_y


sqdist.register_autograd(backward, setup_context=setup_context)
### END SOLUTION
# %% id=c9-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# opcheck, the gradients and a fullgraph compile, on hidden shapes
# (the rules and reference values: labkit/grading/harness.py)
harness.check("9.1", globals())
# %% [markdown] id=t9-2-md
# ## Task 9.2 — predict what reaches the dispatcher (difficulty 2/3, about 30 min)
#
# Some PyTorch functions are operators with kernels of their own; others are *composite*: their
# implementation calls other ATen operators, and a `TorchDispatchMode` (which sits below autograd)
# only sees those. `CALLS` below lists some calls on a 2-D float tensor `x` (weights `w`, bias `b`).
# Write `predict_ops(names)`: the list of ATen operator *packets* (such as `"aten.add"`) that a
# dispatch mode records, in order, when the calls run one after another on `x` in eval mode
# (no autograd). Experiment with a mode of your own (lesson 09, section 2) to learn the rule for
# each call, then predict sequences; grading uses sequences you have not seen.
# %% id=calls-9-2
CALLS = {
    "linear": lambda x, w, b: F.linear(x, w, b),
    "matmul": lambda x, w, b: x @ w,
    "gelu": lambda x, w, b: F.gelu(x),
    "layer_norm": lambda x, w, b: F.layer_norm(x, x.shape[-1:]),
    "dropout_eval": lambda x, w, b: F.dropout(x, p=0.5, training=False),
    "softmax": lambda x, w, b: x.softmax(-1),
    "silu": lambda x, w, b: F.silu(x),
    "transpose": lambda x, w, b: x.t(),
}
# %% id=t9-2
# your answer (Task 9.2)
def predict_ops(names: list[str]) -> list[str]:
    """ATen operator packets a dispatch mode records for the calls, in order (Task 9.2)."""
    ### BEGIN SOLUTION
    table = {"linear": ["aten.t", "aten.addmm"], "matmul": ["aten.mm"], "gelu": ["aten.gelu"],
             "layer_norm": ["aten.native_layer_norm"], "dropout_eval": [],
             "softmax": ["aten._softmax"], "silu": ["aten.silu"], "transpose": ["aten.t"]}
    return [op for name in names for op in table[name]]
    ### END SOLUTION
# %% id=c9-2
# NBVAL_CHECK_OUTPUT
from torch.utils._python_dispatch import TorchDispatchMode
from labkit.grading import nbcheck as nc

class Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(f"aten.{func.overloadpacket.__name__}")
        return func(*args, **(kwargs or {}))

r = nc.rng("9.2")
seqs = [([r.choice(sorted(CALLS)) for _ in range(r.randrange(2, 6))],) for _ in range(6)]

def measure(names):
    n = r.randrange(2, 9)
    x, w, b = nc.randn("9.2x", n, n), nc.randn("9.2w", n, n), nc.randn("9.2b", n)
    with torch.no_grad(), Record() as rec:
        for name in names:
            x = CALLS[name](x, w, b)
    return rec.ops

nc.check_predictions("9.2", predict_ops, seqs, measure, "sequences")
# %% [markdown] id=t9-3-md
# ## Task 9.3 — an operator that writes into its input (difficulty 2/3, about 15 min)
#
# `clip_` below clamps a tensor **in place** to `[-limit, limit]`, in NumPy, and the model calls it
# on an intermediate result. As written, `torch.compile(..., fullgraph=True)` fails and
# `torch.library.opcheck` complains. Find out what the operator's declaration gets wrong (read the
# errors), then write a correct operator `clip2_` (namespace `labkit_ex9`) with the same behaviour:
# it modifies its argument and returns nothing, and it must compile into one graph whose result
# matches eager. Lesson 09 showed an operator that returns a new tensor; this one does not.
# %% id=op-9-3
@torch.library.custom_op("labkit_ex9::clip_", mutates_args=())
def clip_(x: torch.Tensor, limit: float) -> None:
    """Clamp x to [-limit, limit] in place (NumPy; the declaration has a bug)."""
    np.clip(x.numpy(), -limit, limit, out=x.numpy())

def model93(x, op, limit):
    y = x * 2
    op(y, limit)
    return y.sin()
# %% id=t9-3
# your answer (Task 9.3)
### BEGIN SOLUTION
@torch.library.custom_op("labkit_ex9::clip2_", mutates_args=("x",))
def clip2_(x: torch.Tensor, limit: float) -> None:
    """Clamp x to [-limit, limit] in place, declared as mutating x."""
    np.clip(x.numpy(), -limit, limit, out=x.numpy())


@clip2_.register_fake
def _(x, limit):
    return None
### END SOLUTION
# %% id=c9-3
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# opcheck, eager and a fullgraph compile, on a hidden size and limit
# (the rules and reference values: labkit/grading/harness.py)
harness.check("9.3", globals())

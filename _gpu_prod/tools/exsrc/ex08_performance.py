# %% [markdown] id=intro
# # Exercises 8 — performance models
#
# Companion to `08_performance.ipynb`. Timings vary from machine to machine, so these exercises
# grade the *models* you use to read timings: how many bytes a computation must move, and how many
# operations it must do. Edit only the cells that start with `# your answer`; keep every cell's id.
# Each check ends with `Task N.M: PASS` or `Task N.M: FAIL — what was wrong`; when grading it runs
# on hidden variants.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t8-1-md
# ## Task 8.1 — the traffic of eager mode (difficulty 2/3, about 30 min)
#
# In eager mode every ATen operator reads its tensor inputs from memory and writes its outputs
# back. `TrafficMeter` below counts exactly that: for each operator that reaches the dispatcher, the
# bytes of its tensor arguments plus the bytes of its results. Write
# `predict_traffic(steps, rows, cols, dtype)`: the bytes the meter counts when the steps run one
# after another on a `(rows, cols)` tensor of `dtype` (`"float32"`, `"float16"` or `"float64"`).
# Think about what each step reads (a bias row is small; a scalar is not a tensor), what shape it
# writes, and which steps are more than one operator. The check calls your function with
# compilation switched off, then measures; grading uses other chains, shapes and dtypes. (A fused
# kernel would read the input once and write the result once: compare your numbers with that.)
# %% id=meter-8-1
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

class TrafficMeter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten((args, kwargs or {}, out))[0]:
            if isinstance(t, torch.Tensor):
                self.bytes += t.numel() * t.element_size()
        return out

STEPS = {
    "exp": lambda x, bias: x.exp(),
    "scale": lambda x, bias: x * 3,
    "add_bias": lambda x, bias: x + bias,
    "center": lambda x, bias: x - x.mean(dim=-1, keepdim=True),
    "softmax": lambda x, bias: x.softmax(dim=-1),
}
# %% id=t8-1
# your answer (Task 8.1)
def predict_traffic(steps: list[str], rows: int, cols: int, dtype: str) -> int:
    """Bytes TrafficMeter counts for the steps on a (rows, cols) tensor of dtype (Task 8.1)."""
    ### BEGIN SOLUTION
    size = {"float32": 4, "float16": 2, "float64": 8}[dtype]
    full, row, col = rows * cols * size, rows * size, cols * size
    per_step = {"exp": 2 * full, "scale": 2 * full, "add_bias": 2 * full + col,
                "center": (full + row) + (full + row + full), "softmax": 2 * full}
    return sum(per_step[s] for s in steps)
    ### END SOLUTION
# %% id=c8-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("8.1")
cases = []
for _ in range(6):
    steps = [r.choice(sorted(STEPS)) for _ in range(r.randrange(1, 5))]
    cases.append((steps, r.randrange(2, 50), r.randrange(2, 50), r.choice(["float32", "float16", "float64"])))

def measure(steps, rows, cols, dt):
    x = nc.randn("8.1x", rows, cols).to(getattr(torch, dt))
    bias = nc.randn("8.1b", cols).to(getattr(torch, dt))
    with TrafficMeter() as meter:
        for s in steps:
            x = STEPS[s](x, bias)
    return meter.bytes

nc.check_predictions("8.1", predict_traffic, cases, measure, "cases", "bytes")
# %% [markdown] id=t8-2-md
# ## Task 8.2 — compute-bound or memory-bound? (difficulty 2/3, about 30 min)
#
# A machine does at most `PEAK_FLOPS` floating-point operations per second and moves at most
# `PEAK_BW` bytes per second. For a matrix product, write `matmul_roofline(kind, shapes, dtype)`
# returning `(flops, nbytes, bound)`: the operations PyTorch's `FlopCounterMode` counts, the fewest
# bytes the op must move (read each input once, write the output once), and `"compute"` or
# `"memory"`, whichever limit the roofline says binds (`"memory"` on a tie). `kind` is `"mm"`
# (`a @ b`), `"bmm"` (batched) or `"addmm"` (`bias + a @ b`, bias of shape `(n,)`); `shapes` are the
# shapes of the tensor arguments in that order. Work out the flop counts yourself (check a few with
# `FlopCounterMode`); grading uses other shapes and dtypes.
# %% id=machine-8-2
PEAK_FLOPS, PEAK_BW = 50e12, 1e12        # an accelerator-like balance: 50 flop per byte
# %% id=t8-2
# your answer (Task 8.2)
def matmul_roofline(kind: str, shapes: list[tuple[int, ...]], dtype: str) -> tuple[int, int, str]:
    """(flops, minimum bytes, binding limit) of one matrix product (Task 8.2)."""
    ### BEGIN SOLUTION
    import math

    size = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[dtype]
    if kind == "bmm":
        (b, m, k), (_, _, n) = shapes
        flops, out = 2 * b * m * n * k, b * m * n
    else:
        a, w = shapes[-2:]
        (m, k), (_, n) = a, w
        flops, out = 2 * m * n * k, m * n
    nbytes = size * (sum(math.prod(s) for s in shapes) + out)
    bound = "compute" if flops / PEAK_FLOPS > nbytes / PEAK_BW else "memory"
    return flops, nbytes, bound
    ### END SOLUTION
# %% id=c8-2
# NBVAL_CHECK_OUTPUT
from torch.utils.flop_counter import FlopCounterMode
from labkit.grading import nbcheck as nc

r = nc.rng("8.2")
cases = []
for _ in range(6):
    kind, dt = r.choice(["mm", "bmm", "addmm"]), r.choice(["float32", "float16", "float64"])
    m, k, n = (r.choice([1, 4, 16, 64, 256, 1024]) for _ in range(3))
    shapes = {"mm": [(m, k), (k, n)], "bmm": [(r.randrange(2, 5), m, k), (0, k, n)],
              "addmm": [(n,), (m, k), (k, n)]}[kind]
    if kind == "bmm":
        shapes[1] = (shapes[0][0], k, n)
    cases.append((kind, shapes, dt))

def measure(kind, shapes, dt):
    args = [torch.zeros(s, dtype=getattr(torch, dt), device="meta") for s in shapes]
    op = {"mm": torch.mm, "bmm": torch.bmm, "addmm": torch.addmm}[kind]
    with FlopCounterMode(display=False) as counter:
        out = op(*args)
    flops = counter.get_total_flops()
    nbytes = sum(a.numel() * a.element_size() for a in args) + out.numel() * out.element_size()
    return flops, nbytes, "compute" if flops / PEAK_FLOPS > nbytes / PEAK_BW else "memory"

nc.check_predictions("8.2", matmul_roofline, cases, measure, "cases",
                     fields=["flops", "bytes", "bound"])
# %% [markdown] id=t8-3-md
# ## Task 8.3 — what a training step costs (difficulty 2/3, about 25 min)
#
# People say "the backward costs about twice the forward". Check how exactly. `mlp(widths)` below is
# a stack of `Linear` layers (with bias) and ReLUs; the input batch does **not** require a gradient,
# the weights do. Write `predict_step_flops(widths, batch)`: the floating-point operations
# `FlopCounterMode` counts for one forward **and** backward (`loss = out.sum(); loss.backward()`).
# Which matrix products does the backward need for each layer, and which one can it skip? The check
# calls your function with compilation switched off, then counts; grading uses other widths and
# batch sizes.
# %% id=mlp-8-3
def mlp(widths):
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])
# %% id=t8-3
# your answer (Task 8.3)
def predict_step_flops(widths: list[int], batch: int) -> int:
    """FLOPs FlopCounterMode counts for one forward+backward of mlp(widths) (Task 8.3)."""
    ### BEGIN SOLUTION
    total = 0
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        mm = 2 * batch * a * b
        total += mm               # forward
        total += mm               # grad of the weight
        if k > 0:
            total += mm           # grad of the layer's input (not needed for the batch itself)
    return total
    ### END SOLUTION
# %% id=c8-3
# NBVAL_CHECK_OUTPUT
from torch.utils.flop_counter import FlopCounterMode
from labkit.grading import nbcheck as nc

r = nc.rng("8.3")
cases = [([r.randrange(2, 65) for _ in range(r.randrange(2, 6))], r.randrange(1, 33)) for _ in range(5)]

def measure(widths, batch):
    model = mlp(widths)
    with FlopCounterMode(display=False) as counter:
        model(nc.randn(f"8.3x{batch}", batch, widths[0])).sum().backward()
    return counter.get_total_flops()

nc.check_predictions("8.3", predict_step_flops, cases, measure, "networks", "FLOPs")

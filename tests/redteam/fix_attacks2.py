"""Forging answers for fix-type tasks (second red team, session 24). Each is the student's answer cell."""
ATTACKS = {}

# 4.1: softplus is -logsigmoid(-x): one fused ATen op (log_sigmoid_forward, and
# log_sigmoid_backward for the gradient) whose name holds no "softplus": no decomposition at all
ATTACKS["4.1", "logsigmoid"] = '''
import torch.nn.functional as F

def softplus(x):
    return -F.logsigmoid(-x)
'''

# 4.1: one fused binary op, logaddexp(x, 0): again no decomposition, no derived backward
ATTACKS["4.1", "logaddexp"] = '''
def softplus(x):
    return torch.logaddexp(x, torch.zeros_like(x))
'''

# 3.3: Scorer's forward, unchanged (print, .item(), a Python int counter), run at run time by
# torch.ops.higher_order.dynamo_bypassing_wrapper: Dynamo traces only `shape_only` (for the output's
# shape) and puts one HOP node in the graph; when the graph runs, the HOP calls wrap(gm)(x) with
# Dynamo disabled: any Python. torch.ops.* is read without the load guard (_under_ops) and
# higher_order is refused only where torch.library is allowed (9.1/9.3).
ATTACKS["3.3", "bypassing_wrapper"] = '''
import torch
LIVE = []


def shape_only(x):
    return x * 1.0


def wrap(gm):
    # (the HOP's output is flattened: the graph takes item 0 of what this returns)
    return LIVE[-1].unfixed_out


class ScorerFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.calls = 0
        LIVE.append(self)

    def unfixed(self, *args):
        x = args[-1]            # (a dynamic-shape graph passes its sizes first)
        self.calls += 1
        h = self.proj(x).tanh()
        print(f"batch {x.shape[0]}: mean {h.mean():.3f}")
        peak = h.abs().max().item()
        h = h / (peak + 1e-6)
        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)

    def unfixed_out(self, *args):
        return (self.unfixed(*args),)

    def forward(self, x):
        return torch.ops.higher_order.dynamo_bypassing_wrapper(wrap, shape_only, x)
'''

# 10.2: the lesson's pooled (int(length): a break, a value-dependent size) run at run time by
# dynamo_bypassing_wrapper; Dynamo traces only a (batch, d) shape stand-in
ATTACKS["10.2", "bypassing_wrapper"] = '''
import torch


def shape_only(x, length):
    return x.sum(dim=1) + length * 0     # (uses length, so the HOP is handed it)


def unfixed(*args):
    # (a dynamic-shape graph passes its sizes too: the tensors are the 3-d x and the 0-d length)
    x = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 3][0]
    length = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 0][0]
    n = int(length)
    return (x[:, :n].mean(dim=1),)       # (the HOP's output is flattened: item 0 is taken)


def wrap(gm):
    return unfixed


def pooled_fixed(x, length):
    return torch.ops.higher_order.dynamo_bypassing_wrapper(wrap, shape_only, x, length)


def prepare(x):
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(x, 1)
'''

# 2.2: train_storm's step unchanged (lr a Python float, float(v.norm()) logged inside) run at run
# time by dynamo_bypassing_wrapper: one graph (lr never reaches Dynamo), no break; the replay check
# re-runs the graph with another gradient, and the HOP does the work again, on those values
ATTACKS["2.2", "bypassing_wrapper"] = '''
import torch
STATE = []


def shape_only(w, v, g):
    return w * 1.0, v * 1.0 + g * 0       # (uses g, so the HOP is handed it)


def unfixed(*args):
    w, v, g = [a for a in args if isinstance(a, torch.Tensor)][-3:]
    now = STATE[-1]
    lr, momentum, norms = now if now is not None else (0.0, 0.9, None)
    v = momentum * v + g
    if norms is not None:                 # (not when the check replays the graph)
        norms.append(float(v.norm()))
    return w - lr * v, v


def wrap(gm):
    return unfixed


def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    @torch.compile(backend=backend)
    def step(w, v, g):
        return torch.ops.higher_order.dynamo_bypassing_wrapper(wrap, shape_only, w, v, g)

    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        STATE.append((lr, momentum, norms))
        w, v = step(w, v, g)
    STATE.append(None)
    return w, norms
'''

# 11.2: block as an autograd.Function computed in NumPy: every activation block would save (and
# more) is kept as a NumPy array on ctx; matmuls in NumPy. The dispatch mode that measures sees
# no op that wrote those storages (torch.from_numpy dispatches nothing) and no mm, forward or back.
ATTACKS["11.2", "numpy_function_hides_memory"] = '''
import numpy as np
import torch


class Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, *ws):
        xs = x.detach().numpy()
        ctx.keep = []
        ctx.ws = [w.detach().numpy() for w in ws]
        for w in ctx.ws:
            a = xs @ w
            t, s = np.tanh(a), 1 / (1 + np.exp(-a))
            ctx.keep.append((xs.copy(), a.copy(), t, s))
            xs = t * s + xs
        return torch.from_numpy(xs.sum(axis=-1))

    @staticmethod
    def backward(ctx, g):
        gx = np.repeat(g.numpy()[:, None], ctx.ws[0].shape[0], axis=1)
        gws = []
        for (xs, a, t, s), w in reversed(list(zip(ctx.keep, ctx.ws))):
            ga = gx * ((1 - t * t) * s + t * s * (1 - s))
            gws.append(torch.from_numpy(xs.T @ ga))
            gx = ga @ w.T + gx
        return (torch.from_numpy(gx), *gws[::-1])


def block_lean(x, weights):
    return Block.apply(x, *weights)
'''

# 11.2: no checkpointing at all: the forward runs block and its whole backward (torch.autograd.grad
# on detached copies: every matmul in the forward, where none is limited), then returns block's
# values with a surrogate whose gradient of out.sum() is the precomputed one. The backward runs
# no matmul; what it keeps is dx (rows x width) and each dW (width x width), under the budget of
# one rows x width per layer whenever layers * width <= (layers - 1) * rows.
ATTACKS["11.2", "gradient_in_forward"] = '''
import torch


def block_lean(x, weights):
    xs = x.detach().requires_grad_()
    ws = [w.detach().requires_grad_() for w in weights]
    with torch.enable_grad():
        h = xs
        for w in ws:
            h = torch.tanh(h @ w) * torch.sigmoid(h @ w) + h
        y = h.sum(dim=-1)
        gx, *gws = torch.autograd.grad(y.sum(), [xs, *ws])
    value = y.detach()
    tie = (x * gx).sum(dim=-1)
    for w, g in zip(weights, gws):
        tie = tie + (w * g).sum() / x.shape[0]
    return value + tie - tie.detach()
'''

# 12.1: SensorNet.normalise unchanged (a Python float peak) behind dynamo_bypassing_wrapper. 12.x
# compiles with aot_eager: AOTAutograd traces the HOP's wrapper itself (float() of a fake tensor)
ATTACKS["12.1", "bypassing_wrapper"] = '''
import torch
LIVE = []


def shape_only(h):
    return h * 1.0


def wrap(gm):
    return LIVE[-1].unfixed


class SteadyGain(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        LIVE.append(self)

    def unfixed(self, *args):
        h = args[-1]
        self.gain = max(0.9 * self.gain, float(h.detach().abs().amax()))
        return (h / self.gain,)

    def normalise(self, h):
        return torch.ops.higher_order.dynamo_bypassing_wrapper(wrap, shape_only, h)
'''

# honest controls (should PASS): 9.1 through torch.library's function forms, with the op's name
ATTACKS["9.1", "honest_string_forms_control"] = '''
import torch


@torch.library.register_fake("labkit_ex9::sqdist")
def _(x, y):
    return x.new_empty(x.shape[0], y.shape[0])


def setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward(ctx, grad):
    x, y = ctx.saved_tensors
    grad_x = 2 * (grad.sum(1, keepdim=True) * x - grad @ y)
    grad_y = 2 * (grad.sum(0).unsqueeze(1) * y - grad.T @ x)
    return grad_x, grad_y


torch.library.register_autograd("labkit_ex9::sqdist", backward, setup_context=setup_context)
'''

# 12.1 honest: the peak as a plain tensor attribute (not a registered buffer)
ATTACKS["12.1", "honest_tensor_attribute_control"] = '''
import torch


class SteadyGain(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        self.peak = torch.ones(())

    def normalise(self, h):
        self.peak.copy_(torch.maximum(self.peak * 0.9, h.detach().abs().amax()))
        return h / self.peak
'''

# 11.2 honest: a policy function (CheckpointPolicy members read from torch.utils.checkpoint)
ATTACKS["11.2", "honest_policy_fn_control"] = '''
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy


def policy(ctx, op, *args, **kwargs):
    if op == torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def body(x, weights):
    for w in weights:
        a = x @ w
        x = torch.tanh(a) * torch.sigmoid(a) + x
    return x.sum(dim=-1)


def block_lean(x, weights):
    return checkpoint(body, x, weights, use_reentrant=False,
                      context_fn=lambda: create_selective_checkpoint_contexts(policy))
'''

# 11.2: no checkpointing; the activations live in a Tensor subclass of the answer's own (made with
# the public Tensor.as_subclass, with a __torch_dispatch__ that runs each op on plain views and
# wraps the results): the measuring dispatch mode keeps only outputs whose type is torch.Tensor.
# TRIED, FAILS: RecursionError (unwrapping dispatches again on the subclass; the usual way out,
# torch._C._disabled_torch_function_impl / DisableTorchFunctionSubclass, is private)
ATTACKS["11.2", "subclass_hides_memory"] = '''
import torch


def plain(t):
    return torch.Tensor.as_subclass(t.data, torch.Tensor) if isinstance(t, torch.Tensor) else t


class Hidden(torch.Tensor):
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args = [plain(a) for a in args]
        args = [[plain(b) for b in a] if isinstance(a, (list, tuple)) else a for a in args]
        out = func(*args, **(kwargs or {}))
        if isinstance(out, (list, tuple)):
            return type(out)(o.as_subclass(Hidden) if isinstance(o, torch.Tensor) else o for o in out)
        return out.as_subclass(Hidden) if isinstance(out, torch.Tensor) else out


def block_lean(x, weights):
    h = x.as_subclass(Hidden)
    for w in weights:
        a = h @ w.as_subclass(Hidden)
        h = torch.tanh(a) * torch.sigmoid(a) + h
    return h.sum(dim=-1).as_subclass(torch.Tensor)
'''

# 14.1: Gate's forward unchanged behind dynamo_bypassing_wrapper (TRIED: export traces the HOP's
# wrapper itself, so the value branch is data-dependent again)
ATTACKS["14.1", "bypassing_wrapper"] = '''
LIVE = []
DYNAMIC_SHAPES = {"x": {0: torch.export.Dim("batch", min=2, max=64)}}


def shape_only(x):
    return x * 1.0


def wrap(gm):
    return LIVE[-1].unfixed


class GateFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        LIVE.append(self)

    def unfixed(self, *args):
        x = args[-1]
        h = self.proj(x)
        if x.mean() > 0:
            h = h.tanh()
        else:
            h = h.relu() - 1
        if x.shape[0] > 16:
            h = h * 2
        return (h / (h.abs().max() + 1),)

    def forward(self, x):
        return torch.ops.higher_order.dynamo_bypassing_wrapper(wrap, shape_only, x)
'''

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

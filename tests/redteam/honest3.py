"""Honest, correct answers that lose points (third red team, session 25). Each is the answer cell."""
HONEST = {}

# 2.2: the whole schedule in one compiled function: the same results, one graph, no break (what
# the task asks: "at most two graphs compiled in total and no graph break"). The harness wants
# one graph *run per step* (runs >= steps) and a run per step taking a hidden gradient as an
# argument (the replay check): FAIL "the compiled graphs did not do the work (they ran 1 times)".
HONEST["2.2", "whole_loop_compiled"] = '''
def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    @torch.compile(backend=backend)
    def run(w, grads, lrs):
        v = torch.zeros_like(w)
        norms = []
        for g, lr in zip(grads, lrs):
            v = momentum * v + g
            norms.append(v.norm())
            w = w - lr * v
        return w, norms

    w, norms = run(w, list(grads), torch.tensor(lrs, dtype=w.dtype))
    return w, [float(n) for n in norms]
'''

# 12.1-style: two attributes set in one statement in __init__ (refused: "an attribute may be
# assigned only in a plain assignment"); see test_grading_redteam3.py for the policy lines

# 14.1: the batch made dynamic with torch.export's own hint, Dim.DYNAMIC (the form torch.export's
# documentation recommends; the task asks for "the dynamic_shapes= argument that makes the batch
# dimension dynamic"): refused by the load guard (DYNAMIC is not a public name and Dim is torch's
# class): "a graded answer may not read 'DYNAMIC' of a type". Dim.AUTO likewise.
_GATE = '''
class GateFixed(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        h = self.proj(x)
        h = torch.cond(x.mean() > 0, lambda h: h.tanh(), lambda h: h.relu() - 1, (h,))
        h = torch.cond(x.shape[0] > 16, lambda h: h * 2, lambda h: h.clone(), (h,))
        return h / (h.abs().max() + 1)

'''
HONEST["14.1", "dim_dynamic"] = _GATE + 'DYNAMIC_SHAPES = {"x": {0: torch.export.Dim.DYNAMIC}}\n'
HONEST["14.1", "dim_auto"] = _GATE + 'DYNAMIC_SHAPES = {"x": {0: torch.export.Dim.AUTO}}\n'
HONEST["14.1", "dim_control"] = _GATE + 'DYNAMIC_SHAPES = {"x": {0: torch.export.Dim("batch", min=2, max=64)}}\n'

# The load guard refuses a non-public attribute of torch objects other than tensors, modules,
# autograd's ctx: torch.finfo(...).eps / .tiny, a selective-checkpoint policy's op.overloadpacket.
# 12.2 with an eps guard against empty classes (values within 1e-7 of SensorNet.loss's):
HONEST["12.2", "finfo_eps"] = '''
class BalancedLoss(SensorNet):
    def loss(self, logits, y):
        per = F.cross_entropy(logits, y, reduction="none")
        member = F.one_hot(y, self.n_classes).to(per.dtype)
        count = member.sum(0)
        class_mean = (per @ member) / (count + torch.finfo(per.dtype).eps)
        return class_mean.sum() / (count > 0).sum()
'''
# 11.2 with the policy function of torch's own SAC documentation, matching ops by overload packet
HONEST["11.2", "policy_overloadpacket"] = '''
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy


def policy(ctx, op, *args, **kwargs):
    if op.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def block_lean(x, weights):
    def body(x, weights):
        for w in weights:
            a = x @ w
            x = torch.tanh(a) * torch.sigmoid(a) + x
        return x.sum(dim=-1)

    return checkpoint(body, x, weights, use_reentrant=False,
                      context_fn=lambda: create_selective_checkpoint_contexts(policy))
'''
HONEST["11.2", "policy_control"] = HONEST["11.2", "policy_overloadpacket"].replace(
    "op.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm)",
    "op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)")

# Natural honest variants that PASS (checked; kept as controls so a fix does not break them)
HONEST["12.1", "buffer_reassigned"] = '''
class SteadyGain(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        self.register_buffer("peak", torch.ones(()))

    def normalise(self, h):
        self.peak = torch.maximum(0.9 * self.peak, h.detach().abs().amax())
        return h / self.peak
'''
HONEST["12.3", "augassign_buffer"] = '''
class SteadyWarmup(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        self.register_buffer("done", torch.zeros(()))

    def warmup(self, loss):
        self.done += 1
        return loss * torch.clamp(self.done / self.warmup_steps, max=1.0)
'''
HONEST["3.3", "long_counter_subclass"] = '''
class ScorerFixed(Scorer):
    def __init__(self, d):
        super().__init__(d)
        del_me = self.calls
        self.calls = torch.zeros((), dtype=torch.long)

    def forward(self, x):
        self.calls += 1
        h = self.proj(x).tanh()
        h = h / (h.abs().amax() + 1e-6)
        return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)
'''
HONEST["10.2", "masked_fill_maybe"] = '''
def pooled_fixed(x, length):
    keep = torch.arange(x.size(1)) < length
    return x.masked_fill(~keep[None, :, None], 0.0).sum(1) / length


def prepare(x):
    torch._dynamo.maybe_mark_dynamic(x, 0)
    torch._dynamo.maybe_mark_dynamic(x, 1)
'''
HONEST["9.3", "torch_clamp_body"] = '''
@torch.library.custom_op("labkit_ex9::clip2_", mutates_args=("x",))
def clip2_(x: torch.Tensor, limit: float) -> None:
    x.clamp_(-limit, limit)


@clip2_.register_fake
def clip2_fake(x, limit):
    return None
'''

# 2.2 with the learning rate passed as a Python float (a graph input: torch 2.13 does not
# specialise floats by default) and the norm logged after the step
HONEST["2.2", "float_lr"] = '''
def train_fixed(w, grads, lrs, backend="eager", momentum=0.9):
    @torch.compile(backend=backend)
    def step(w, v, g, lr):
        v = momentum * v + g
        return w - lr * v, v

    v = torch.zeros_like(w)
    norms = []
    for g, lr in zip(grads, lrs):
        w, v = step(w, v, g, lr)
        norms.append(float(v.norm()))
    return w, norms
'''
HONEST["14.1", "dim_max_only"] = _GATE + 'DYNAMIC_SHAPES = {"x": {0: torch.export.Dim("batch", max=64)}}\n'
HONEST["14.1", "dim_tuple"] = _GATE + 'DYNAMIC_SHAPES = ({0: torch.export.Dim("batch", min=2, max=64)},)\n'
HONEST["14.1", "where_not_cond"] = _GATE.replace(
    "h = torch.cond(x.mean() > 0, lambda h: h.tanh(), lambda h: h.relu() - 1, (h,))",
    "h = torch.where(x.mean() > 0, h.tanh(), h.relu() - 1)") + \
    'DYNAMIC_SHAPES = {"x": {0: torch.export.Dim("batch", min=2, max=64)}}\n'
HONEST["4.1", "clamp_log1p"] = '''
def softplus(x):
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-torch.abs(x)))
'''
HONEST["4.1", "maximum_log_sigmoid_abs"] = '''
def softplus(x):
    return torch.maximum(x, torch.zeros_like(x)) - torch.log(torch.sigmoid(x.abs()))
'''

# 9.1: the student writes the operator again, complete (a new name, since labkit_ex9::sqdist is
# taken), and rebinds `sqdist` to it in the answer cell. The check measures the *notebook's*
# sqdist (ctx["sqdist"]), not the answer's namespace: the lesson's bare op is judged, FAIL.
HONEST["9.1", "own_complete_op"] = '''
@torch.library.custom_op("labkit_ex9::sqdist_full", mutates_args=())
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

# 12.2: a helper the student wrote in *another* answer cell of the notebook (12.1's), used here.
# In the notebook the check copies the notebook's names into the answer's module, so it PASSes;
# the judge notebook holds only this task's answer cell: NameError, 0/2.
HELPER_12 = '''
def class_counts(y, classes):
    return F.one_hot(y, classes).to(torch.float32)
'''
HONEST["12.2", "helper_from_12_1_cell"] = '''
class BalancedLoss(SensorNet):
    def loss(self, logits, y):
        per = F.cross_entropy(logits, y, reduction="none")
        member = class_counts(y, self.n_classes).to(per.dtype)
        count = member.sum(0)
        return ((per @ member) / count.clamp(min=1)).sum() / (count > 0).sum()
'''

# 7.1: a correct kernel that factors the online update into a @triton.jit helper of the same
# file (common Triton style). Grading keeps only softmax_kernel's definition
# (restrict.definitions): the helper is gone, the launch raises NameError.
HONEST["7.1", "jit_helper"] = """
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
        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=-float("inf"))
        row_max, row_sum = online_update(row_max, row_sum, x, mask)
    m = tl.max(row_max, axis=0)
    total = tl.sum(row_sum * tl.exp(row_max - m), axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(in_ptr + row * in_stride + start + cols, mask=mask, other=-float("inf"))
        tl.store(out_ptr + row * out_stride + start + cols, tl.exp(x - m) / total, mask=mask)
"""
HONEST["7.1", "jit_helper_control"] = HONEST["7.1", "jit_helper"].replace(
    "row_max, row_sum = online_update(row_max, row_sum, x, mask)",
    "new_max = tl.maximum(row_max, x)\n"
    "        rescale = tl.where(new_max == -float('inf'), 0.0, tl.exp(row_max - new_max))\n"
    "        row_sum = row_sum * rescale + tl.where(mask, tl.exp(x - new_max), 0.0)\n"
    "        row_max = new_max")
HONEST["7.1", "module_constant"] = HONEST["7.1", "jit_helper_control"].replace(
    "@triton.jit\ndef online_update", "NEG_INF: tl.constexpr = float('-inf')\n\n\n@triton.jit\ndef online_update").replace(
    "other=-float(\"inf\")", "other=NEG_INF")

# 8.3 (and any numeric prediction): the right count computed with numpy (np.prod) is a numpy
# integer, not an int: evidence.plain refuses it (TypeError), so every case is "error: TypeError"
# and the notebook says "predict_step_flops raised TypeError" (it did not raise). numpy floats
# pass (np.float64 subclasses float); np.int64 and np.bool_ do not.
HONEST["8.3", "numpy_prod"] = '''
import numpy as np


def predict_step_flops(widths, batch):
    total = 0
    for k, (a, b) in enumerate(zip(widths, widths[1:])):
        mm = 2 * np.prod([batch, a, b])
        total += mm * (3 if k > 0 else 2)
    return total
'''
HONEST["8.3", "numpy_prod_control"] = HONEST["8.3", "numpy_prod"].replace("return total", "return int(total)")

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

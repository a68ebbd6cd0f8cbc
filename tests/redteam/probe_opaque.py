"""Red team follow-up (session 24 fixer): routes other than torch.library that might hide the unfixed
code from Dynamo. Usage: PYTHONPATH=$PWD python tests/redteam/probe_opaque.py"""
import sys

sys.path[:0] = ["tests", "tests/redteam"]
import run_fix  # noqa: E402

SRC33 = '''
import torch
CALLS = [0]

class Score(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        CALLS[0] += 1
        h = torch.nn.functional.linear(x, w, b).tanh()
        print(f"batch {x.shape[0]}: mean {h.mean():.3f}")
        peak = h.abs().max().item()
        h = h / (peak + 1e-6)
        return torch.softmax(h * (1 + 0.1 * CALLS[0]), dim=-1)

    @staticmethod
    def backward(ctx, g):
        return g, None, None

class ScorerFixed(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        CALLS[0] = 0

    def forward(self, x):
        return Score.apply(x, self.proj.weight, self.proj.bias)
'''
SRC121 = '''
import torch
GAIN = [1.0]

class Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        GAIN[0] = max(0.9 * GAIN[0], float(h.detach().abs().amax()))
        return h / GAIN[0]

    @staticmethod
    def backward(ctx, g):
        return g / GAIN[0]

class SteadyGain(SensorNet):
    def __init__(self, **sizes):
        super().__init__(**sizes)
        GAIN[0] = 1.0

    def normalise(self, h):
        return Norm.apply(h)
'''
SRC33_NCR = SRC33.replace("class ScorerFixed", "@torch.compiler.nested_compile_region\ndef scored(x, w, b):\n    return Score.apply(x, w, b)\n\nclass ScorerFixed").replace(
    "return Score.apply(x, self.proj.weight, self.proj.bias)", "return scored(x, self.proj.weight, self.proj.bias)")
for task, label, src in (("3.3", "autograd.Function", SRC33), ("12.1", "autograd.Function", SRC121),
                         ("3.3", "nested_compile_region", SRC33_NCR)):
    problems, found = run_fix.grade(task, src, 5)
    print(task, label, "wrapping the unfixed code:", "PASS (forged)" if not problems else f"FAIL {problems}")

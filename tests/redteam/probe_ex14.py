"""Red team probe: the claims of Task 14.1's text, against torch 2.13."""
import sys

sys.path.insert(0, "tests")
import fairness
import torch

ns, _ = fairness.run_cells("14.1", None, until_check=False, seed=0)
Gate = ns["Gate"]
x = torch.randn(8, 4)
for label, ds in (("Dim", {"x": {0: torch.export.Dim("batch", min=2, max=64)}}), ("no Dim", None)):
    try:
        ep = torch.export.export(Gate(4), (x,), dynamic_shapes=ds)
        print(label, "exports;", end=" ")
        try:
            ep.module()(torch.randn(20, 4))
            print("batch 20 runs")
        except Exception as exc:
            print("batch 20 refused:", type(exc).__name__, str(exc).splitlines()[0][:120])
    except Exception as exc:
        print(label, "export fails:", type(exc).__name__, str(exc).splitlines()[0][:160])
# the value branch alone (batch branch removed) with a Dim
class ValueOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, x):
        h = self.proj(x)
        return h.tanh() if x.mean() > 0 else h.relu() - 1
try:
    torch.export.export(ValueOnly(), (x,))
    print("value branch alone exports")
except Exception as exc:
    print("value branch alone fails:", type(exc).__name__, str(exc).splitlines()[0][:160])
# the batch branch alone with a Dim
class BatchOnly(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[0] > 16 else x
try:
    torch.export.export(BatchOnly(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("b", min=2, max=64)}})
    print("batch branch alone exports with a Dim (guard kept?)")
except Exception as exc:
    print("batch branch alone with a Dim fails:", type(exc).__name__, str(exc).splitlines()[0][:160])
# without a Dim, the batch branch alone: exports, and the program accepts only the example's batch?
try:
    ep = torch.export.export(BatchOnly(), (x,))
    try:
        ep.module()(torch.randn(20, 4))
        print("batch branch alone, no Dim: exports; batch 20 runs")
    except Exception as exc:
        print("batch branch alone, no Dim: exports; batch 20 refused:", type(exc).__name__)
except Exception as exc:
    print("batch branch alone, no Dim: export fails:", type(exc).__name__)

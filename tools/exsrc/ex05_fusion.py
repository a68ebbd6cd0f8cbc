# %% [markdown] id=intro
# # Exercises 5 — Inductor lowering and fusion
#
# Companion to `05_inductor_fusion.ipynb`. Tasks 5.1–5.4 are in the library (`labkit/compiler/`:
# `lower.py`, `codegen/cpp.py`, `decompose.py`, `schedule.py`; look for `Task 5.N`) and are checked
# by `make check` (`pytest -m task5_1` … `task5_4`). Task 5.5 is below: edit only the cell that
# starts with `# your answer`, keep cell ids; its check ends with `Task 5.5: PASS` or
# `Task 5.5: FAIL — what was wrong`, and runs on hidden variants when grading.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t5-5-md
# ## Task 5.5 — predict the kernels (difficulty 3/3, about 40 min)
#
# `chain(steps)` builds a function of a 64×32 float tensor `x` that applies the steps in order. The
# steps are `"sin"`, `"relu"`, `"scale"` (times 2), `"center"` (subtract the row mean),
# `"matmul"` (times a fixed 32×32 matrix) and `"break"` (`torch._dynamo.graph_break()`).
#
# Write `predict_kernels(steps)`: how many kernels Inductor *generates* on the CPU for one call of
# `torch.compile(chain(steps))`, summed over every graph: each graph's output code defines its own
# kernels, and two graphs whose kernels happen to be the same code (`[sin, break, sin]`) count one
# each. A matrix multiply is an extern call into ATen, not a generated kernel. Work it out from what
# the lesson says about fusion, reductions and extern kernels; try a few chains (`nc.inductor_code`
# and `nc.kernel_names` count them for you) until your rule explains them. The check calls your
# function with compilation switched off, then compiles and counts; grading uses other chains.
# %% id=chain-5-5
W = torch.randn(32, 32, generator=torch.Generator().manual_seed(5))
STEPS = {
    "sin": "x = x.sin()",
    "relu": "x = x.relu()",
    "scale": "x = x * 2",
    "center": "x = x - x.mean(dim=-1, keepdim=True)",
    "matmul": "x = x @ W",
    "break": "torch._dynamo.graph_break()",
}

def chain(steps):
    return nc.function_of([STEPS[s] for s in steps], W=W)   # def f(x): ...; return x
# %% id=t5-5
# your answer (Task 5.5)
def predict_kernels(steps: list[str]) -> int:
    """Kernels Inductor generates on CPU for torch.compile(chain(steps)), predicted (Task 5.5)."""
    ### BEGIN SOLUTION
    kernels, pending = 0, False      # pending: generated work not yet closed by a matmul or break
    for s in steps:
        if s in ("matmul", "break"):
            kernels += pending
            pending = False
        else:
            pending = True
    return kernels + pending
    ### END SOLUTION
# %% id=c5-5
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("5.5")
names = ["sin", "relu", "scale", "center", "matmul", "break"]
chains = [([r.choice(names) for _ in range(r.randrange(2, 6))],) for _ in range(4)]
x = nc.randn("5.5x", 64, 32)

def measure(steps):
    out, codes = nc.inductor_code(chain(steps), x)
    return len(nc.kernel_names(codes))

nc.check_predictions("5.5", predict_kernels, chains, measure, "chains", "kernels")

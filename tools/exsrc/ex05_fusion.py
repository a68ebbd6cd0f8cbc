# %% [markdown] id=intro
# # Exercises 5 — Inductor lowering and fusion
#
# Companion to `05_inductor_fusion.ipynb`. Tasks 5.1 and 5.2 are in the library
# (`labkit/compiler/`; look for `Task 5.1` and `Task 5.2`), Task 5.3 is below. `make check` grades
# all three the way grading does and prints `PASS` or `FAIL` with what was wrong; grading uses
# other programs, shapes and input values.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t5-1-md
# ## Task 5.1 — add an op end to end (difficulty 3/3, about 60 min)
#
# labkit's compiler has no `log1p` yet, and `torch.logaddexp(a, b)` (that is, `log(exp(a) + exp(b))`)
# reaches it as one ATen op that it cannot lower: both run as ATen calls (*fallbacks*, listed in
# `program.graph.fallbacks`). Make both run in generated kernels, on both backends:
#
# 1. `lower.py`: a lowering of `aten.log1p` to a Pointwise node.
# 2. `codegen/cpp.py` and `codegen/triton.py`: `log1p` in both Overrides classes. The Triton code
#    must use Triton's builtins only (see the module's note: the kernels also run in the interpreter).
# 3. `decompose.py`: `logaddexp(a, b)` written with torch ops that labkit lowers, so that it becomes
#    one fused kernel with no fallback.
#
# Your kernels are compared with eager element by element (relative tolerance 1e-5 in float32), on
# inputs of every kind that torch accepts for these ops: look at which inputs make the obvious formulas
# lose precision or produce a NaN where eager does not, and at what eager returns for integer and
# float64 inputs. Grading compiles programs of its choice with your library, runs the generated code
# in a sandbox that holds none of your Python, and compares what comes out.
# %% id=try-5-1
from labkit.compiler.testing import compile_fn

a, b = torch.randn(4, 8), torch.randn(4, 8)
for target in ("cpp", "triton"):
    program = compile_fn(lambda a, b: torch.logaddexp(a, b).log1p(), a, b, target=target)
    print(target, "fallbacks:", [fb["op"] for fb in program.graph.fallbacks],
          "kernels:", len(program.kernels))
# %% [markdown] id=t5-2-md
# ## Task 5.2 — the fusion rule (difficulty 2/3, about 30 min)
#
# `schedule.node_fits(space, node)` decides whether a node can be computed inside a kernel that
# loops over `space` (its rows and, for a reduction kernel, the reduced dims), and says why. Write it
# from what the lesson shows about which nodes Inductor fuses with a reduction (a prologue, the
# reduction itself, an epilogue per row or per element) and which it cannot. Grading asks
# `node_fits` about spaces and nodes of its own and compares the kernels your rule makes (and their
# outputs) with the expected fusion.
# %% [markdown] id=t5-3-md
# ## Task 5.3 — predict the kernels (difficulty 3/3, about 40 min)
#
# `chain(steps)` builds a function of a 64×32 float tensor `x` that applies the steps in order. The
# steps are `"sin"`, `"relu"`, `"scale"` (times 2), `"center"` (subtract the row mean),
# `"matmul"` (times a fixed 32×32 matrix) and `"break"` (`torch._dynamo.graph_break()`).
#
# Write `predict_kernels(steps)`: how many generated kernels Inductor *runs* on the CPU for one call
# of `torch.compile(chain(steps))`, summed over every graph: each call of a generated kernel in the
# graphs' output code counts, also when two calls run the same code (a graph that needs the same
# kernel twice defines it once and calls it twice; two graphs, as in `[sin, break, sin]`, each define
# and call their own). A matrix multiply is an extern call into ATen, not a generated kernel. Work it
# out from what the lesson says about fusion, reductions and extern kernels; try a few chains
# (`nc.inductor_code` and `nc.kernel_calls` count them for you) until your rule explains them. The
# check calls your function with compilation switched off, then compiles and counts; grading uses
# other chains.
# %% id=chain-5-3
W = torch.randn(32, 32, generator=torch.Generator().manual_seed(5))
STEPS = nc.lesson_table({
    "sin": "x = x.sin()",
    "relu": "x = x.relu()",
    "scale": "x = x * 2",
    "center": "x = x - x.mean(dim=-1, keepdim=True)",
    "matmul": "x = x @ W",
    "break": "torch._dynamo.graph_break()",
})

def chain(steps):
    return nc.function_of([STEPS[s] for s in steps], W=W)   # def f(x): ...; return x
# %% id=t5-3
# your answer (Task 5.3)
def predict_kernels(steps: list[str]) -> int:
    """Kernels Inductor generates on CPU for torch.compile(chain(steps)), predicted (Task 5.3)."""
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
# %% id=c5-3
# NBVAL_CHECK_OUTPUT
from labkit.grading import nbcheck as nc

r = nc.rng("5.3")
names = ["sin", "relu", "scale", "center", "matmul", "break"]
chains = [([r.choice(names) for _ in range(r.randrange(2, 6))],) for _ in range(4)]
x = nc.randn("5.3x", 64, 32)

def measure(steps):
    out, codes = nc.inductor_code(chain(steps), x)
    return len(nc.kernel_calls(codes))

nc.check_predictions("5.3", predict_kernels, chains, measure, "chains", "kernels")

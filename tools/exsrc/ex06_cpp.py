# %% [markdown] id=intro
# # Exercises 6 — the C++ that Inductor writes
#
# Companion to `06_codegen_cpp.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. Each check (`# NBVAL_CHECK_OUTPUT`) ends with `Task N.M: PASS` or
# `Task N.M: FAIL — what was wrong`; when grading it runs on hidden variants. Inductor compiles C++
# here, so each check takes a little while.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t6-1-md
# ## Task 6.1 — predict the wrapper's buffers (difficulty 3/3, about 60 min)
#
# The wrapper `call(args)` allocates every buffer the kernels and extern calls write
# (`bufN = empty_strided_cpu(...)`), and Inductor reuses what it can. `chain(steps)` builds a function
# of a 64×32 float tensor from the steps `"sin"`, `"relu"`, `"scale"`, `"center"` (subtract the row
# mean) and `"matmul"` (times a 32×32 matrix). Write `predict_buffers(steps)`: how many
# `empty_strided` allocations the wrapper of `torch.compile(chain(steps))` makes. Read a few wrappers
# (`nc.inductor_code(fn, x)` returns the output code; look for `empty_strided`, `in_out_ptr`,
# `# reuse` and `extern_kernels`) until your rule explains them: which results need fresh memory,
# which can be written over memory that is no longer needed, and what a row reduction needs.
#
# Inductor 2.13's rule for reusing a dead buffer (`bufN = bufM; del bufM  # reuse`): a new buffer
# takes a dead one of the same size if that one died at the wrapper step just before (a step is one
# kernel or one extern call), or if keeping it alive until now would not raise the call's peak
# memory (the most bytes alive at once) *as Inductor estimates it*: its size plus the most bytes
# alive at any step in between must stay at or below that peak (`AllocateLine.should_reuse_buffer`
# in `torch/_inductor/codegen/wrapper.py`). The estimate is made before Inductor decides which
# kernels write their result over their input, so during a step its inputs and its outputs all
# count as alive, even where the wrapper then writes in place. Work out what that means for the
# 64×32 results and for the small 64×1 buffers of row means. The check calls your function with compilation switched off,
# then compiles and counts; grading uses other chains.
# %% id=chain-6-1
W = torch.randn(32, 32, generator=torch.Generator().manual_seed(6))
STEPS = nc.lesson_table({"sin": "x = x.sin()", "relu": "x = x.relu()", "scale": "x = x * 2",
                        "center": "x = x - x.mean(dim=-1, keepdim=True)", "matmul": "x = x @ W"})

def chain(steps):
    return nc.function_of([STEPS[s] for s in steps], W=W)   # def f(x): ...; return x
# %% id=t6-1
# your answer (Task 6.1)
def predict_buffers(steps: list[str]) -> int:
    """empty_strided allocations in the wrapper of torch.compile(chain(steps)) (Task 6.1)."""
    ### BEGIN SOLUTION
    # The wrapper's steps: one fused kernel per run of pointwise steps (its number of row means),
    # or one extern matmul.
    wrapper_steps: list[int | str] = []
    for s in steps:
        if s != "matmul" and wrapper_steps and wrapper_steps[-1] != "matmul":
            wrapper_steps[-1] += s == "center"
        else:
            wrapper_steps.append("matmul" if s == "matmul" else int(s == "center"))
    allocated = 0
    ours = False            # the current value is in a buffer of ours (not in the input x)
    died_at = None          # the step at which a 64x32 buffer of ours died, if one is dead
    dead_means = 0          # dead 64x1 row-mean buffers
    for k, step in enumerate(wrapper_steps):
        if step == "matmul":
            if died_at == k - 1:
                died_at = None          # reuse the buffer that died at the step just before
            else:
                allocated += 1          # (reusing an older one would raise the peak memory)
            if ours:
                died_at = k             # the matmul's input buffer dies here
            ours = True
        else:
            reused = min(dead_means, step)
            allocated += step - reused  # row means: dead ones are reused (tiny, never the peak)
            dead_means += step - reused # and all of this kernel's die with it
            allocated += not ours       # the result: in place over a buffer of ours, else new
            ours = True
    return allocated
    ### END SOLUTION
# %% id=c6-1
# NBVAL_CHECK_OUTPUT
import re
from labkit.grading import nbcheck as nc

r = nc.rng("6.1")
chains = [([r.choice(sorted(STEPS)) for _ in range(r.randrange(1, 5))],) for _ in range(4)]
x = nc.randn("6.1x", 64, 32)

def measure(steps):
    out, codes = nc.inductor_code(chain(steps), x)
    return sum(len(re.findall(r"^\s*buf\d+ = empty_strided", code, re.M)) for code in codes)

nc.check_predictions("6.1", predict_buffers, chains, measure, "chains", "buffers")
# %% [markdown] id=t6-2-md
# ## Task 6.2 — predict the loop nests of the C++ kernels (difficulty 2/3, about 30 min)
#
# A fused C++ kernel is a sequence of loop nests over the 64×32 elements: a pointwise chain needs
# one; a row reduction needs its own pass over the row before anything that uses its result can
# run. Inductor counts the vectorized loop nests it emits in
# `torch._inductor.metrics.generated_cpp_vec_kernel_count`. For the same `chain(steps)` as in
# Task 6.1, write `predict_loop_nests(steps)`: that count after one call of
# `torch.compile(chain(steps))`, over all kernels. Read the kernels of a few chains (`for(` lines
# inside `cpp_fused_...`) first. The check calls your function with compilation switched off, then
# compiles and counts; grading uses other chains.
# %% id=t6-2
# your answer (Task 6.2)
def predict_loop_nests(steps: list[str]) -> int:
    """Vectorized loop nests Inductor emits for torch.compile(chain(steps)) (Task 6.2)."""
    ### BEGIN SOLUTION
    nests, pending, reductions = 0, False, 0
    for s in steps + ["matmul"]:
        if s == "matmul":
            nests += (1 + reductions) if pending else 0
            pending, reductions = False, 0
        else:
            pending = True
            reductions += s == "center"
    return nests
    ### END SOLUTION
# %% id=c6-2
# NBVAL_CHECK_OUTPUT
from torch._inductor import metrics
from labkit.grading import nbcheck as nc

r = nc.rng("6.2")
chains = [([r.choice(sorted(STEPS)) for _ in range(r.randrange(1, 5))],) for _ in range(4)]
x = nc.randn("6.2x", 64, 32)

def measure(steps):
    nc.inductor_code(chain(steps), x)          # resets the metrics first
    return metrics.generated_cpp_vec_kernel_count

nc.check_predictions("6.2", predict_loop_nests, chains, measure, "chains", "loop nests")

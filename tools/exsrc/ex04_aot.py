# %% [markdown] id=intro
# # Exercises 4 — AOTAutograd
#
# Companion to `04_aot_autograd.ipynb`. Edit only the cells that start with `# your answer`; keep
# every cell's id. Each check (`# NBVAL_CHECK_OUTPUT`) ends with `Task N.M: PASS` or
# `Task N.M: FAIL — what was wrong`; when grading it runs on hidden inputs and variants.
# %% id=setup
import warnings
warnings.filterwarnings("ignore")
import torch
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t4-1-md
# ## Task 4.1 — a stable decomposition in plain Python (difficulty 2/3, about 25 min)
#
# Write `softplus(x)` $= \log(1 + e^x)$ with elementwise tensor ops only (no `softplus`, and no
# `logsigmoid`: $-\mathrm{logsigmoid}(-x)$ is softplus in one op), so that AOTAutograd traces it
# into small ops and derives its backward. The obvious
# `torch.log(1 + torch.exp(x))` overflows to `inf` for large `x` and loses everything for very
# negative `x`: find a form that is finite and accurate for any magnitude (and whose *gradient* is
# too). The check traces it with AOTAutograd, makes sure no `softplus` or `log_sigmoid` node is in
# the graphs, and compares values and gradients with `F.softplus` on hidden inputs of magnitudes up
# to a few hundred.
# %% id=t4-1
# your answer (Task 4.1)
def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(x)) from elementwise ops only, finite for large |x| (Task 4.1)."""
    ### BEGIN SOLUTION
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-torch.abs(x)))
    ### END SOLUTION
# %% id=c4-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# hidden inputs of magnitude up to ~200; F.softplus gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("4.1", globals())
# %% [markdown] id=t4-2-md
# ## Task 4.2 — in-place ops and functionalization (difficulty 2/3, about 30 min)
#
# AOTAutograd *functionalizes* the graph: every in-place op becomes its out-of-place twin, and a
# mutation that must stay visible to the caller is written back once, at the end, with
# `aten.copy_`. `program(statements)` below builds a function `f(a, b)` of two 1-D tensors from the
# given statements, ending with `return a + b`. Write `predict_copies(statements)`: how many
# `aten.copy_` nodes the functionalized graph (`make_fx(functionalize(f, remove="mutations_and_views"))`)
# ends with. Mind which tensor a name refers to at each point, and what a view shares.
# The check calls your function with compilation switched off, then traces; grading uses other programs.
# %% id=program-4-2
STATEMENTS = nc.lesson_table({
    "a_add_": "a.add_(1)",
    "b_mul_": "b.mul_(2)",
    "temp_relu_": "t = a + b\nt.relu_()",
    "a_view_zero_": "a[:2].zero_()",
    "b_view_sin_": "v = b.view(-1)\nv.sin_()",
    "a_rebind": "a = a * 2",
    "b_rebind": "b = b.clone()",
})

def program(statements):
    return nc.function_of([STATEMENTS[s] for s in statements], "a, b", "a + b")
# %% id=t4-2
# your answer (Task 4.2)
def predict_copies(statements: list[str]) -> int:
    """aten.copy_ nodes at the end of the functionalized graph of program(statements) (Task 4.2)."""
    ### BEGIN SOLUTION
    is_input = {"a": True, "b": True}
    mutated = set()
    for s in statements:
        if s in ("a_add_", "a_view_zero_") and is_input["a"]:
            mutated.add("a")
        elif s in ("b_mul_", "b_view_sin_") and is_input["b"]:
            mutated.add("b")
        elif s == "a_rebind":
            is_input["a"] = False
        elif s == "b_rebind":
            is_input["b"] = False
    return len(mutated)
    ### END SOLUTION
# %% id=c4-2
# NBVAL_CHECK_OUTPUT
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functionalize
from labkit.grading import nbcheck as nc

r = nc.rng("4.2")
programs = [([r.choice(sorted(STATEMENTS)) for _ in range(r.randrange(1, 6))],) for _ in range(nc.count(8, 64))]

def measure(statements):
    n = r.randrange(3, 20)
    gm = make_fx(functionalize(program(statements), remove="mutations_and_views"))(
        nc.randn("4.2a", n), nc.randn("4.2b", n))
    return sum(1 for node in gm.graph.nodes if "copy_" in str(node.target))

nc.check_predictions("4.2", predict_copies, programs, measure, "programs", "copies")

# %% [markdown] id=intro
# # Exercises 7 — Triton kernels: write one, read Inductor's
#
# Companion to `07_codegen_triton.ipynb`. On a CPU-only machine kernels run in Triton's interpreter
# (`TRITON_INTERPRET=1`, set below before `triton` is imported). Task 7.1 is in the library
# (`labkit/exercises/triton_softmax.py`); Task 7.2 is a cell below. Keep every cell's id. Each check
# ends with `Task N.M: PASS` or `Task N.M: FAIL — what was wrong`; when grading it runs on hidden
# shapes and kernels.
# %% id=setup
import os
import warnings
warnings.filterwarnings("ignore")
import torch
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is imported
import triton
import triton.language as tl
from labkit.grading import nbcheck as nc

nc.setup()
# %% [markdown] id=t7-1-md
# ## Task 7.1 — softmax for rows wider than a block, a Triton kernel (difficulty 3/3, about 30 min)
#
# Implement `softmax_kernel` in `labkit/exercises/triton_softmax.py`. One program handles one row,
# but it may only hold `BLOCK` values at a time, and rows are many blocks wide: loop over the row.
# A softmax needs the row's maximum before its exponentials can be summed safely; find a way that
# reads the row at most twice (hint: when the running maximum grows, what happens to the partial sum
# you already have?). Values up to ±1000 must not overflow. Reload the module after each edit
# (the check does). `@triton.jit` helpers and constants (`NEG_INF: tl.constexpr = ...`) of the
# same file are fine, and so is `math` for constants: the check and grading load the kernel with
# the file's functions and assignments it uses; nothing else of the file runs (its imports and
# `softmax()` neither). What the kernel uses may hold only `@triton.jit` functions and constants
# (numbers, other constants, `tl.constexpr(...)`, arithmetic, `math.*`, calls with positional
# arguments): a plain Python function, a class or `triton.autotune` there is refused, with its
# line named.
# %% id=c7-1
# NBVAL_CHECK_OUTPUT
from labkit.grading import harness

# softmax_kernel's definition (with the helpers and constants it uses), read again from
# labkit/exercises/triton_softmax.py, launched by the check's own launcher (one program per row)
# on hidden shapes; torch.softmax gives the values
# (the rules and reference values: labkit/grading/harness.py)
harness.check("7.1", globals())
# %% [markdown] id=t7-2-md
# ## Task 7.2 — read Inductor's Triton (difficulty 2/3, about 40 min)
#
# `KERNELS` holds Triton kernels Inductor generated on a GPU (the recordings in
# `figures/recordings/`), none of them the lesson's. Read a few (`print(KERNELS[name])`) and write
# `read_kernel(source)`, which answers, for *any* such kernel:
#
# - `"kind"`: `"pointwise"` or `"reduction"`;
# - `"elements"`: how many output positions (`x` indices) the kernel covers in total;
# - `"reduction_length"`: how many values each reduction combines (0 for pointwise kernels);
# - `"reductions"`: the reductions it performs, in order, as `"max"` / `"sum"`;
# - `"inputs"`: how many distinct buffers it reads (an `in_out_ptr` counts);
# - `"outputs"`: how many distinct buffers it writes.
#
# Each answer must come from reading the text: say in a comment which line tells you. The check
# compares your answers with the right ones, field by field, for five kernels, and says which fields
# were wrong: two copies of these with other sizes and names (`variant(name, random.Random(0))` makes
# one), and three kernels none of these is, built from the same kinds of lines in other numbers and
# orders (other loads, pointwise ops, reductions and stores; `composed(random.Random(0))` makes one
# and its reading). Grading draws other ones: a table of these kernels' answers will not do.
# %% id=kernels-7-2
from labkit.exercises.inductor_triton import KERNELS, composed, variant   # from figures/recordings/

print(sorted(KERNELS))
# %% id=t7-2
# your answer (Task 7.2)
import re


def read_kernel(source: str) -> dict:
    """Structured reading of one Inductor Triton kernel (Task 7.2)."""
    ### BEGIN SOLUTION
    body = source[source.index("def triton"):]
    xnumel = re.search(r"^\s*xnumel = (\d+)", body, re.M)          # the grid's x extent
    rnumel = re.search(r"^\s*r0?_?numel = (\d+)", body, re.M)       # per-row reduction length
    reductions = [m.group(1) if m.group(1) == "sum" else "max"
                  for m in re.finditer(r"\b(?:tl\.(sum)|triton_helpers\.(max)2)\(", body)]
    loads = set(re.findall(r"tl\.load\((\w+)", body))
    stores = set(re.findall(r"tl\.store\((\w+)", body))
    return {"kind": "reduction" if rnumel else "pointwise",
            "elements": int(xnumel.group(1)) if xnumel else 0,
            "reduction_length": int(rnumel.group(1)) if rnumel else 0,
            "reductions": reductions,
            "inputs": len(loads),
            "outputs": len(stores)}
    ### END SOLUTION
# %% id=c7-2
# NBVAL_CHECK_OUTPUT
import hashlib, itertools
from labkit.exercises.inductor_triton import composed, variant   # the check's own names
from labkit.grading import nbcheck as nc

FIELDS = ("kind", "elements", "reduction_length", "reductions", "inputs", "outputs")
KEY = {
"triton_per_fused__softmax_exp_prepare_softmax_online_sub_0": {
"kind": "4c619e8ce7f9",
"reductions": "ef5e0fcbe876",
"inputs": "4a62255d032b",
"outputs": "9107a01b4a09"
},
"triton_per_fused_lt_sum_0": {
"kind": "83de76d81ea5",
"reductions": "0467889fa551",
"inputs": "cf69ebe1988f",
"outputs": "2c28c43762c2"
},
"triton_per_fused_sum_0": {
"kind": "a6df830ca3b3",
"reductions": "517830df2bae",
"inputs": "2ad1cdd8719d",
"outputs": "d1861373434f"
},
"triton_per_fused_sum_threshold_backward_1": {
"kind": "b5fc90b7434a",
"reductions": "c6422e24f19e",
"inputs": "40aed962a99b",
"outputs": "c39ac9ca5c57"
},
"triton_per_fused_sum_threshold_backward_2": {
"kind": "b1a3c343e9bc",
"reductions": "42163c804679",
"inputs": "dae1ced71e12",
"outputs": "f066cd3e3eb0"
},
"triton_poi_fused_abs_add_div_1": {
"kind": "0e273abc396f",
"reductions": "8bd71e206760",
"inputs": "dd25acc3c81c",
"outputs": "e8b5c3df2241"
},
"triton_poi_fused_add_relu_0": {
"kind": "04e76d40ddbf",
"reductions": "4d0f9c7029d3",
"inputs": "5000b10162d6",
"outputs": "8ccff0d9cdc2"
},
"triton_poi_fused_mul_0": {
"kind": "e0f9bd4d5c86",
"reductions": "bae5983dc6e3",
"inputs": "281366bfbbcc",
"outputs": "ab6b28ed65ce"
}
}       # salted hashes of the right answers: no answer here
r = nc.rng("7.2")
templates = r.sample(sorted(KEY), 2)
cases = [variant(name, r) for name in templates]      # resized, renamed copies of the kernels
new = [composed(r) for _ in range(3)]   # kernels built from the same lines, none of the templates


def decode(name, field):
    """The field's right answer, found among the few values it can take (the key hides it)."""
    candidates = {"kind": ["pointwise", "reduction"], "inputs": range(8), "outputs": range(8),
                  "reductions": [list(c) for n in range(4)
                                 for c in itertools.product(["max", "sum"], repeat=n)]}[field]
    return next(v for v in candidates
                if hashlib.sha256(f"7.2{name}{field}{v!r}".encode()).hexdigest()[:12] == KEY[name][field])


expected = {source: {**{f: decode(name, f) for f in KEY[name]}, "elements": elements,
                     "reduction_length": reduction_length}
            for name, (_, source, elements, reduction_length) in zip(templates, cases)}
expected.update({source: reading for _, source, reading in new})
nc.check_predictions("7.2", read_kernel, [(source,) for source in expected],
                     expected.__getitem__, "kernels", fields=list(FIELDS))

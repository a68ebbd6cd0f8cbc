"""Notebook 11's performance examples, each run for real and returned as a Trace.

On a GPU a student runs them live; ``benchmarks/record_gpu.py`` records them on the H100 into
``figures/recordings/<name>.json`` for CPU-only students (``labkit.recording(name)``). Each function
takes a device so that the Trace-building code also runs on a CPU (tests, and a try-out of the
recording script), where the GPU-only parts (CUDA graphs, GPU memory) say they were skipped.

- ``reductions``: one sum or var_mean per reduction strategy Inductor has (persistent, looped, split,
  Welford), compiled together; ``reduction_choice`` restates Inductor's rule for each shape.
- ``matmul_default`` / ``matmul_autotune``: a matmul with an epilogue, compiled normally (ATen GEMM +
  a pointwise kernel) and with max-autotune restricted to Triton (a GEMM template, epilogue fused).
- ``cudagraphs``: eager vs default vs ``mode="reduce-overhead"``, wall time per call and launches
  counted by the profiler, plus what makes Inductor skip CUDA graphs (its own reasons, captured).
- ``checkpoint_memory``: bytes a forward keeps for the backward, and the GPU's peak, with and
  without activation checkpointing, eager and compiled.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from labkit.trace import Timing, Trace, environment

# -- reductions -------------------------------------------------------------------------------------
# (name, input shape, op): shapes chosen so that each one lands in a different strategy on an H100.
REDUCTION_CASES: list[tuple[str, tuple[int, ...], str]] = [
    ("persistent", (4096, 512), "sum"),
    ("looped", (1024, 8192), "sum"),
    ("split", (1 << 24,), "sum"),
    ("welford_persistent", (2048, 256), "var_mean"),
    ("welford_looped", (512, 16384), "var_mean"),
]


def _reductions_fn(a, b, c, d, e):
    import torch

    return a.sum(-1), b.sum(-1), c.sum(), torch.var_mean(d, -1), torch.var_mean(e, -1)


def reduction_inputs(device: str) -> list[Any]:
    """One input per REDUCTION_CASES entry, seeded."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    return [torch.randn(shape, generator=g).to(device) for _, shape, _ in REDUCTION_CASES]


def reduction_choice(outputs: int, reduced: int, num_sm: int) -> tuple[str, str]:
    """(strategy, why) Inductor's Triton backend picks to reduce `outputs` contiguous rows of `reduced`.

    For a reduction over the last (contiguous) dimension, which Inductor hints as INNER.

    Restates torch._inductor (2.11-2.13): ir.Reduction.num_splits with
    choices.reduction_split_factor (split when fewer than 2 x SMs outputs and more than 8192 elements
    per output) and choices.should_use_persistent_reduction (persistent when an inner reduction has at
    most 1024 elements). Cooperative reductions and multi-kernel are off by default.
    """
    if outputs < 2 * num_sm and reduced > 8192:
        return "split", (f"only {outputs} output(s) for {num_sm} SMs: one block per output would leave "
                         f"most SMs idle, so the {reduced} elements are cut into chunks, reduced in "
                         "parallel (a looped kernel), then combined (a small persistent kernel)")
    if reduced <= 1024:
        return "persistent", (f"{reduced} elements per output fit in one block (<= 1024): the whole "
                              "row is loaded into registers at once, no loop (triton_per_)")
    return "looped", (f"{reduced} elements per output are too many for one block (> 1024): a loop "
                      f"walks the row RBLOCK elements at a time, keeping a running result (triton_red_)")


def reductions(device: str = "cuda") -> Trace:
    """Explore the five reductions on ``device``; the Trace's meta says which case is which."""
    import torch

    from labkit.orchestrate import explore

    trace = explore(_reductions_fn, *reduction_inputs(device), timing=False, progress=None)
    trace.fn_name = "reductions"
    trace.meta["cases"] = [
        {"name": n, "shape": list(s), "op": op} for n, s, op in REDUCTION_CASES
    ]
    if device == "cuda":
        trace.meta["num_sm"] = torch.cuda.get_device_properties(0).multi_processor_count
    return trace


# -- max-autotune: a GEMM template with a fused epilogue --------------------------------------------
def linear_relu(x, w, b):
    """A matmul with an epilogue: bias, ReLU and a scale after x @ w."""
    import torch

    return torch.relu(x @ w + b) * 0.5


def matmul_inputs(device: str) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    dtype = torch.float16 if device == "cuda" else torch.float32
    x = torch.randn(1024, 1024, generator=g).to(device, dtype)
    w = torch.randn(1024, 1024, generator=g).div(32).to(device, dtype)
    b = torch.randn(1024, generator=g).to(device, dtype)
    return x, w, b


# max-autotune restricted to Triton templates, so the epilogue is fused into the GEMM kernel even
# where cuBLAS would win the benchmark (what the lesson wants to show).
# benchmark_epilogue_fusion off: Inductor decides fusing the epilogue into the template by its
# estimate, not by timing both (at 1024^2 the two are close, and on an H100 with torch 2.11 two
# default compiles in fresh processes chose differently: one fused, one not).
AUTOTUNE_OPTIONS = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON",
                    "benchmark_epilogue_fusion": False}


def matmul_default(device: str = "cuda") -> Trace:
    """linear_relu compiled with Inductor's defaults: an extern GEMM plus a pointwise epilogue kernel."""
    from labkit.orchestrate import explore

    return explore(linear_relu, *matmul_inputs(device), progress=None)


def matmul_autotune(device: str = "cuda") -> Trace:
    """linear_relu with max-autotune (Triton templates only): one template kernel, epilogue fused."""
    from labkit.orchestrate import explore

    trace = explore(linear_relu, *matmul_inputs(device), options=dict(AUTOTUNE_OPTIONS), progress=None)
    trace.meta["options"] = dict(AUTOTUNE_OPTIONS)
    return trace


# -- CUDA graphs: reduce-overhead ------------------------------------------------------------------
def small_mlp(x, w1, w2, w3):
    """Three small layers: tiny kernels, so launching them costs more than running them."""
    import torch

    x = torch.relu(x @ w1)
    x = torch.relu(x @ w2)
    return torch.softmax(x @ w3, dim=-1)


def small_mlp_inputs(device: str) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    return tuple(torch.randn(shape, generator=g).to(device) for shape in
                 ((32, 256), (256, 256), (256, 256), (256, 64)))


def wall_time(fn: Callable[..., Any], args: tuple[Any, ...], label: str, calls: int = 200,
              repeats: int = 7) -> Timing:
    """Wall-clock time per call, CPU launch cost included: median of `repeats` batches of `calls`.

    Not do_bench: its L2 flush between calls keeps the GPU busy while the CPU launches the next
    call, hiding exactly the launch overhead CUDA graphs remove.
    """
    import torch

    cuda = any(getattr(a, "is_cuda", False) for a in args)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):
        fn(*args)
    sync()
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        sync()
        per_call.append((time.perf_counter() - start) / calls)
    q = statistics.quantiles(per_call, n=4)
    device = torch.cuda.get_device_name(0) if cuda else "cpu"
    return Timing(label=label, median_s=statistics.median(per_call), spread_s=q[2] - q[0],
                  device=device, meta={"timer": "wall clock, synchronized", "calls": calls * repeats})


def launches(fn: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, int]:
    """How many kernel-launch and graph-launch API calls one call of fn makes (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    counts: dict[str, int] = {}
    for ev in prof.events():
        if "Launch" in ev.name and ev.name.startswith(("cu", "cuda")):
            counts[ev.name] = counts.get(ev.name, 0) + 1
    return counts


@contextlib.contextmanager
def inductor_messages() -> Iterator[list[str]]:
    """Collect what Inductor's loggers say (e.g. "skipping cudagraphs due to ...") instead of stderr."""
    from labkit import _torch
    from labkit.capture.logs import Kept, routed

    kept = Kept()
    with routed([logging.getLogger(_torch.INDUCTOR_LOGGER)], kept, level=logging.WARNING, replace=True):
        yield kept.messages


def _host_input(x, w):
    return x.sin() + w.to(x.device) * 2


def _mutates(x, buf):
    buf.add_(x)
    return buf * 2


SKIP_CASES = ("a CPU tensor input", "an input mutated in place", "a new input size each call")


def skip_case(name: str, device: str = "cuda") -> dict[str, Any]:
    """One case that breaks CUDA graphs: Inductor's skip counter and its first message about it."""
    import torch

    from labkit import _torch

    counters = _torch.counters()
    x = torch.randn(64, device=device)
    if name == "a new input size each call":  # one graph per size; Inductor warns past a limit
        limit = _torch.cudagraph_dynamic_shape_warn_limit()
        with inductor_messages() as messages:
            compiled = torch.compile(lambda t: torch.sin(t) * 2, mode="reduce-overhead", dynamic=True)
            for n in range(16, 16 + limit + 2):
                compiled(torch.randn(n, device=device))
        warned = [m.splitlines()[0] for m in messages if "distinct" in m]
        return {"sizes": limit + 2, "message": warned[0] if warned else ""}
    fn, args = {"a CPU tensor input": (_host_input, (x, torch.ones(64))),
                "an input mutated in place": (_mutates, (x, torch.zeros(64, device=device)))}[name]
    before = counters["inductor"]["cudagraph_skips"]
    with inductor_messages() as messages:
        compiled = torch.compile(fn, mode="reduce-overhead")
        for _ in range(3):
            step(compiled, args)
    skips = [m.splitlines()[0] for m in messages if "cudagraph" in m.lower()]
    # with graph partitioning, a CPU input is no skip: the graph is cut around the host-to-device copy
    return {"skips": counters["inductor"]["cudagraph_skips"] - before,
            "message": skips[0] if skips else "",
            "graph_partition": _torch.graph_partition(),
            "launches": launches(lambda *a: step(compiled, a), args)}


def step(compiled: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """One call of a reduce-overhead function as a new step (it may reuse the last call's outputs)."""
    import torch

    torch.compiler.cudagraph_mark_step_begin()
    return compiled(*args)


def cudagraph_skips(device: str = "cuda") -> dict[str, dict[str, Any]]:
    """skip_case for each of SKIP_CASES, each in a fresh Python process.

    One process per case: run one after another in one process, the cases tripped torch 2.11's
    cudagraph-trees memory-pool check (an internal RuntimeError), which says nothing about them.
    """
    import json
    import subprocess
    import sys

    out: dict[str, dict[str, Any]] = {}
    for name in SKIP_CASES:
        code = ("import json; from labkit.perf import skip_case; "
                f"print(json.dumps(skip_case({name!r}, {device!r})))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300)
        lines = done.stdout.strip().splitlines()
        try:
            out[name] = json.loads(lines[-1])
        except (IndexError, ValueError):
            err = done.stderr.strip().splitlines()
            out[name] = {"error": err[-1] if err else f"exit code {done.returncode}"}
    return out


def cudagraphs(device: str = "cuda") -> Trace:
    """small_mlp eager vs compiled vs reduce-overhead: time per call, launches per call, skips."""
    import torch

    trace = Trace(fn_name="small_mlp", backend="inductor", env=environment())
    args = small_mlp_inputs(device)
    modes: dict[str, Callable[..., Any]] = {"eager": small_mlp}
    torch.compiler.reset()
    modes["inductor (default)"] = torch.compile(small_mlp)
    if device == "cuda":
        graphed = torch.compile(small_mlp, mode="reduce-overhead")

        def reduce_overhead(*a):
            # each call is a new "step": the CUDA graph may then reuse the last call's output memory
            return step(graphed, a).clone()

        modes['inductor mode="reduce-overhead"'] = reduce_overhead
    else:
        trace.meta["note"] = "CUDA graphs need a GPU: reduce-overhead was not run"
    trace.meta["launches"], trace.meta["matches_eager"], errors = {}, {}, {}
    ref = small_mlp(*args)
    for label, fn in modes.items():
        try:  # one mode failing (a torch bug, say) is recorded, and the others are still measured
            trace.timings.append(wall_time(fn, args, label))
            trace.meta["launches"][label] = launches(fn, args)
            trace.meta["matches_eager"][label] = bool(
                torch.allclose(fn(*args), ref, atol=1e-4, rtol=1e-3))
        except Exception as e:  # noqa: BLE001
            errors[label] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    if device == "cuda":
        try:
            trace.meta["cudagraph_skips"] = cudagraph_skips(device)
        except Exception as e:  # noqa: BLE001
            errors["cudagraph_skips"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    if errors:
        trace.meta["errors"] = errors
    return trace


# -- activation checkpointing: memory ---------------------------------------------------------------
def block(x, w):
    import torch

    return torch.sin(x @ w).relu() @ w


def net(x, w):
    """Two blocks; the backward needs their intermediate activations."""
    return block(block(x, w), w).sum()


def net_checkpointed(x, w):
    """The same two blocks under activation checkpointing: the backward recomputes their insides."""
    from torch.utils.checkpoint import checkpoint

    h = checkpoint(block, x, w, use_reentrant=False)
    return checkpoint(block, h, w, use_reentrant=False).sum()


def saved_bytes(out: Any, inputs: tuple[Any, ...]) -> int:
    """Bytes a compiled function's output keeps alive for its backward, inputs not counted.

    Reads the tensors the compiled autograd node saved (``out.grad_fn.saved_tensors``) and counts
    each storage once: views of one buffer (a transposed weight) cost nothing extra.
    """
    keep = {t.untyped_storage().data_ptr() for t in inputs}
    seen: dict[int, int] = {}
    for t in getattr(out.grad_fn, "saved_tensors", ()):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in keep:
            seen[ptr] = t.untyped_storage().nbytes()
    return sum(seen.values())


def eager_saved_bytes(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> int:
    """Bytes eager autograd saves for fn's backward (saved-tensor hooks), each storage once."""
    import torch

    keep = {t.untyped_storage().data_ptr() for t in inputs}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in keep:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(seen.values())


def checkpoint_inputs(device: str, n: int = 2048) -> tuple[Any, Any]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(n, n, generator=g).to(device).requires_grad_()
    w = (torch.randn(n, n, generator=g) / n**0.5).to(device).requires_grad_()
    return x, w


def checkpoint_memory(device: str = "cuda", n: int | None = None) -> Trace:
    """Saved bytes (and on a GPU the peak memory of forward+backward) with/without checkpointing."""
    import torch

    n = n or (2048 if device == "cuda" else 256)
    trace = Trace(fn_name="net", backend="inductor", env=environment())
    x, w = checkpoint_inputs(device, n)
    rows: dict[str, dict[str, Any]] = {}
    torch.compiler.reset()
    for label, fn, compiled in [
        ("eager", net, False),
        ("eager + checkpoint", net_checkpointed, False),
        ("compiled", net, True),
        ("compiled + checkpoint", net_checkpointed, True),
    ]:
        run = torch.compile(fn) if compiled else fn
        run(x, w).backward()  # compile (forward and backward) outside the measurement
        x.grad = w.grad = None
        row: dict[str, Any] = {}
        if device == "cuda":
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        out = run(x, w)
        row["saved_bytes"] = saved_bytes(out, (x, w)) if compiled else eager_saved_bytes(fn, (x, w))
        if device == "cuda":
            row["held_after_forward_bytes"] = torch.cuda.memory_allocated() - base
        out.backward()
        if device == "cuda":
            torch.cuda.synchronize()
            row["peak_bytes"] = torch.cuda.max_memory_allocated() - base
        x.grad = w.grad = None
        del out
        rows[label] = row

        def step(x, run=run):
            run(x, w).backward()
            x.grad = w.grad = None

        trace.timings.append(wall_time(step, (x,), f"{label}: forward + backward", calls=5, repeats=5))
    trace.meta.update({"memory": rows, "n": n, "activation_bytes": n * n * x.element_size()})
    return trace


# name -> recorder(device) -> Trace: what benchmarks/record_gpu.py records for notebook 11.
RECORDERS: dict[str, Callable[[str], Trace]] = {
    "reductions": reductions,
    "matmul_default": matmul_default,
    "matmul_autotune": matmul_autotune,
    "cudagraphs": cudagraphs,
    "checkpoint_memory": checkpoint_memory,
}

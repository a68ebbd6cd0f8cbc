"""Fair timing: warm-up, median and spread (IQR), pinned CPU threads, CUDA-aware.

Every number the course shows comes from here, so eager, Inductor and labkit are timed the same way:
threads are pinned *before* compiling (Inductor bakes the thread count into its C++ kernels),
each callable is warmed up (the first call compiles), and we report the median with the
inter-quartile range, never a single run or a mean that one stall can drag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.trace import Timing, fmt_seconds


@contextlib.contextmanager
def pinned_threads(n: int = 1) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``, restoring the old count afterwards."""
    import torch

    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _is_cuda(args: tuple[Any, ...]) -> bool:
    import torch

    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)


def measure(
    fn: Callable[..., Any],
    *args: Any,
    label: str = "",
    warmup: int = 2,
    min_run_time: float = 0.3,
    device: str | None = None,
    meta: dict[str, Any] | None = None,
) -> Timing:
    """Time ``fn(*args)``: median and IQR in seconds, after ``warmup`` untimed calls."""
    import torch

    if not callable(fn):
        raise TypeError(f"measure() needs a callable, got {type(fn).__name__}")
    cuda = device == "cuda" or (device is None and _is_cuda(args))
    for _ in range(max(warmup, 1)):
        fn(*args)
    if cuda:
        return _measure_cuda(fn, args, label, meta or {})
    from torch.utils.benchmark import Timer

    m = Timer(
        stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=torch.get_num_threads()
    ).blocked_autorange(min_run_time=min_run_time)
    info = {"threads": torch.get_num_threads(), "runs": len(m.times), **(meta or {})}
    return Timing(label=label, median_s=float(m.median), spread_s=float(m.iqr), device="cpu", meta=info)


def _measure_cuda(fn: Callable[..., Any], args: tuple[Any, ...], label: str, meta: dict[str, Any]) -> Timing:
    """GPU timing with triton's do_bench (L2 flushed between runs) and CUDA-event fallback."""
    import torch

    try:
        from triton.testing import do_bench

        q = do_bench(lambda: fn(*args), warmup=25, rep=100, quantiles=[0.25, 0.5, 0.75])
        lo, med, hi = (float(v) * 1e-3 for v in q)  # do_bench reports milliseconds
        how = "triton.testing.do_bench"
    except ImportError:
        times = []
        for _ in range(50):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        times.sort()
        lo, med, hi = times[len(times) // 4], times[len(times) // 2], times[3 * len(times) // 4]
        how = "cuda events"
    device = torch.cuda.get_device_name(torch.cuda.current_device())
    return Timing(label=label, median_s=med, spread_s=hi - lo, device=device, meta={"timer": how, **meta})


# -- bandwidth ----------------------------------------------------------------------------------
_COPY_CACHE: dict[tuple[str, int, int], Timing] = {}


def copy_bandwidth(device: str | None = None, nbytes: int | None = None, *, refresh: bool = False) -> Timing:
    """Measure this machine's memory copy bandwidth: time ``dst.copy_(src)`` on a large buffer.

    Returns a Timing (``kind == "copy"``, ``meta["bytes"]`` = bytes read + written) that
    plots draw as the line achieved bandwidth is judged against; ``achieved_bandwidth(t)`` gives
    bytes/s. The buffer (default 64 MiB on CPU, 512 MiB on GPU) is far larger than the caches, so
    this is the DRAM/HBM rate a memory-bound kernel can hope for (data that fits in a cache can
    beat it). Measured once per process, device and CPU thread count; ``refresh=True`` measures again.
    """
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    nbytes = int(nbytes or (512 if device.startswith("cuda") else 64) * 2**20)
    key = (device, nbytes, 0 if device.startswith("cuda") else torch.get_num_threads())
    if refresh or key not in _COPY_CACHE:
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        t = dataclasses.replace(measure(dst.copy_, src, label="copy", min_run_time=0.2, device=device,
                                        meta={"bytes": 2 * src.numel() * 4}), kind="copy")
        del src, dst
        _COPY_CACHE[key] = t
    return _COPY_CACHE[key]


def achieved_bandwidth(timing: Timing, bytes: int | None = None) -> float:
    """Bytes per second: ``bytes`` (or ``timing.meta["bytes"]``) moved in the median time."""
    nbytes = bytes if bytes is not None else timing.meta.get("bytes")
    if not nbytes:
        raise ValueError(f"timing {timing.label!r} does not say how many bytes it moved; pass bytes=")
    if timing.median_s <= 0:
        raise ValueError(f"timing {timing.label!r} has a non-positive median")
    return float(nbytes) / timing.median_s


def io_bytes(*tensors: Any) -> int:
    """Bytes in every tensor found in the arguments (nested lists/tuples/dicts too): the least
    traffic a kernel that reads its inputs and writes its outputs once must move."""
    import torch

    total = 0
    stack = list(tensors)
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return total


# -- compare ----------------------------------------------------------------------------------------
@dataclass
class CompareResult:
    """What ``compare`` measured: one run Timing per backend (plus compile times), as table and plot."""

    fn_name: str
    timings: list[Timing] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # backend -> why it did not run
    mismatched: dict[str, float] = field(default_factory=dict)  # backend -> max abs error vs eager
    # (of outputs, and of gradients when the function runs a backward)

    def runs(self) -> list[Timing]:
        return [t for t in self.timings if t.kind == "run"]

    def timing(self, backend: str) -> Timing:
        """The run Timing of one backend."""
        for t in self.runs():
            if t.label == backend:
                return t
        raise KeyError(f"no timing for {backend!r}: " + self.unavailable.get(backend, "not measured"))

    def speedup(self, backend: str, over: str = "eager") -> float:
        """How many times faster ``backend`` ran than ``over`` (median over median)."""
        return self.timing(over).median_s / self.timing(backend).median_s

    def table(self) -> str:
        """A plain-text table: backend, median, IQR, speedup, bandwidth, compile time, notes."""
        runs = self.runs()
        base = next((t.median_s for t in runs if t.label == "eager"), None)
        copy = next((t for t in self.timings if t.kind == "copy"), None)
        compiles = {str(t.meta.get("backend")): t for t in self.timings if t.kind == "compile"}
        head = ["backend", "median", "IQR", "vs eager", "GB/s", "compile+1st call", "note"]
        rows = []
        for t in runs:
            gbs = _gb(achieved_bandwidth(t)) if t.meta.get("bytes") else ""
            c = compiles.get(t.label)
            note = f"MISMATCH max err {self.mismatched[t.label]:.2g}" if t.label in self.mismatched else ""
            rows.append([t.label, fmt_seconds(t.median_s), fmt_seconds(t.spread_s),
                         f"{base / t.median_s:.2f}x" if base else "", gbs,
                         fmt_seconds(c.median_s) if c else "", note])
        for b, why in self.unavailable.items():
            rows.append([b, "-", "-", "-", "-", "-", f"unavailable: {why}"])
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        device = runs[0].device if runs else "?"
        threads = runs[0].meta.get("threads") if runs else None
        foot = f"{self.fn_name} on {device}" + (f", {threads} thread(s)" if threads else "")
        if copy:
            foot += f"; measured copy bandwidth {_gb(achieved_bandwidth(copy))} GB/s"
        return "\n".join([*lines, foot])

    def __repr__(self) -> str:
        return self.table()


def _gb(bytes_per_s: float) -> str:
    """Bytes/s as GB/s: '13.7', '2965' (no exponent notation in a table)."""
    gb = bytes_per_s / 1e9
    return f"{gb:.0f}" if gb >= 100 else f"{gb:.3g}"


def _outputs_close(a: Any, b: Any) -> float:
    """Largest absolute difference between two (nested) outputs; inf when their structure differs."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return float("inf")
        if a.numel() == 0:
            return 0.0
        return float((a.detach().double() - b.detach().double()).abs().max())
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return max((_outputs_close(x, y) for x, y in zip(a, b)), default=0.0)
    return 0.0 if a == b else float("inf")


def _grad_leaves(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> list[Any]:
    """Tensors a backward inside ``fn`` may fill ``.grad`` of: inputs that require grad, and the
    parameters of the modules among the inputs, ``fn`` itself, its closure and the globals it names."""
    import torch

    code = getattr(fn, "__code__", None)
    named = [getattr(fn, "__globals__", {}).get(n) for n in (code.co_names if code else ())]
    cells = [c.cell_contents for c in getattr(fn, "__closure__", None) or () if c.cell_contents is not c]
    leaves: dict[int, Any] = {}
    for obj in [*inputs, fn, getattr(fn, "__self__", None), *cells, *named]:
        if isinstance(obj, torch.nn.Module):
            leaves.update((id(p), p) for p in obj.parameters())
        elif isinstance(obj, torch.Tensor) and obj.is_leaf and obj.requires_grad:
            leaves[id(obj)] = obj
    return list(leaves.values())


def _grads_after(f: Callable[..., Any], inputs: tuple[Any, ...], leaves: list[Any]) -> tuple[Any, list[Any]]:
    """``f(*inputs)`` from cleared gradients: its output and the gradient each leaf got."""
    for leaf in leaves:
        leaf.grad = None
    out = f(*inputs)
    return out, [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]


def _compiled(fn: Callable[..., Any], backend: str) -> Callable[..., Any]:
    """``fn`` for one backend name: eager as is, any other compiled with the backend of that name."""
    import torch

    from labkit.backends import resolve

    return fn if backend == "eager" else torch.compile(fn, backend=resolve(backend))


def compare(
    fn: Callable[..., Any],
    *inputs: Any,
    backends: Sequence[str] = ("eager", "inductor", "labkit"),
    threads: int = 1,
    min_run_time: float = 0.3,
    bytes: int | None = None,
    bandwidth: bool = True,
    reset: bool = True,
    tolerance: float = 1e-4,
) -> CompareResult:
    """Time ``fn(*inputs)`` under each backend, fairly (``labkit.compare`` also draws table and plot).

    Threads are pinned (CPU) *before* anything is compiled, every compiled function is called once
    untimed (that call compiles; its time is reported as "compile+1st call") and then timed like
    eager: median and IQR. Outputs are checked against eager, and so are gradients when ``fn``
    runs a backward (of its inputs and of the parameters of modules it uses). A backend that cannot run here
    (an unknown name, a compile error) is reported as unavailable, not raised.

    Args:
        bytes: bytes a call must move, for the bandwidth column; default: inputs + outputs.
        bandwidth: also measure the machine's copy bandwidth (once per process) to compare with.
        reset: ``torch.compiler.reset()`` first, so compile times are real (other compiled
            functions recompile on their next call).
    """
    import torch

    if not callable(fn):
        raise TypeError(f"compare() needs a callable first, got {type(fn).__name__}")
    if not backends:
        raise ValueError("compare() needs at least one backend")
    cuda = _is_cuda(inputs)
    device = "cuda" if cuda else "cpu"
    result = CompareResult(fn_name=getattr(fn, "__name__", type(fn).__name__))
    pin = contextlib.nullcontext() if cuda else pinned_threads(threads)
    with pin:
        if reset:
            torch.compiler.reset()
        leaves = _grad_leaves(fn, inputs)
        expected, expected_grads = _grads_after(fn, inputs, leaves)
        # fn runs a backward: its gradients are outputs too (a wrong gradient is a mismatch)
        backward = any(g is not None for g in expected_grads)
        nbytes = bytes if bytes is not None else io_bytes(inputs, expected)
        for b in backends:
            try:
                f = _compiled(fn, b)
                start = time.perf_counter()
                out, grads = _grads_after(f, inputs, leaves)
                if cuda:
                    torch.cuda.synchronize()
                first = time.perf_counter() - start
                err = _outputs_close([out, grads] if backward else out,
                                     [expected, expected_grads] if backward else expected)
                if err > tolerance:
                    result.mismatched[b] = err
                run = measure(f, *inputs, label=b, min_run_time=min_run_time, device=device,
                              meta={"bytes": nbytes, "max_abs_err": err})
            except Exception as e:  # a backend failing is a finding, not a crash
                first_line = (str(e).strip().splitlines() or [""])[0][:200]
                result.unavailable[b] = f"{type(e).__name__}: {first_line}"
                continue
            result.timings.append(run)
            if b != "eager":
                result.timings.append(Timing(f"compile: {b}", first, 0.0, run.device,
                                             {"stage": "compile+1st call", "backend": b}, kind="compile"))
        if bandwidth:
            result.timings.append(copy_bandwidth(device))
        for leaf, g in zip(leaves, expected_grads):  # leave eager's gradients of one call behind
            leaf.grad = g
    return result

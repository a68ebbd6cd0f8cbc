"""Fair timing: warm-up, median and spread (IQR), pinned CPU threads, CUDA-aware.

Every number the course shows comes from here, so eager, Inductor and labkit are timed the same way:
threads are pinned *before* compiling (Inductor bakes the thread count into its C++ kernels),
each callable is warmed up (the first call compiles), and we report the median with the
inter-quartile range, never a single run or a mean that one stall can drag.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from labkit.trace import Timing


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

"""``labkit.explore``: compile a function once, for real, and return a Trace of every stage.

The orchestrator: it checks the inputs before anything compiles, starts Dynamo from a clean state,
installs the capture Recorder (or the labkit compiler's backend), calls the compiled function (and
its backward when an input requires grad, since AOTAutograd compiles the backward lazily), builds
the stages, and times eager against compiled. capture/ and compiler/ never import each other;
this module is the only place that knows about both.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from labkit.trace import Timing, Trace, environment

BACKENDS = ("inductor", "labkit", "eager", "aot_eager")
_TORCH_COMPILE_KWARGS = ("mode", "options", "dynamic", "fullgraph")


def _leaf_types() -> tuple[type, ...]:
    """Example-input types torch.compile handles as graph inputs or constants."""
    import torch

    types_: list[type] = [
        torch.Tensor,
        torch.nn.Module,
        int,
        float,
        bool,
        complex,
        str,
        bytes,
        type(None),
        torch.dtype,
        torch.device,
        torch.Size,
        torch.memory_format,
        torch.layout,
        slice,
        type(Ellipsis),
    ]
    with contextlib.suppress(ImportError):
        import numpy as np

        types_ += [np.ndarray, np.generic]  # Dynamo traces NumPy code through torch
    return tuple(types_)


def _walk(value: Any, path: str) -> Iterable[tuple[str, Any]]:
    """(path, leaf) for every leaf of nested lists/tuples/dicts."""
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}[{k!r}]")
    else:
        yield path, value


def check_inputs(
    fn: Callable[..., Any], inputs: Sequence[Any], what: str = "example inputs"
) -> None:
    """Raise a clear TypeError unless ``fn(*inputs)`` is a call torch.compile can trace."""
    if not callable(fn):
        raise TypeError(
            f"labkit.explore needs a function (or nn.Module) to compile; got "
            f"{type(fn).__name__} {fn!r:.60}"
        )
    import torch

    try:
        # An nn.Module's __call__ takes *args: the parameters that matter are forward's.
        sig = inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn)
    except (TypeError, ValueError):
        sig = None  # some builtins have no signature: torch.compile will say if the call is wrong
    if sig is not None:
        try:
            sig.bind(*inputs)
        except TypeError as e:
            name = getattr(fn, "__name__", type(fn).__name__)
            raise TypeError(
                f"the {what} do not fit {name}{sig}: {e}. "
                f"Pass one example value per parameter, e.g. "
                f"explore(fn, torch.randn(8), torch.randn(8))"
            ) from None
    allowed = _leaf_types()
    for i, value in enumerate(inputs):
        for path, leaf in _walk(value, f"input {i}"):
            if not isinstance(leaf, allowed):
                raise TypeError(
                    f"{path} is a {type(leaf).__module__}.{type(leaf).__name__}, which torch.compile "
                    "cannot take as an example input. Pass tensors (or numbers, strings, None, "
                    "torch.dtype/device, nn.Modules, and lists/tuples/dicts of these); to use "
                    "another object, close over it: explore(lambda x: fn(x, obj), x)"
                )


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.nn.Module):
        return list(value.parameters())
    return [leaf for _, leaf in _walk(value, "") if isinstance(leaf, torch.Tensor)]


def _needs_backward(fn: Any, inputs: Sequence[Any]) -> bool:
    return any(t.requires_grad for t in _tensors(list(inputs)) + _tensors(fn))


def _run_backward(out: Any) -> None:
    """Backward on the sum of every differentiable output: enough to make AOTAutograd compile it."""
    outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
    if outs:
        sum(o.sum() for o in outs).backward()  # type: ignore[union-attr]


def _backend_for(backend: str, trace: Trace, target: str, compile_kwargs: dict[str, Any]) -> Any:
    """The real backend callable to wrap; fails before any compile when it cannot exist."""
    from labkit.capture import _torch

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    mode, options = compile_kwargs.pop("mode", None), compile_kwargs.pop("options", None)
    if backend == "inductor":
        return _torch.inductor_backend(mode, options, compile_kwargs.get("dynamic"))
    if mode is not None or options is not None:
        raise ValueError(
            f"mode= and options= configure Inductor; backend={backend!r} takes neither"
        )
    if backend != "labkit":
        return _torch.lookup_backend(backend)
    try:
        compiler = importlib.import_module("labkit.compiler")
    except ImportError as e:
        raise RuntimeError(
            f"backend='labkit' needs labkit's teaching compiler, which failed to "
            f"import here: {type(e).__name__}: {e}"
        ) from e
    make_backend = getattr(compiler, "make_backend", None)
    if make_backend is None:
        raise RuntimeError(
            "backend='labkit' needs labkit.compiler.make_backend(trace, target), "
            "which this copy of labkit does not have yet; use backend='inductor'"
        )
    return make_backend(trace=trace, target=target)


def _describe(inputs: Sequence[Any]) -> list[str]:
    out = []
    for i, value in enumerate(inputs):
        t = getattr(value, "shape", None)
        if t is not None and hasattr(value, "dtype"):
            grad = ", requires_grad" if getattr(value, "requires_grad", False) else ""
            out.append(
                f"{i}: {str(value.dtype).removeprefix('torch.')}{list(t)} "
                f"on {getattr(value, 'device', '?')}{grad}"
            )
        else:
            out.append(f"{i}: {type(value).__name__}")
    return out


def compile_timings(rec: Any, device: str) -> list[Timing]:
    """Compile time split into Dynamo / AOTAutograd / Inductor, from torch's compilation_metrics."""
    parts = {"dynamo": 0.0, "aot": 0.0, "backend": 0.0, "inductor": 0.0, "inductor (backward)": 0.0}
    seen = False
    for ev in rec.of_kind("compilation_metrics"):
        m = ev.meta or {}
        total, backend = m.get("entire_frame_compile_time_s"), m.get("backend_compile_time_s")
        inductor = m.get("inductor_compile_time_s")
        if total is None:
            continue
        seen = True
        parts["dynamo"] += total - (backend or 0.0)
        if inductor is not None:
            parts["aot"] += (backend or 0.0) - inductor
            parts["inductor"] += inductor
        else:
            parts["backend"] += backend or 0.0
    for ev in rec.of_kind("bwd_compilation_metrics"):
        parts["inductor (backward)"] += (ev.meta or {}).get("inductor_compile_time_s") or 0.0
    if not seen:
        return []
    meta = {"runs": 1, "source": "torch compilation_metrics"}
    return [
        Timing(label=f"compile: {k}", median_s=v, spread_s=0.0, device=device, meta=dict(meta))
        for k, v in parts.items()
        if v > 0 or k == "dynamo"
    ]


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _record_error(trace: Trace, rec: Any, err: BaseException) -> None:
    """Put the exception on the stage torch was working on, and on trace.error."""
    stage = rec.stage if rec.compiling else None  # None: compiling had finished; fn itself raised
    frame = rec.frame_labels().get(rec.compile_id or "", "")
    title = (
        f"error while compiling ({stage})" if stage else "error: the function raised while running"
    )
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    kind = stage or "dynamo.graph"
    # The error replaces the generic "nothing was captured" placeholder of its own stage.
    trace.stages = [s for s in trace.stages if not (s.kind == kind and not s.ok and not s.frame)]
    trace.add(
        kind, title, text, status="error", frame=frame, meta={"exception": type(err).__name__}
    )
    if type(err).__name__ == "Unsupported" and not trace.graph_breaks:
        # fullgraph=True turns a graph break into this error: still show where and why.
        from labkit.capture import dynamo

        trace.graph_breaks.append(dynamo.parse_graph_break(str(err), frame))
    cause = err.__cause__ or err.__context__
    trace.error = _first_line(err) + (f" (caused by {_first_line(cause)})" if cause else "")


def explore(
    fn: Callable[..., Any],
    *inputs: Any,
    backend: str = "inductor",
    timing: bool = True,
    progress: Callable[[str], None] | None = None,
    raise_errors: bool = False,
    extra_inputs: Sequence[Sequence[Any]] = (),
    target: str = "cpp",
    **compile_kwargs: Any,
) -> Trace:
    """Compile ``fn(*inputs)`` with torch.compile and return a Trace of every stage it went through.

    ``extra_inputs``: further input tuples, each one more call (e.g. a new shape, to see a recompile).
    ``progress``: called with the step being worked on (labkit.capture.PROGRESS_STEPS: stage kinds
    such as "dynamo.graph" or "aot.forward", then "building stages", "timing", "done").
    ``timing``: also time eager vs compiled (1 thread, median + IQR). ``target``: labkit backend only.
    ``compile_kwargs``: torch.compile's mode, options, dynamic, fullgraph.
    """
    import torch

    from labkit.bench import copy_bandwidth, io_bytes, measure, pinned_threads
    from labkit.capture import Recorder, RecordingBackend, build

    if progress is None:
        progress = _default_progress()
    fn = getattr(fn, "_torchdynamo_orig_callable", fn)  # given torch.compile(f): explore f itself
    check_inputs(fn, inputs)
    for k, extra in enumerate(extra_inputs):
        check_inputs(fn, tuple(extra), what=f"extra_inputs[{k}]")
    unknown = set(compile_kwargs) - set(_TORCH_COMPILE_KWARGS)
    if unknown:
        raise TypeError(
            f"unexpected keyword(s) {sorted(unknown)}; explore passes only "
            f"{_TORCH_COMPILE_KWARGS} on to torch.compile"
        )
    name = getattr(fn, "__name__", type(fn).__name__)
    trace = Trace(fn_name=name, backend=backend, env=environment())
    inner = _backend_for(backend, trace, target, compile_kwargs)
    on_gpu = any(t.is_cuda for t in _tensors(list(inputs)) + _tensors(fn))
    device = "cuda" if on_gpu else "cpu"
    trace.meta.update(
        {
            "inputs": _describe(inputs),
            "compile_kwargs": {k: repr(v) for k, v in compile_kwargs.items()},
            "extra_calls": len(extra_inputs),
        }
    )
    grad = _needs_backward(fn, inputs)

    with contextlib.ExitStack() as stack:
        if timing:  # Inductor bakes the thread count into its C++: pin before compiling
            stack.enter_context(pinned_threads(1))
        trace.env["threads"] = torch.get_num_threads()
        torch.compiler.reset()  # fresh Dynamo state: every frame really compiles again
        rec = Recorder(progress, inductor=backend == "inductor")
        recording = RecordingBackend(rec, inner)
        compiled: Any = None
        failure: BaseException | None = None
        try:
            with rec:
                compiled = torch.compile(fn, backend=recording, **compile_kwargs)
                start = time.perf_counter()
                out = compiled(*inputs)
                if on_gpu:
                    torch.cuda.synchronize()
                first_call = time.perf_counter() - start
                first_backward = None
                if grad:
                    rec.say("aot.backward")
                    start = time.perf_counter()
                    _run_backward(out)  # AOTAutograd compiles the backward graph only now
                    if on_gpu:
                        torch.cuda.synchronize()
                    first_backward = time.perf_counter() - start
                for extra in extra_inputs:
                    out = compiled(*extra)
                    if grad:
                        _run_backward(out)
        except Exception as e:  # the partial trace is still worth showing
            failure = e
        recording.rec = None  # later calls of the cached code must not grow this trace
        rec.say("building stages")
        try:
            build(trace, rec, backend, on_gpu)
        except Exception as e:  # a labkit bug: keep what was built, say so, never hide the compile
            trace.meta["capture_error"] = "".join(traceback.format_exception(type(e), e, None))
            if failure is None and raise_errors:
                raise
            trace.error = trace.error or f"labkit could not build every stage: {_first_line(e)}"
        if failure is not None:
            _record_error(trace, rec, failure)
            rec.say(f"error: {trace.error}")  # a progress bar turns red and stays
            if raise_errors:
                raise failure
            return trace
        once = {"runs": 1}
        trace.timings.append(Timing("compile + first call", first_call, 0.0, device, dict(once)))
        if first_backward is not None:
            trace.timings.append(
                Timing("compile + first backward", first_backward, 0.0, device, dict(once))
            )
        trace.timings += compile_timings(rec, device)
        if timing:
            rec.say("timing")
            moved = io_bytes(inputs, out)  # least traffic: read inputs, write outputs once
            trace.timings.append(
                measure(fn, *inputs, label="eager", meta={"what": "forward", "bytes": moved})
            )
            trace.timings.append(
                measure(
                    compiled,
                    *inputs,
                    label="compiled",
                    meta={"what": "forward", "backend": backend, "bytes": moved},
                )
            )
            trace.timings.append(copy_bandwidth("cuda" if on_gpu else "cpu"))
    rec.say("done")
    return trace


def _default_progress() -> Callable[[str], None] | None:
    """A notebook progress bar (silent in a terminal); None where ipywidgets is not installed."""
    try:
        from labkit.widgets.progress import progress_bar
    except ImportError:  # e.g. a bare GPU machine: capture works without any view
        return None
    return progress_bar()


class _CallableModule(types.ModuleType):
    """This module, callable as ``explore``: ``labkit.explore(fn, x)`` works however it was imported.

    Importing the submodule ``labkit.explore`` binds the *module* to the package attribute
    ``labkit.explore`` (Python does that for every submodule), which would shadow the function the
    package's lazy loader hands out. Calling the module forwards to the function instead.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Trace:
        return explore(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

"""The orchestrator behind ``labkit.explore``: compile a function once, for real, return a Trace.

It checks the inputs before anything compiles, starts Dynamo from a clean state,
installs the capture Recorder (or the labkit compiler's backend), calls the compiled function (and
its backward when an input requires grad, since AOTAutograd compiles the backward lazily), builds
the stages, and times eager against compiled. capture/ and compiler/ never import each other;
this module is the only place that knows about both.
"""

from __future__ import annotations

import contextlib
import inspect
import time
import traceback
import types
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from labkit import effects
from labkit.trace import Timing, Trace, environment

BACKENDS = ("inductor", "labkit", "eager", "aot_eager")
_TORCH_COMPILE_KWARGS = ("mode", "options", "dynamic", "fullgraph")


def _check_keywords(fn: Any, compile_kwargs: dict[str, Any]) -> None:
    """Keywords explore does not know: most often arguments meant for ``fn``; say how to pass them."""
    unknown = sorted(set(compile_kwargs) - set(_TORCH_COMPILE_KWARGS))
    if not unknown:
        return
    try:
        import torch

        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        params = set(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        params = set()
    name = getattr(fn, "__name__", type(fn).__name__)
    name = name if name.isidentifier() else "fn"  # a lambda
    ours = [k for k in unknown if k in params]
    args = ", ".join(f"{k}=..." for k in unknown)
    why = (f"{', '.join(map(repr, ours))} {'is a parameter' if len(ours) == 1 else 'are parameters'}"
           f" of {name}, but explore's keywords are its own (backend, timing, extra_inputs, "
           f"...) and torch.compile's {_TORCH_COMPILE_KWARGS}"
           if ours else
           f"explore takes backend, timing, progress, raise_errors, extra_inputs, target and "
           f"torch.compile's {_TORCH_COMPILE_KWARGS}")
    raise TypeError(
        f"unexpected keyword(s) {unknown}: {why}. To call {name} with keyword arguments, bind "
        f"them first: explore(functools.partial({name}, {args}), x) or "
        f"explore(lambda x: {name}(x, {args}), x)"
    )


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

    plain = getattr(fn, "forward", fn) if isinstance(fn, torch.nn.Module) else fn
    if inspect.isgeneratorfunction(plain) or inspect.isasyncgenfunction(plain):
        raise TypeError(
            f"{getattr(fn, '__name__', 'fn')} is a generator function (it uses `yield`): calling "
            "it only creates a generator, none of its code runs, so torch.compile would have "
            "nothing to compile and the Trace would stay empty. Explore a function that returns "
            "the tensors, e.g. explore(lambda x: torch.stack(list(gen(x))), x)"
        )
    if inspect.iscoroutinefunction(plain):
        raise TypeError(
            f"{getattr(fn, '__name__', 'fn')} is an async function: calling it only creates a "
            "coroutine, so there is nothing to compile. Explore a plain function instead"
        )

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
    from labkit import backends

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    mode, options = compile_kwargs.pop("mode", None), compile_kwargs.pop("options", None)
    return backends.resolve(backend, trace=trace, target=target, mode=mode, options=options,
                            dynamic=compile_kwargs.get("dynamic"))


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
        Timing(label=f"compile: {k}", median_s=v, spread_s=0.0, device=device, meta=dict(meta),
               kind="compile")
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
    from labkit.capture import dynamo

    if type(err).__name__ == "Unsupported" and not trace.graph_breaks:
        # fullgraph=True turns a graph break into this error: still show where and why.
        trace.graph_breaks.append(dynamo.parse_graph_break(str(err), frame))
    # The headline names the student's code or values; the whole chain stays in the stage text.
    headline, at = dynamo.error_headline(err)
    trace.error = headline
    if at is not None:
        import linecache

        trace.meta["error_at"] = {"filename": at[0], "lineno": at[1],
                                  "code": linecache.getline(at[0], at[1]).strip()}
    dynamo.source_labels(trace)


def explore(
    fn: Callable[..., Any],
    *inputs: Any,
    backend: str = "inductor",
    timing: bool = True,
    progress: Callable[[str], None] | None = None,
    raise_errors: bool = False,
    extra_inputs: Sequence[Sequence[Any]] = (),
    target: str = "cpp",
    outputs: list[Any] | None = None,
    **compile_kwargs: Any,
) -> Trace:
    """Compile ``fn(*inputs)`` with torch.compile and return a Trace of every stage it went through.

    What it does to the student's program (README "explore on your own model"): ``fn`` runs once
    per input tuple (``trace.meta["calls"]``). Timing calls it thousands of times, so it runs only
    when that one call changed nothing ``effects`` can see (input/parameter/buffer/.grad versions,
    module attributes, optimizer state, closure variables and globals); otherwise
    ``trace.meta["timing_skipped"]`` says what changed and points to ``labkit.compare``. Output of a
    printing ``fn`` is hidden while timing; the random state is restored after it; explore's own
    backward leaves no ``.grad``; meta-device inputs are not timed. ``torch.compiler.reset()`` runs
    first; when it discards other compiled functions, a warning and ``trace.meta["dynamo_reset"]``
    name them.

    ``extra_inputs``: further input tuples, each one more call (e.g. a new shape, to see a recompile).
    ``progress``: called with the step being worked on (labkit.capture.PROGRESS_STEPS: stage kinds
    such as "dynamo.graph" or "aot.forward", then "building stages", "timing", "done"). None: none
    from ``labkit.orchestrate.explore``; ``labkit.explore`` (the notebook layer's) draws a bar for None.
    ``timing``: also time eager vs compiled (1 thread, median + IQR) when repeating ``fn`` is
    harmless; False also keeps the views from showing timings (``trace.meta["timing_off"]``; the
    compile times torch reports stay in ``trace.timings``). ``target``: labkit backend only. ``outputs``: a list that receives what each recorded
    call of the compiled ``fn`` returned (e.g. to check it against eager).
    ``compile_kwargs``: torch.compile's mode, options, dynamic, fullgraph.
    """
    import torch

    from labkit import _torch
    from labkit.bench import copy_bandwidth, io_bytes, measure, pinned_threads
    from labkit.capture import Recorder, RecordingBackend, build

    fn = _torch.original_callable(fn)  # given torch.compile(f): explore f itself
    check_inputs(fn, inputs)
    for k, extra in enumerate(extra_inputs):
        check_inputs(fn, tuple(extra), what=f"extra_inputs[{k}]")
    _check_keywords(fn, compile_kwargs)
    name = getattr(fn, "__name__", type(fn).__name__)
    trace = Trace(fn_name=name, backend=backend, env=environment())
    inner = _backend_for(backend, trace, target, compile_kwargs)
    every_tensor = _tensors(list(inputs)) + _tensors(fn)
    on_gpu = any(t.is_cuda for t in every_tensor)
    on_meta = any(t.is_meta for t in every_tensor)
    device = "cuda" if on_gpu else "cpu"
    trace.meta.update(
        {
            "inputs": _describe(inputs),
            "compile_kwargs": {k: repr(v) for k, v in compile_kwargs.items()},
            "extra_calls": len(extra_inputs),
        }
    )
    grad = _needs_backward(fn, inputs)
    watched = effects.reachable(fn, inputs)
    leaves = [t for _, obj in watched for t in _tensors(obj) if isinstance(obj, _grad_holders())]

    with contextlib.ExitStack() as stack:
        if timing:  # Inductor bakes the thread count into its C++: pin before compiling
            stack.enter_context(pinned_threads(1))
        trace.env["threads"] = torch.get_num_threads()
        _reset_dynamo(trace)  # fresh Dynamo state: every frame really compiles again
        rec = Recorder(progress, inductor=backend == "inductor")
        recording = RecordingBackend(rec, inner)
        compiled: Any = None
        failure: BaseException | None = None
        calls, found, printed = 0, [], [0]
        try:
            with rec:
                compiled = torch.compile(fn, backend=recording, **compile_kwargs)
                before = effects.snapshot(watched)
                start = time.perf_counter()
                calls += 1
                with effects.watch_output() as printed:
                    out = compiled(*inputs)
                if outputs is not None:
                    outputs.append(out)
                if on_gpu:
                    torch.cuda.synchronize()
                first_call = time.perf_counter() - start
                found = effects.changes(before, effects.snapshot(watched))
                first_backward = None
                if grad:
                    rec.say("aot.backward")
                    start = time.perf_counter()
                    with effects.grads_kept(leaves):  # explore's own backward leaves no .grad
                        _run_backward(out)  # AOTAutograd compiles the backward graph only now
                    if on_gpu:
                        torch.cuda.synchronize()
                    first_backward = time.perf_counter() - start
                for extra in extra_inputs:
                    calls += 1
                    out = compiled(*extra)
                    if outputs is not None:
                        outputs.append(out)
                    if grad:
                        with effects.grads_kept(leaves + _tensors(list(extra))):
                            _run_backward(out)
        except Exception as e:  # the partial trace is still worth showing
            failure = e
        recording.rec = None  # later calls of the cached code must not grow this trace
        _EXPLORED.update(ev.payload[0] for ev in rec.of_kind("bytecode"))
        trace.meta["calls"] = {"recorded": calls}
        if found:
            trace.meta["side_effects"] = found
        if printed[0]:
            trace.meta["printed_chars"] = printed[0]
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
        trace.timings.append(
            Timing("compile + first call", first_call, 0.0, device, dict(once), kind="compile")
        )
        if first_backward is not None:
            trace.timings.append(
                Timing("compile + first backward", first_backward, 0.0, device, dict(once),
                       kind="compile")
            )
        trace.timings += compile_timings(rec, device)
        if not timing:  # the views then show no timings; the compile times stay in the data
            trace.meta["timing_off"] = f"explore({name}, ..., timing=False)"
        skip = _why_not_timed(found, on_meta, name) if timing else None
        if skip:
            trace.meta["timing_skipped"] = skip
        elif timing:
            rec.say("timing")
            moved = io_bytes(inputs, out)  # least traffic: read inputs, write outputs once
            eager, eager_calls = effects.call_counter(fn)
            fast, fast_calls = effects.call_counter(compiled)
            settled = effects.snapshot(watched)
            quiet = effects.quiet() if printed[0] else contextlib.nullcontext()
            with quiet, effects.rng_kept(on_gpu):
                trace.timings.append(
                    measure(eager, *inputs, label="eager", meta={"what": "forward", "bytes": moved})
                )
                trace.timings.append(
                    measure(
                        fast,
                        *inputs,
                        label="compiled",
                        meta={"what": "forward", "backend": backend, "bytes": moved},
                    )
                )
            trace.meta["calls"]["timing"] = eager_calls[0] + fast_calls[0]
            if printed[0]:
                trace.meta["timing_note"] = f"{name} prints: its output was hidden while timing"
            moved_on = effects.changes(settled, effects.snapshot(watched))
            if moved_on:  # a change the first call did not show: say so, never hide it
                trace.meta["side_effects"] = [f"while timing: {c}" for c in moved_on]
            trace.timings.append(copy_bandwidth("cuda" if on_gpu else "cpu"))
    rec.say("done")
    return trace


def _grad_holders() -> tuple[type, ...]:
    import torch

    return torch.Tensor, torch.nn.Module


def _why_not_timed(found: list[str], on_meta: bool, name: str) -> str | None:
    """Why timing (thousands of calls) must not run, or None when repeating the call is harmless."""
    if on_meta:
        return (
            "the inputs (or parameters) are on the meta device: they have shapes but no data, "
            "nothing really runs, so there is nothing to time. Use real tensors to time it"
        )
    if found:
        return (
            f"one call of {name} changed state you can see ({'; '.join(found)}), and timing "
            "calls it thousands of times. explore called it once, as the Trace says; to time it "
            "anyway, on purpose, use labkit.compare(fn, *inputs) (it repeats those changes), or "
            "time the part without side effects (e.g. the model's forward)"
        )
    return None


# Code objects explore compiled: resetting them is no news to the student; others' are.
_EXPLORED: weakref.WeakSet[types.CodeType] = weakref.WeakSet()


def _reset_dynamo(trace: Trace) -> None:
    """torch.compiler.reset(), saying so in the Trace (and a warning) when it discards others' code."""
    import torch

    from labkit import _torch

    others = sorted({c.co_name for c in _torch.compiled_codes() if c not in _EXPLORED
                     and not c.co_name.startswith(_torch.RESUME_PREFIX)})  # Dynamo's own
    torch.compiler.reset()
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        msg = (
            "explore reset Dynamo (torch.compiler.reset()) so that every frame really compiles: "
            f"the compiled code of {len(others)} other function(s) ({shown}) was discarded, and "
            "they compile again on their next call"
        )
        trace.meta["dynamo_reset"] = msg
        warnings.warn(msg, UserWarning, stacklevel=3)

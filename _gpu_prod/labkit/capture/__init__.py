"""Record the real torch.compile into a Trace: a Recorder collects events, stage modules build stages.

Note: capture happens in two steps so that nothing here slows the compile down or depends on the
order torch emits things in. While ``Recorder`` is installed it only *collects* events (structured
trace records, artifact log lines, bytecode-hook calls, the graphs handed to the backend), each
labelled with the Dynamo compile id ("0/0", "1/0", "0/1") it belongs to. Afterwards ``build``
turns the events into Stages, stage module by stage module, in pipeline order. Every hook, handler,
log level and config value the Recorder touches is restored on exit, even when the compile raises.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labkit import _torch
from labkit.capture.logs import routed
from labkit.trace import STAGE_REGISTRY

# Structured trace records we keep (all others are dropped at once); chromium_event: compile time.
TRACE_KINDS = frozenset(
    {
        _torch.CHROMIUM_EVENT,
        "dynamo_start",
        "dynamo_output_graph",
        "dynamo_cpp_guards_str",
        "aot_joint_graph",
        "aot_forward_graph",
        "aot_backward_graph",
        "aot_inference_graph",
        "inductor_output_code",
        "compilation_metrics",
        "bwd_compilation_metrics",
        # symbolic shapes: specializations and guards with their stacks (capture/compiles.py)
        "symbolic_shape_specialization",
        "guard_added",
        "guard_added_fast",
        "create_symbol",
    }
)
TRACE_ARTIFACTS = frozenset(
    {
        "dynamo_graph_break_reason",
        "recompile_reasons",
        "inductor_post_grad_graph",
        "inductor_provenance_tracking_node_mappings",
        "inductor_provenance_tracking_kernel_stack_traces",
    }
)
# TORCH_LOGS artifacts that exist only as log lines, not as trace records.
LOG_ARTIFACTS = ("ir_pre_fusion", "ir_post_fusion", "fusion")

# Which stage torch is working on when an event arrives: drives progress and error attribution.
EVENT_STAGE = {event: k.kind for k in STAGE_REGISTRY for event in k.events}

# What explore's progress callback hears (the compile steps repeat once per frame and per AOT
# graph), in pipeline order: a progress bar can map each to a position.
PROGRESS_STEPS = (*dict.fromkeys(EVENT_STAGE.values()), "triton.ttir", "building stages",
                  "timing", "done")


@dataclass
class Event:
    """One thing torch.compile reported, labelled with the compile id it belongs to."""

    seq: int
    compile_id: str | None
    kind: str  # a trace record kind, an artifact name, or "bytecode" / "dynamo.graph" / "inductor.pass"
    payload: Any
    meta: dict[str, Any] = field(default_factory=dict)


class _TraceHandler(logging.Handler):
    """Keeps the structured trace records labkit reads (what TORCH_TRACE writes to disk)."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__(logging.DEBUG)
        self.rec = rec

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", None) or {}
        kind = next((k for k in meta if k in TRACE_KINDS), None)
        if kind is None and "artifact" in meta and meta["artifact"].get("name") in TRACE_ARTIFACTS:
            kind = meta["artifact"]["name"]
        if kind is None:
            return
        payload = getattr(record, "payload", None)
        if kind == "inductor_provenance_tracking_kernel_stack_traces":
            # Sent right after codegen: the moment Inductor's kernel -> node map is complete.
            payload = _torch.kernel_post_grad_nodes()
        cid = None
        if meta.get("frame_id") is not None:
            cid = f"{meta['frame_id']}/{meta.get('frame_compile_id', 0)}"
        self.rec.add(kind, payload, meta.get(kind), compile_id=cid)


class _LogHandler(logging.Handler):
    """Keeps TORCH_LOGS artifact lines (IR before/after fusion, fusion decisions)."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__(logging.DEBUG)
        self.rec = rec

    def emit(self, record: logging.LogRecord) -> None:
        self.rec.add(_torch.artifact_name(record.name), record.getMessage(), {"logger": record.name})


class RecordingBackend:
    """A torch.compile backend that records each Dynamo FX graph, then hands it to the real backend."""

    def __init__(self, rec: Recorder, inner: Callable[..., Any]) -> None:
        self.rec: Recorder | None = rec  # set to None once the capture is over
        self.inner = inner

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        from labkit.capture import dynamo

        if self.rec is not None:
            self.rec.add("dynamo.graph", dynamo.graph_record(gm))
        return self.inner(gm, example_inputs)

    def __getattr__(self, name: str) -> Any:
        # torch asks backends for optional attributes (get_compiler_config, reset): answer as inner.
        if name in ("rec", "inner") or name.startswith("__"):
            raise AttributeError(name)  # not set up yet (copy/pickle): no recursion through inner
        return getattr(self.inner, name)


class Recorder:
    """Installs every capture channel for the duration of a ``with`` block; collects Events."""

    def __init__(
        self, progress: Callable[[str], None] | None = None, inductor: bool = True
    ) -> None:
        self.events: list[Event] = []
        self.progress = progress
        self.inductor = inductor
        self.stage: str | None = None  # the last stage torch worked on
        self.compiling = False  # True from a frame's first event until it finished without error
        self.compile_id: str | None = None
        self._stack = contextlib.ExitStack()

    # -- collecting -----------------------------------------------------------------------------
    def add(
        self,
        kind: str,
        payload: Any,
        meta: dict[str, Any] | None = None,
        compile_id: str | None = None,
    ) -> None:
        """Append an event (labelled with the current compile id unless given) and track the stage."""
        if kind == _torch.CHROMIUM_EVENT:  # timing only: it names no frame and moves no stage
            self.events.append(Event(len(self.events), compile_id, kind, payload, dict(meta or {})))
            return
        cid = compile_id or _torch.current_compile_id() or self.compile_id
        self.events.append(Event(len(self.events), cid, kind, payload, dict(meta or {})))
        self.compile_id = cid
        if kind in ("compilation_metrics", "bwd_compilation_metrics"):
            # The frame (or its backward) is done; a failed one keeps `stage` = where it failed.
            self.compiling = bool((meta or {}).get("fail_type"))
        elif kind in EVENT_STAGE:
            self.compiling = True
            if EVENT_STAGE[kind] != self.stage:
                self.stage = EVENT_STAGE[kind]
                self.say(self.stage)

    def say(self, what: str) -> None:
        """Tell the progress callback what is being worked on."""
        if self.progress is not None:
            self.progress(what)

    def _bytecode_hook(self, old: Any, new: Any) -> None:
        self.add(
            "bytecode", (old, new)
        )  # code objects stay live; decompiled later, off the compile path

    # -- install / restore ----------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        stack = self._stack
        try:
            stack.enter_context(routed([logging.getLogger(_torch.TRACE_LOGGER)], _TraceHandler(self),
                                       propagate=None))
            if self.inductor:  # keep IR dumps off stderr
                stack.enter_context(routed(_torch.artifact_loggers(LOG_ARTIFACTS), _LogHandler(self)))
            handle = _torch.register_bytecode_hook(self._bytecode_hook)
            stack.callback(handle.remove)
            post_pass = self._post_grad_pass() if self.inductor else None
            stack.enter_context(_torch.fresh_compile_config(post_pass))
            # force_disable_caches is what we want; torch's warning about it would only confuse.
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=".*force_disable_caches")
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def _post_grad_pass(self) -> Any:
        """A post-grad pass that copies Inductor's input graph out as FxNodes (chains any user pass)."""
        from labkit.capture import dynamo

        user_pass = _torch.post_grad_custom_post_pass()
        rec = self

        class _SeeInductorInput(_torch.custom_graph_pass_base()):  # type: ignore[misc]
            def __call__(self, graph: Any) -> None:
                if user_pass is not None:
                    user_pass(graph)
                # Inductor's kernel -> node map is process-global and, for backward graphs, not
                # reset: remember how long each entry is now, so only this graph's part is read.
                before = {k: len(v) for k, v in (_torch.kernel_post_grad_nodes() or {}).items()}
                rec.add("inductor.pass", dynamo.fx_nodes(graph), {"provenance_before": before})

            def uuid(self) -> Any:
                return None  # caches are off during capture; nothing to key

        return _SeeInductorInput()

    # -- reading --------------------------------------------------------------------------------
    def of_kind(self, *kinds: str) -> list[Event]:
        """Events of these kinds, in arrival order."""
        return [e for e in self.events if e.kind in kinds]

    def compile_ids(self) -> list[str]:
        """Compile ids in first-seen order."""
        return list(dict.fromkeys(e.compile_id for e in self.events
                                  if e.compile_id and e.kind != _torch.CHROMIUM_EVENT))

    def frame_labels(self) -> dict[str, str]:
        """compile id -> "0/0 toy_example": the frame label every stage carries."""
        names: dict[str, str] = {}
        for e in self.events:
            if not e.compile_id or e.compile_id in names:
                continue
            if e.kind == "bytecode":
                names[e.compile_id] = e.payload[0].co_name
            elif e.kind == "dynamo_start" and e.meta.get("stack"):
                names[e.compile_id] = e.meta["stack"][-1].get("name", "")
        return {cid: f"{cid} {names.get(cid, '?')}".strip() for cid in self.compile_ids()}


def build(trace: Any, rec: Recorder, backend: str, on_gpu: bool) -> None:
    """Turn the recorded events into Stages, kernels and graph breaks, in pipeline order."""
    from labkit.capture import aot, bytecode, compile_time, compiles, dynamo, inductor, triton

    labels = rec.frame_labels()
    compile_time.build(trace, [e.payload for e in rec.of_kind(_torch.CHROMIUM_EVENT)])
    bytecode.build(trace, rec, labels)
    dynamo.build(trace, rec, labels)
    compiles.build(trace, rec.events, labels, _torch.interned_files())
    if backend != "labkit":  # the labkit backend records its own aot.* stages
        aot.build(trace, rec, labels, backend)
    else:  # it labels frames "graph <n>" in call order: use the same labels as every other stage
        names = {
            f"graph {i}": labels.get(ev.compile_id or "", "")
            for i, ev in enumerate(rec.of_kind("dynamo.graph"))
        }
        for item in [*trace.stages, *trace.kernels]:  # (its aot.* stages carry their nodes)
            item.frame = names.get(item.frame) or item.frame
    if backend == "inductor":
        inductor.build(trace, rec, labels)
        triton.build(trace, on_gpu, rec.say)


def from_torch_trace(path: Any, rank: int | None = None, *, triton_ir: bool = False) -> Any:
    """A Trace of any job's TORCH_TRACE log (a directory, or one rank's .log): the reader's home."""
    from labkit.capture.torch_trace import read  # it builds on this module: import it on first use

    return read(path, rank, triton_ir=triton_ir)


def from_torch_trace_ranks(path: Any) -> dict[int, Any]:
    """Every rank's Trace of a distributed job's TORCH_TRACE directory, with divergence warnings."""
    from labkit.capture.torch_trace import read_ranks

    return read_ranks(path)


__all__ = ["PROGRESS_STEPS", "Event", "Recorder", "RecordingBackend", "build", "from_torch_trace",
           "from_torch_trace_ranks"]

"""The Trace: the one data model that capture, the teaching compiler and the views share.

Note on invariants: a Trace is plain data. Every field is a str, int, float, bool, None, list or
dict of those, or one of the dataclasses below, so ``Trace.from_json(trace.to_json())`` gives back
an equal Trace on any machine, with or without torch, triton or a GPU. Live objects (GraphModules,
compiled kernels) never enter a Trace; what a view needs from them (FX nodes, kernel origins) is
copied out as data when the stage is recorded. A stage that could not be captured is still present,
with ``status`` "unavailable" or "error" and the reason in ``text``: views show why, never nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1

# The pipeline steps in order: the widget's top-level tabs and the progress bar's positions.
# "Kernels" and "Timing" show trace.kernels and trace.timings rather than stages.
PIPELINE_STEPS: tuple[str, ...] = (
    "Dynamo", "AOTAutograd", "Inductor", "Kernels", "Triton IR", "labkit", "Timing",
)


@dataclass(frozen=True)
class StageKind:
    """One kind of stage: its pipeline step, tab label, text language, and the events that start it."""

    kind: str  # "dynamo.graph": "<step prefix>.<what>"
    step: str  # one of PIPELINE_STEPS
    label: str  # its tab title within the step
    language: str  # of its text, so views pick a highlighter without guessing
    # capture events (torch's trace records and log artifacts) that mean torch now works on it
    events: tuple[str, ...] = ()


# Every stage kind, in pipeline order (DESIGN.md, "Stage kinds"): the one table the trace, capture
# and the views derive their own from.
STAGE_REGISTRY: tuple[StageKind, ...] = (
    StageKind("bytecode.original", "Dynamo", "original bytecode", "pycon"),
    StageKind("bytecode.transformed", "Dynamo", "transformed bytecode", "pycon", ("bytecode",)),
    StageKind("dynamo.guards", "Dynamo", "guards", "text", ("dynamo_cpp_guards_str",)),
    StageKind("dynamo.graph", "Dynamo", "FX graph", "python", ("dynamo_start",)),
    StageKind("aot.joint", "AOTAutograd", "joint graph", "python", ("aot_joint_graph",)),
    StageKind("aot.forward", "AOTAutograd", "forward", "python", ("aot_forward_graph",)),
    StageKind("aot.backward", "AOTAutograd", "backward", "python", ("aot_backward_graph",)),
    StageKind("aot.inference", "AOTAutograd", "inference", "python", ("aot_inference_graph",)),
    StageKind("inductor.input", "Inductor", "input graph", "python",
              ("inductor.pass", "inductor_post_grad_graph")),
    StageKind("inductor.ir_pre_fusion", "Inductor", "IR before fusion", "text", ("ir_pre_fusion",)),
    StageKind("inductor.ir_post_fusion", "Inductor", "IR after fusion", "text", ("ir_post_fusion",)),
    StageKind("inductor.fusion", "Inductor", "fusion decisions", "text", ("fusion",)),
    StageKind("inductor.output_code", "Inductor", "output code", "python",
              ("inductor_output_code",)),
    StageKind("triton.ttir", "Triton IR", "TTIR", "mlir"),
    StageKind("triton.ttgir", "Triton IR", "TTGIR", "mlir"),
    StageKind("triton.llir", "Triton IR", "LLIR", "llvm"),
    StageKind("triton.ptx", "Triton IR", "PTX", "ptx"),
    StageKind("labkit.loop_ir", "labkit", "loop IR", "python"),
    StageKind("labkit.schedule", "labkit", "schedule", "text"),
    StageKind("labkit.cpp", "labkit", "C++", "cpp"),
    StageKind("labkit.triton", "labkit", "Triton", "python"),
)
STAGE_KIND: dict[str, StageKind] = {k.kind: k for k in STAGE_REGISTRY}
STAGE_KINDS: tuple[str, ...] = tuple(STAGE_KIND)
STAGE_LANGUAGE: dict[str, str] = {k.kind: k.language for k in STAGE_REGISTRY}


def kinds_of(step: str) -> tuple[str, ...]:
    """The stage kinds one pipeline step shows, in pipeline order (none for Kernels and Timing)."""
    if step not in PIPELINE_STEPS:
        raise KeyError(f"unknown pipeline step {step!r}; known steps: {', '.join(PIPELINE_STEPS)}")
    return tuple(k.kind for k in STAGE_REGISTRY if k.step == step)


# Readers of other tools' logs, keyed by format. The package that owns one registers it
# (labkit/__init__.py: "torch_trace" -> labkit.capture.from_torch_trace), so that this ground floor
# imports nothing of labkit and Trace.from_torch_trace still works.
READERS: dict[str, Callable[..., Trace]] = {}

STATUSES = ("ok", "unavailable", "error")
# Where compile time goes: every CompileSpan belongs to one phase (capture/compile_time.py decides
# which from torch's event names), in the order a compile passes through them.
COMPILE_PHASES: tuple[str, ...] = (
    "Dynamo tracing", "guards", "AOTAutograd", "Inductor passes + lowering", "codegen",
    "C++/Triton compile", "cache", "other",
)
TIMING_KINDS = ("run", "compile", "copy")


@dataclass
class FxNode:
    """One node of an FX graph, copied out as data: enough to draw it and trace provenance."""

    name: str
    op: str  # placeholder | call_function | call_method | call_module | get_attr | output
    target: str
    inputs: list[str] = field(default_factory=list)
    shape: list[Any] | None = None  # ints, or strings for symbolic sizes ("s0")
    dtype: str | None = None
    source: str | None = None  # "file.py:12  code line" of the user code that made it
    module: str = ""  # the nn.Module it ran in, as a dotted path ("model.h.0.attn"); "" at top
    module_type: str = ""  # that module's class name ("GPT2Attention")


@dataclass
class Stage:
    """One recorded IR or report of one pipeline step, for one frame/graph."""

    kind: str
    title: str
    text: str
    frame: str = ""  # e.g. "0/0 toy_example" or "1/0 torch_dynamo_resume_in_toy_example_at_5"
    status: str = "ok"  # ok | unavailable | error (then text says why)
    meta: dict[str, Any] = field(default_factory=dict)
    nodes: list[FxNode] = field(default_factory=list)  # FX graph stages only

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Stage.status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        """True when the stage holds real captured text."""
        return self.status == "ok"

    @property
    def language(self) -> str:
        """The highlighter language of this stage's text."""
        return str(self.meta.get("language") or STAGE_LANGUAGE.get(self.kind, "text"))


@dataclass
class Kernel:
    """A generated kernel: its language, source, and the ATen/FX nodes it computes."""

    name: str
    language: str  # "cpp" | "triton"
    source: str
    origins: list[str] = field(default_factory=list)  # names of the graph nodes fused into it
    frame: str = ""
    producer: str = "inductor"  # "inductor" | "labkit" | "user"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphBreak:
    """Where and why Dynamo stopped a graph: reason plus the user's file, line and code."""

    reason: str
    filename: str
    lineno: int
    code: str
    frame: str = ""
    detail: str = ""  # the long log text (explanation, hints), when torch gives it


@dataclass
class Timing:
    """A measured duration of one kind: median and spread (IQR) in seconds, on one device."""

    label: str
    median_s: float
    spread_s: float
    device: str
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. {"bytes": ..., "threads": 1}
    # "run": calls of a function; "compile": compile time (meta["stage"] says of what);
    # "copy": the machine's memory copy bandwidth, to compare runs with
    kind: str = "run"

    def __post_init__(self) -> None:
        if self.kind not in TIMING_KINDS:
            raise ValueError(f"Timing.kind must be one of {TIMING_KINDS}, got {self.kind!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timing:
        """A Timing from ``to_dict`` output, also one saved before Timing had a kind."""
        if "kind" not in d:  # the names labkit gave such timings then: "compile: aot", "copy"
            meta, label = d.get("meta") or {}, str(d.get("label", ""))
            old = meta.get("kind") or ("compile" if label.startswith(("compile:", "compile +"))
                                       else "copy" if label == "copy" else "run")
            d = {**d, "kind": old}
        return cls(**d)

# compilation_metrics' time fields, and the span whose durations add up to each (per compile id):
# dynamo_timed's phase names in torch/_dynamo/convert_frame.py, output_graph.py, _inductor/
# compile_fx.py and graph.py (2.11 to 2.15).
COMPILE_METRIC_SPANS = {
    "entire_frame_compile_time_s": "entire_frame_compile",
    "backend_compile_time_s": "backend_compile",
    "inductor_compile_time_s": "inductor_compile",
    "code_gen_time_s": "code_gen",
}


@dataclass
class CompileSpan:
    """One timed step of a compile (a torch chromium event): start, duration, nesting and phase."""

    name: str  # torch's event name: "bytecode_tracing", "GraphLowering.run", "fx_graph_cache_hit"
    phase: str  # one of COMPILE_PHASES
    compile_id: str  # "0/0"; "" when torch gave none
    start_s: float  # since the trace's first compile event
    duration_s: float  # 0 for an instant event (a cache hit or miss, a decision)
    depth: int = 0  # 0: outermost; n: inside n other spans
    self_s: float = 0.0  # duration minus that of the spans directly inside it
    backward: bool = False  # part of a backward graph's compile (AOTAutograd compiles it lazily)
    meta: dict[str, Any] = field(default_factory=dict)  # the event's small args (cache_state, ...)

    def __post_init__(self) -> None:
        if self.phase not in COMPILE_PHASES:
            raise ValueError(f"CompileSpan.phase must be one of {COMPILE_PHASES}, got {self.phase!r}")


def fmt_seconds(s: float) -> str:
    """0.00123 -> '1.23 ms' (three significant digits, unit chosen to fit)."""
    unit, scale = time_unit(s)
    return f"{s / scale:.3g} {unit}"


def time_unit(s: float) -> tuple[str, float]:
    """The unit a duration reads best in, and its size in seconds."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return unit, scale
    return "ns", 1e-9


@dataclass
class Trace:
    """Everything recorded about compiling one function: stages in pipeline order plus findings."""

    fn_name: str
    backend: str
    stages: list[Stage] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    compile_spans: list[CompileSpan] = field(default_factory=list)  # where compile time went
    env: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set when fn raised during the compile: the partial trace stays usable
    meta: dict[str, Any] = field(default_factory=dict)

    # -- queries --------------------------------------------------------------------------------
    def stage(self, kind: str) -> list[Stage]:
        """All stages of one kind, in recording order."""
        if kind not in STAGE_KINDS:
            raise KeyError(f"unknown stage kind {kind!r}; known kinds: {', '.join(STAGE_KINDS)}")
        return [s for s in self.stages if s.kind == kind]

    def frames(self) -> list[str]:
        """The distinct frame labels, in first-seen order."""
        seen: dict[str, None] = {}
        for s in self.stages:
            if s.frame:
                seen.setdefault(s.frame, None)
        return list(seen)

    def add(self, kind: str, title: str, text: str, **kw: Any) -> Stage:
        """Append a stage (kind must be a known stage kind) and return it."""
        if kind not in STAGE_KINDS:
            raise KeyError(f"unknown stage kind {kind!r}; known kinds: {', '.join(STAGE_KINDS)}")
        st = Stage(kind=kind, title=title, text=text, **kw)
        self.stages.append(st)
        return st

    def missing(self, kind: str, title: str, reason: str, **kw: Any) -> Stage:
        """Record that a stage could not be captured, and why."""
        return self.add(kind, title, reason, status="unavailable", **kw)

    def compile_time(self, compile_id: str | None = None) -> dict[str, float]:
        """Seconds per compile phase (self time, so they add up to the whole compile), all phases."""
        out = dict.fromkeys(COMPILE_PHASES, 0.0)
        for sp in self.compile_spans:
            if compile_id is None or sp.compile_id == compile_id:
                out[sp.phase] += sp.self_s
        return out

    def ordered_stages(self) -> Iterator[Stage]:
        """Stages sorted by pipeline order (stable within a kind)."""
        rank = {k: i for i, k in enumerate(STAGE_KINDS)}
        yield from sorted(self.stages, key=lambda s: rank[s.kind])

    # -- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lossless)."""
        d = dataclasses.asdict(self)
        d["format_version"] = FORMAT_VERSION
        return d

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """Serialise to JSON text; also write it to ``path`` when given (never over a directory)."""
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True, ensure_ascii=False)
        if path is not None:
            p = Path(path)
            if p.is_dir():
                raise IsADirectoryError(f"{p} is a directory; give a file path such as {p}/trace.json")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trace:
        """Rebuild a Trace from ``to_dict`` output."""
        d = dict(d)
        version = d.pop("format_version", FORMAT_VERSION)
        if version > FORMAT_VERSION:
            raise ValueError(
                f"trace format {version} is newer than this labkit understands ({FORMAT_VERSION}); "
                "upgrade labkit to read it"
            )
        stages = [
            Stage(**{**s, "nodes": [FxNode(**n) for n in s.get("nodes", [])]})
            for s in d.pop("stages", [])
        ]
        return cls(
            stages=stages,
            graph_breaks=[GraphBreak(**g) for g in d.pop("graph_breaks", [])],
            kernels=[Kernel(**k) for k in d.pop("kernels", [])],
            timings=[Timing.from_dict(t) for t in d.pop("timings", [])],
            compile_spans=[CompileSpan(**c) for c in d.pop("compile_spans", [])],
            **d,
        )

    @classmethod
    def from_json(cls, source: str | os.PathLike[str]) -> Trace:
        """Load a Trace from a JSON file path (or from JSON text starting with '{')."""
        if isinstance(source, str) and source.lstrip().startswith("{"):
            return cls.from_dict(json.loads(source))
        p = Path(source)
        if not p.exists():
            raise FileNotFoundError(f"no trace file at {p}; recordings live in figures/recordings/")
        return cls.from_dict(json.loads(p.read_text(encoding="utf-8")))

    @classmethod
    def from_torch_trace(
        cls, path: str | os.PathLike[str], rank: int | None = None, *, triton_ir: bool = False
    ) -> Trace:
        """A Trace of any job's TORCH_TRACE log: the same as ``labkit.capture.from_torch_trace``."""
        reader = READERS.get("torch_trace")
        if reader is None:  # only when labkit.trace was loaded without its package
            raise RuntimeError("no TORCH_TRACE reader registered: import labkit first")
        return reader(path, rank, triton_ir=triton_ir)

    def summary(self) -> str:
        """A short, deterministic text summary (counts only, no addresses or timings)."""
        ok = sum(s.ok for s in self.stages)
        lines = [
            f"Trace of {self.fn_name} (backend={self.backend}, made on {self.env.get('device', '?')}, "
            f"torch {self.env.get('torch', '?')})",
            f"  stages: {ok} captured, {len(self.stages) - ok} unavailable",
            f"  frames: {len(self.frames())}, graph breaks: {len(self.graph_breaks)}, "
            f"kernels: {len(self.kernels)}",
        ]
        if self.error:
            lines.append(f"  error: {self.error.splitlines()[0] if self.error else ''}")
        return "\n".join(lines)


def environment() -> dict[str, Any]:
    """Versions and device of this machine, stamped into every Trace."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": sys.platform,
        "machine": platform.machine(),
        "date": _dt.date.today().isoformat(),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["device"] = torch.cuda.get_device_name(0)
            env["cuda"] = torch.version.cuda
        else:
            env["device"] = f"cpu ({platform.processor() or platform.machine()})"
    except ImportError:
        env["torch"] = None
        env["device"] = "cpu"
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    return env

"""Read any torch.compile job's TORCH_TRACE log (the structured log tlparse reads) into a Trace.

Note on the format (torch/_logging/_internal.py ``trace_structured`` and ``TorchLogsFormatter``,
checked against tlparse 0.4.3's parser): every record is one glog-style line,
``V1123 19:02:54.506000 8855 torch/_dynamo/convert_frame.py:303] {json}``, whose JSON holds one key
naming the record (``dynamo_output_graph``, ``artifact`` with a ``name``, ...) plus context:
``frame_id``/``frame_compile_id``/``attempt`` (the compile id "0/1"), ``rank`` in a distributed
job, and ``has_payload`` (an md5) when a payload follows on the next lines, each prefixed by a tab.
``{"str": [text, n]}`` records intern file names: stacks say ``"filename": n``. TORCH_TRACE
writes one file per process (``dedicated_log_torch_trace_rank_<r>_<random>.log`` per rank); a ``.log.gz`` is read as well.

The log holds fewer stages than ``labkit.explore`` records (no IR before or after fusion, no
fusion decisions, no Triton IR, bytecode of resume functions only): each of those is still a stage,
``unavailable``, with the reason and what to run to see it. The stage builders are the ones
``explore`` uses, fed with events read from the file instead of a live compile.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.capture import (
    TRACE_ARTIFACTS,
    TRACE_KINDS,
    Event,
    Recorder,
    aot,
    compile_time,
    compiles,
    dynamo,
    inductor,
    triton,
)
from labkit.trace import Timing, Trace

LOG_PREFIX = "dedicated_log_torch_trace_"
_GLOG = re.compile(
    r"^(?:\[rank\d+\]:)?[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (?P<path>.*?):(?P<line>\d+)\]"
    r"(?: \[[^\]]*\])* (?P<json>\{.*)$"
)
_RANK_IN_NAME = re.compile(r"rank_(\d+)_")
_BYTECODE = re.compile(r"^(?P<fn>.+)_(?P<which>ORIGINAL|MODIFIED)_BYTECODE$")
# Records whose payload we keep: the ones explore's live capture keeps (compile-time chromium_event
# records among them), plus the log's version record (everything else is skipped).
KEEP_KINDS = TRACE_KINDS
KEEP_ARTIFACTS = TRACE_ARTIFACTS | {"torch_version"}
# compilation_metrics fields worth keeping per compile (the record has ~60, dynamo_config among them).
METRIC_FIELDS = (
    "co_name",
    "co_filename",
    "co_firstlineno",
    "cache_size",
    "guard_count",
    "shape_env_guard_count",
    "graph_op_count",
    "graph_node_count",
    "graph_input_count",
    "entire_frame_compile_time_s",
    "backend_compile_time_s",
    "inductor_compile_time_s",
    "code_gen_time_s",
    "fail_type",
    "fail_reason",
    "fail_user_frame_filename",
    "fail_user_frame_lineno",
)
LACKS = {
    "bytecode": (
        "a TORCH_TRACE log holds the bytecode of Dynamo's resume functions only (artifacts "
        "<name>_ORIGINAL_BYTECODE / _MODIFIED_BYTECODE); run the job with TORCH_LOGS=bytecode, "
        "or under labkit.explore, to see every frame's"
    ),
    "ir": (
        "a TORCH_TRACE log does not hold Inductor's IR: torch writes it only to the TORCH_LOGS "
        "artifacts ir_pre_fusion / ir_post_fusion (or run the function under labkit.explore)"
    ),
    "fusion": (
        "a TORCH_TRACE log does not hold Inductor's fusion decisions: torch writes them only to "
        "the TORCH_LOGS artifact fusion (or run the function under labkit.explore). What fused "
        "is still visible in the kernels, each named after the ops it computes"
    ),
    "triton": (
        "a TORCH_TRACE log holds each Triton kernel's source (see Kernels) but not its IR; "
        "Trace.from_torch_trace(path, triton_ir=True) compiles them here for a GPU target"
    ),
}


@dataclass
class Record:
    """One structured-log record: its JSON metadata and its payload (None when it has none)."""

    lineno: int
    metadata: dict[str, Any]
    payload: str | None = None
    payload_ok: bool = True  # False when the payload's md5 does not match has_payload (cut log)

    @property
    def kind(self) -> str:
        """The record's name: its one non-context key, or the artifact name for artifacts."""
        for key, value in self.metadata.items():
            if key == "artifact" and isinstance(value, dict):
                return str(value.get("name", "artifact"))
            if key not in _CONTEXT:
                return key
        return "?"


_CONTEXT = frozenset(
    {"rank", "compiled_autograd_id", "frame_id", "frame_compile_id", "attempt", "has_payload",
     "stack", "subgraph_name"}
)


@dataclass
class LogStats:
    """What reading the file met: records, lines that were no record, payloads that failed md5."""

    records: int = 0
    bad_lines: int = 0
    bad_payloads: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


# -- finding the log --------------------------------------------------------------------------------
def _rank_of(p: Path) -> int | None:
    m = _RANK_IN_NAME.search(p.name)
    return int(m.group(1)) if m else None


def find_log(path: str | Path, rank: int | None = None) -> tuple[Path, int | None]:
    """The one log file to read (a file, or the file of ``rank`` in a TORCH_TRACE directory)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"no TORCH_TRACE log at {p}: give the directory TORCH_TRACE pointed to, or one of "
            f"its {LOG_PREFIX}*.log files"
        )
    if p.is_file():
        file_rank = _rank_of(p)
        if rank is not None and file_rank is not None and file_rank != rank:
            raise ValueError(f"{p.name} is the log of rank {file_rank}, not of rank {rank}")
        return p, file_rank if file_rank is not None else rank
    logs = sorted([*p.glob(f"{LOG_PREFIX}*.log"), *p.glob(f"{LOG_PREFIX}*.log.gz")]) or sorted(
        [*p.glob("*.log"), *p.glob("*.log.gz")]
    )
    if not logs:
        raise FileNotFoundError(
            f"{p} holds no {LOG_PREFIX}*.log file: was TORCH_TRACE={p} set when the job ran, and "
            "did it compile anything?"
        )
    by_rank: dict[int | None, list[Path]] = {}
    for log in logs:
        by_rank.setdefault(_rank_of(log), []).append(log)
    ranks = sorted(r for r in by_rank if r is not None)
    if rank is not None:
        if rank not in by_rank:
            have = ", ".join(map(str, ranks)) or "none (a single-process job)"
            raise ValueError(f"{p} has no log of rank {rank}; ranks found: {have}")
        chosen = by_rank[rank]
    elif len(by_rank) > 1:
        raise ValueError(
            f"{p} holds the logs of ranks {', '.join(map(str, ranks))}"
            f"{' (and of a process with no rank)' if None in by_rank else ''}: pick one with "
            f"rank=N, e.g. Trace.from_torch_trace({str(p)!r}, rank={ranks[0]})"
        )
    else:
        chosen = next(iter(by_rank.values()))
    if len(chosen) > 1:
        names = ", ".join(c.name for c in chosen)
        raise ValueError(
            f"{p} holds {len(chosen)} logs of separate processes ({names}): pass the path of one"
        )
    return chosen[0], rank if rank is not None else _rank_of(chosen[0])


# -- reading records --------------------------------------------------------------------------------
def records(path: str | Path, stats: LogStats | None = None, keep: Any = None) -> Iterator[Record]:
    """Every record of one log file, in order; payloads only for kinds ``keep(kind)`` accepts."""
    stats = stats if stats is not None else LogStats()
    current: Record | None = None
    lines: list[str] = []

    def finish() -> Record | None:
        if current is None:
            return None
        if current.payload is not None:  # kept: join and check it against its md5
            text = "\n".join(lines)
            want = current.metadata.get("has_payload")
            current.payload = text
            current.payload_ok = (
                not isinstance(want, str)
                or hashlib.md5(text.encode(), usedforsecurity=False).hexdigest() == want
            )
            stats.bad_payloads += not current.payload_ok
        return current

    opener = gzip.open if str(path).endswith(".gz") else open  # a log kept compressed
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.startswith("\t"):
                if current is not None and current.payload is not None:
                    lines.append(line[1:])
                continue
            done = finish()
            current, lines = None, []
            if done is not None:
                yield done
            if not line.strip():
                continue
            m = _GLOG.match(line)
            try:
                metadata = json.loads(m["json"]) if m else None
            except ValueError:
                metadata = None
            if not isinstance(metadata, dict):
                stats.bad_lines += 1
                continue
            current = Record(lineno, metadata)
            kind = current.kind
            stats.records += 1
            stats.kinds[kind] = stats.kinds.get(kind, 0) + 1
            if "has_payload" in metadata and (keep is None or keep(kind)):
                current.payload = ""
    done = finish()
    if done is not None:
        yield done


def _keep(kind: str) -> bool:
    return kind in KEEP_KINDS or kind in KEEP_ARTIFACTS or _BYTECODE.match(kind) is not None


def compile_id(md: dict[str, Any]) -> str | None:
    """"0/1" (frame 0, its second compile), "!0/1/0" under compiled autograd, or None."""
    fid, fcid, ca = md.get("frame_id"), md.get("frame_compile_id"), md.get("compiled_autograd_id")
    if fid is None and fcid is None and ca is None:
        return None
    cid = f"{'-' if fid is None else fid}/{'-' if fcid is None else fcid}"
    return f"!{ca}/{cid}" if ca is not None else cid


def events(path: str | Path, rank: int | None = None) -> tuple[list[Event], dict[str, Any]]:
    """The log's records as capture Events (what explore's stage builders read), plus facts."""
    stats = LogStats()
    strings: dict[int, str] = {}
    out: list[Event] = []
    facts: dict[str, Any] = {"torch": None, "ranks": set()}
    for rec in records(path, stats, keep=_keep):
        md = rec.metadata
        if "rank" in md:
            facts["ranks"].add(md["rank"])
            if rank is not None and md["rank"] != rank:
                continue
        kind = rec.kind
        if kind == "str":  # {"str": [text, n]}: the interning table
            text, n = md["str"]
            strings[int(n)] = str(text)
            continue
        if not _keep(kind):
            continue
        if kind == "torch_version":
            try:
                facts["torch"] = json.loads(rec.payload or "{}").get("pytorch_version")
            except ValueError:
                pass
            continue
        meta = dict(md.get(kind) or {}) if kind in KEEP_KINDS else {}
        for key in ("stack", "user_stack"):  # interned file names -> text
            if isinstance(meta.get(key), list):
                meta[key] = [
                    {**fr, "filename": strings.get(fr.get("filename"), fr.get("filename"))}
                    for fr in meta[key]
                ]
        meta["attempt"] = md.get("attempt", 0)
        if not rec.payload_ok:
            meta["payload_cut"] = True
        payload: Any = rec.payload
        if kind == "inductor_provenance_tracking_node_mappings":
            payload = rec.payload  # inductor.split_runs parses the JSON itself
        out.append(Event(len(out), compile_id(md), kind, payload, meta))
    facts["stats"] = stats
    return _last_attempts(out), facts


def _last_attempts(evs: list[Event]) -> list[Event]:
    """Drop graphs of a compile's abandoned attempts (Dynamo restarts a frame after some breaks)."""
    last: dict[str | None, int] = {}
    for ev in evs:
        if ev.kind == "dynamo_output_graph":
            last[ev.compile_id] = max(last.get(ev.compile_id, 0), ev.meta.get("attempt", 0))
    return [
        ev
        for ev in evs
        if ev.kind != "dynamo_output_graph" or ev.meta.get("attempt", 0) == last[ev.compile_id]
    ]


# -- Dynamo graphs from their text ------------------------------------------------------------------
_ALIAS = re.compile(r"^\s+(?P<new>\w+) = (?P<old>\w+)\s*$")
_BINOP = re.compile(
    r"^(?P<head>\s+\w+(?:: \"[^\"]*\")? = )(?P<a>[\w.\[\]]+) (?P<op>\*\*|//|[-+*/@%&|^<>]|[<>=!]=) "
    r"(?P<b>[^;]+?)(?P<tail>;.*)?$"
)
_METHOD = re.compile(r"^(?P<head>\s+\w+(?:: \"[^\"]*\")? = )(?P<obj>\w+)\.(?P<meth>\w+)\((?P<args>.*)$")
_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "**": "pow",
        "@": "matmul", "%": "mod", "&": "and_", "|": "or_", "^": "xor", "<": "lt", ">": "gt",
        "<=": "le", ">=": "ge", "==": "eq", "!=": "ne"}


def dynamo_nodes(text: str) -> list[Any]:
    """FxNodes of a printed Dynamo graph (operators and method calls rewritten as calls first)."""
    alias: dict[str, str] = {}
    lines = []
    for line in text.splitlines():
        if (m := _ALIAS.match(line)) is not None:
            alias[m["new"]] = m["old"]  # "l_x_ = L_x_": the input under its local name
            continue
        if (m := _BINOP.match(line)) is not None:
            line = f"{m['head']}operator.{_OPS[m['op']]}({m['a']}, {m['b']}){m['tail'] or ''}"
        elif (m := _METHOD.match(line)) is not None and m["obj"] not in ("torch", "operator"):
            args = m["args"]
            line = f"{m['head']}{m['meth']}({m['obj']}{', ' if not args.startswith(')') else ''}{args}"
        lines.append(line)
    body = "\n".join(lines)
    for new, old in alias.items():
        body = re.sub(rf"\b{re.escape(new)}\b", old, body)
    return aot.nodes_from_text(body)


def _graphs(trace: Trace, rec: Recorder, labels: dict[str, str]) -> None:
    graphs = rec.of_kind("dynamo_output_graph")
    for i, ev in enumerate(graphs):
        label = labels.get(ev.compile_id or "", "")
        text = str(ev.payload or "")
        nodes = dynamo_nodes(text)
        ops = [n.target for n in nodes if n.op == "call_function"]
        meta = {
            "graph_index": i,
            "op_count": len(ops),
            "ops": ops,
            "inputs": [n.name for n in nodes if n.op == "placeholder"],
            "sizes": ev.meta.get("sizes"),
        }
        trace.add("dynamo.graph", f"FX graph {i} ({label})", text, frame=label, meta=meta,
                  nodes=nodes)
    if not graphs:
        trace.missing("dynamo.graph", "FX graph", "the log holds no dynamo_output_graph record: "
                      "no frame reached a backend (see graph breaks and compile metrics)")


def _graph_breaks(trace: Trace, rec: Recorder, labels: dict[str, str]) -> None:
    seen: set[tuple[str, int, str]] = set()
    for ev in rec.of_kind("dynamo_graph_break_reason"):
        text = str(ev.payload or "")
        gb = dynamo.parse_graph_break(text, labels.get(ev.compile_id or "", ""))
        # The line as it was when the job ran (the log's traceback), not as the file here reads
        # now: the job's files may be elsewhere, or edited since.
        for m in dynamo._FILE_LINE.finditer(text):
            if m["file"] == gb.filename and int(m["line"]) == gb.lineno:
                gb.code = m["code"].strip()
        key = dynamo.break_key(gb)
        if key not in seen:  # the same break is logged again at every recompile and restart
            seen.add(key)
            trace.graph_breaks.append(gb)


def _bytecode(trace: Trace, rec: Recorder, labels: dict[str, str]) -> None:
    found = False
    for ev in rec.events:
        m = _BYTECODE.match(ev.kind)
        if m is None:
            continue
        found = True
        kind = "bytecode.original" if m["which"] == "ORIGINAL" else "bytecode.transformed"
        label = labels.get(ev.compile_id or "", "")
        trace.add(kind, f"{m['which'].lower()} bytecode of {m['fn']} ({label})",
                  str(ev.payload or ""), frame=label, meta={"from": "TORCH_TRACE artifact"})
    for kind in ("bytecode.original", "bytecode.transformed"):
        if not found or not trace.stage(kind):
            trace.missing(kind, kind.replace(".", " "), LACKS["bytecode"])
        elif any(not any(s.frame == lab for s in trace.stage(kind)) for lab in labels.values()):
            trace.missing(kind, f"{kind.split('.')[1]} bytecode of the other frames",
                          LACKS["bytecode"])


# -- compile-time metrics ---------------------------------------------------------------------------
def _metrics(trace: Trace, rec: Recorder, labels: dict[str, str], device: str) -> None:
    rows: list[dict[str, Any]] = []
    for ev in rec.of_kind("compilation_metrics", "bwd_compilation_metrics"):
        m = ev.meta
        label = labels.get(ev.compile_id or "", ev.compile_id or "?")
        row: dict[str, Any] = {"compile_id": ev.compile_id, "frame": label,
                               "backward": ev.kind == "bwd_compilation_metrics"}
        row.update({k: m.get(k) for k in METRIC_FIELDS if m.get(k) is not None})
        restarts = m.get("restart_reasons") or []
        if restarts:
            row["restart_reasons"] = [str(r).strip().splitlines()[0] for r in restarts]
        rows.append(row)
        total, backend = m.get("entire_frame_compile_time_s"), m.get("backend_compile_time_s")
        ind = m.get("inductor_compile_time_s")
        parts: dict[str, float] = {}
        if ev.kind == "bwd_compilation_metrics":
            parts["inductor (backward)"] = ind or 0.0
        elif total is not None:
            parts["dynamo"] = total - (backend or 0.0)
            if ind is not None:
                parts["aot"] = max((backend or 0.0) - ind, 0.0)
                parts["inductor"] = ind
            elif backend:
                parts["backend"] = backend
        for stage, seconds in parts.items():
            trace.timings.append(Timing(
                label=f"compile {label}: {stage}", median_s=float(seconds), spread_s=0.0,
                device=device, meta={"stage": stage, "backend": label, "runs": 1,
                                     "source": "TORCH_TRACE compilation_metrics"},
                kind="compile"))
    trace.meta["compile_metrics"] = rows
    failed = [r for r in rows if r.get("fail_type")]
    if failed:
        trace.meta["compile_failures"] = [
            {"frame": r["frame"], "fail_type": r["fail_type"], "reason": r.get("fail_reason"),
             "file": r.get("fail_user_frame_filename"), "line": r.get("fail_user_frame_lineno")}
            for r in failed
        ]


# -- the whole Trace --------------------------------------------------------------------------------
def _backend(rec: Recorder) -> str:
    if rec.of_kind("inductor_output_code"):
        return "inductor"
    if rec.of_kind("aot_joint_graph", "aot_forward_graph", "aot_inference_graph"):
        return "aot_eager"
    return "eager"


def _device(rec: Recorder) -> str:
    """The device the job's graphs ran on, from their printed tensor types ("f32[4][1]cuda:0")."""
    graphs = "\n".join(str(e.payload) for e in rec.of_kind("dynamo_output_graph", *aot.AOT_KINDS))
    found = re.findall(r'\]\]?(cuda|xpu|mps|cpu)(?::\d+)?"', graphs)
    for device in ("cuda", "xpu", "mps"):
        if device in found:
            return f"{device} (from the log)"
    return "cpu (from the log)"


def read(path: str | Path, rank: int | None = None, *, triton_ir: bool = False) -> Trace:
    """A Trace of everything a TORCH_TRACE log holds (``rank`` picks one rank's log of a job)."""
    log, rank = find_log(path, rank)
    evs, facts = events(log, rank)
    stats: LogStats = facts["stats"]
    if stats.records == 0:
        raise ValueError(
            f"{log} holds no structured-log record (is it a TORCH_TRACE log? TORCH_LOGS output "
            "to stderr is a different format)"
        )
    rec = Recorder()
    rec.events = evs
    labels = rec.frame_labels()
    backend = _backend(rec)
    device = _device(rec)
    first = next(iter(labels.values()), "?")
    trace = Trace(
        fn_name=first.split(" ", 1)[-1] if " " in first else first,
        backend=backend,
        env={"torch": facts["torch"] or "? (the log does not say)", "device": device,
             "source": "TORCH_TRACE", "log": log.name, "rank": rank},
    )
    _bytecode(trace, rec, labels)
    dynamo._guards(trace, rec, labels)
    _graphs(trace, rec, labels)
    _graph_breaks(trace, rec, labels)
    aot.build(trace, rec, labels, backend)
    if backend == "inductor":
        inductor.build(trace, rec, labels)
        for st in trace.stages:
            if st.kind in ("inductor.ir_pre_fusion", "inductor.ir_post_fusion"):
                st.text, st.status = LACKS["ir"], "unavailable"
            elif st.kind == "inductor.fusion":
                kernels = "\n".join(f"  {k}" for k in st.meta.get("kernels", {}))
                st.text = LACKS["fusion"] + (f".\nKernels of this graph:\n{kernels}" if kernels
                                             else ".")
                st.status = "unavailable"
        if triton_ir:
            triton.build(trace, on_gpu=False)
        else:
            for kind, key in triton.IR_STAGES:
                trace.missing(kind, key.upper(), LACKS["triton"])
    else:
        reason = f"the job compiled with a backend other than Inductor ({backend}-like: the " \
                 "log holds no inductor_output_code)"
        for kind in inductor.STAGES:
            trace.missing(kind, kind.split(".", 1)[1].replace("_", " "), reason)
        for kind, key in triton.IR_STAGES:
            trace.missing(kind, key.upper(), reason)
    for k in trace.kernels:
        if not k.origins:
            k.meta["origin_source"] = "not in the log (read the ops from the kernel's name)"
    _metrics(trace, rec, labels, device)
    compile_time.build(trace, [e.payload for e in rec.of_kind("chromium_event")])
    trace.meta.update(
        source="TORCH_TRACE",
        log=str(log),
        rank=rank,
        ranks_in_log=sorted(facts["ranks"]),
        frames=list(labels.values()),
        log_stats={"records": stats.records, "bad_lines": stats.bad_lines,
                   "bad_payloads": stats.bad_payloads},
    )
    trace.meta.setdefault("recompiles", [])
    compiles.build(trace, rec.events, labels)
    return trace


from_torch_trace = read  # labkit.from_torch_trace(path) == labkit.Trace.from_torch_trace(path)


def read_ranks(path: str | Path) -> dict[int, Trace]:
    """Every rank's Trace of a job's TORCH_TRACE directory, each told where the ranks diverge."""
    logs = [*Path(path).glob(f"{LOG_PREFIX}*.log"), *Path(path).glob(f"{LOG_PREFIX}*.log.gz")]
    ranks = sorted({r for r in map(_rank_of, logs) if r is not None})
    if not ranks:
        return {0: read(path)}  # a single-process job: one "rank"
    by_rank = {r: read(path, r) for r in ranks}
    warnings = compiles.divergence(by_rank)
    for t in by_rank.values():
        t.meta["rank_divergence"] = warnings
    return by_rank

__all__ = ["LOG_PREFIX", "Record", "compile_id", "events", "find_log", "from_torch_trace", "read",
           "read_ranks", "records"]

"""Every compile id as tlparse's report shows it: outcome, stack, restarts, failures, recompiles.

Note: tlparse (0.4.3) reads the same structured records labkit keeps, and this module reads them
the way it does, so that a live ``explore`` and ``Trace.from_torch_trace`` of any job's log give the
same table. One row per compile id ("0/1": frame 0, its second compile), with its outcome coloured
as tlparse colours it: ``error`` (compilation_metrics has a fail_type), ``restart`` (Dynamo traced
the frame again, e.g. after a graph break), ``empty`` (no graph reached the backend: Dynamo looked
at the frame and skipped it), ``ok``, or ``missing`` (no compilation_metrics record). Graph breaks
are counted as tlparse counts them, one per ``dynamo_graph_break_reason`` record (so a break met
again in a nested frame, or after a recompile, counts again); ``trace.graph_breaks`` keeps one per
place and reason, and ``trace.meta["break_records"]`` says how many records that folded.
Symbolic-shape specializations and the shape guards Dynamo added keep the user and framework
stack that caused each (tlparse's "symbolic shape specializations" and guard provenance).
Everything lands in ``trace.meta`` as plain data; the views never see an Event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labkit.capture.dynamo import _reasons  # the recompile_reasons payload as a list

# Shape records (symbolic_shapes.py) tlparse tabulates; explore's Recorder and the log reader keep them.
SHAPE_KINDS = ("symbolic_shape_specialization", "guard_added", "guard_added_fast", "create_symbol")
STATUSES = ("ok", "restart", "empty", "error", "missing")
ONLY_FIRST_GUARD = ("Dynamo reports only the first guard that failed; others may fail too (run with "
                    "TORCH_LOGS=recompiles_verbose to see them all)")
_KEEP_FRAMES = 12  # of a stack: the innermost ones (a model's stack can hold hundreds)


def _frames(stack: Any, files: dict[int, str]) -> list[dict[str, Any]]:
    """A structured-log stack as [{file, line, name, code}], interned file names resolved."""
    out = []
    for fr in (stack or [])[-_KEEP_FRAMES:]:
        if not isinstance(fr, dict):
            continue
        name = fr.get("filename")
        out.append({"file": files.get(name, str(name)) if isinstance(name, int) else str(name),
                    "line": fr.get("line"), "name": fr.get("name", ""), "code": fr.get("loc") or ""})
    return out


def _is_framework(path: str) -> bool:
    """True for torch's files, Python's and labkit's machinery: the frames a user did not write."""
    from labkit.capture.dynamo import is_user_file

    p = path.replace("\\", "/")
    return ("/torch/" in p or "/site-packages/torch" in p or p.startswith("<frozen")
            or not is_user_file(path))


def user_line(stack: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost call in a compile's stack that is not torch's own: the user's line that ran it.

    A dynamo_start stack ends with the compiled frame itself (its first line, no code): the call
    that reached it is the frame before, unless the stack holds nothing else.
    """
    calls = stack[:-1] if len(stack) > 1 and not stack[-1].get("code") else stack
    for fr in reversed(calls):
        if not _is_framework(str(fr.get("file", ""))):
            return fr
    return None


def _status(metrics: dict[str, Any] | None, graphs: int) -> str:
    if metrics is None:
        return "missing"
    if metrics.get("fail_type"):
        return "error"
    if not graphs or not metrics.get("graph_op_count"):  # tlparse: no graph, whatever restarted
        return "empty"
    if metrics.get("restart_reasons"):
        return "restart"
    return "ok"


def _sort_key(cid: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in cid.lstrip("!").split("/"))


def compile_rows(events: Iterable[Any], labels: dict[str, str],
                 files: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """One row per compile id (see the module note), in compile-id order."""
    files = files or {}
    rows: dict[str, dict[str, Any]] = {}

    def row(cid: str) -> dict[str, Any]:
        if cid not in rows:
            rows[cid] = {"compile_id": cid, "frame": labels.get(cid, cid), "status": "missing",
                         "stack": [], "graphs": 0, "backend_graphs": 0, "breaks": 0, "recompile_reasons": [],
                         "restarts": [], "specializations": [], "guards_added": [], "symbols": []}
        return rows[cid]

    metrics: dict[str, dict[str, Any]] = {}
    for ev in events:
        cid = ev.compile_id
        if not cid:
            continue
        r, m = row(cid), ev.meta or {}
        if ev.kind == "dynamo_start":
            r["stack"] = _frames(m.get("stack"), files)
        elif ev.kind == "dynamo_output_graph":
            r["graphs"] += 1
        elif ev.kind == "dynamo.graph":  # explore's backend saw it (a restart's graph is not logged)
            r["backend_graphs"] += 1
        elif ev.kind == "dynamo_graph_break_reason":
            r["breaks"] += 1
        elif ev.kind == "recompile_reasons":
            r["recompile_reasons"] = _reasons(ev.payload)
        elif ev.kind == "compilation_metrics":
            metrics[cid] = m
        elif ev.kind == "symbolic_shape_specialization":
            r["specializations"].append({
                "symbol": m.get("symbol"), "sources": m.get("sources") or [],
                "value": m.get("value"), "reason": m.get("reason"),
                "user_stack": _frames(m.get("user_stack"), files)[-3:],
                "stack": _frames(m.get("stack"), files)[-3:]})
        elif ev.kind in ("guard_added", "guard_added_fast"):
            r["guards_added"].append({
                "expr": m.get("expr"), "user_stack": _frames(m.get("user_stack"), files)[-3:],
                "stack": _frames(m.get("stack"), files)[-3:]})
        elif ev.kind == "create_symbol":
            r["symbols"].append({"symbol": m.get("symbol"), "source": m.get("source"),
                                 "value": m.get("val"), "range": m.get("vr"),
                                 "user_stack": _frames(m.get("user_stack"), files)[-1:]})
    for cid, r in rows.items():
        m = metrics.get(cid)
        r["graphs"] = max(r["graphs"], r.pop("backend_graphs"))
        r["status"] = _status(m, r["graphs"])
        if m is not None:
            r["function"] = m.get("co_name")
            if m.get("co_filename"):
                r["defined_at"] = f"{m['co_filename']}:{m.get('co_firstlineno')}"
            r["graph_ops"] = m.get("graph_op_count")
            r["restarts"] = [str(x).strip() for x in m.get("restart_reasons") or []]
            if m.get("fail_type"):
                r["failure"] = {"type": m.get("fail_type"), "reason": m.get("fail_reason"),
                                "file": m.get("fail_user_frame_filename"),
                                "line": m.get("fail_user_frame_lineno")}
        r["user_line"] = user_line(r["stack"])
        if cid.split("/")[-1] not in ("0", "-") and not r["recompile_reasons"]:
            r["recompile_reasons"] = ["torch did not report why (no recompile_reasons record)"]
    return [rows[c] for c in sorted(rows, key=_sort_key)]


def build(trace: Any, events: Iterable[Any], labels: dict[str, str],
          files: dict[int, str] | None = None) -> None:
    """Put the compile table, the break count as tlparse counts it, and the recompiles in trace.meta."""
    rows = compile_rows(list(events), labels, files)
    trace.meta["compiles"] = rows
    trace.meta["frames"] = [r["frame"] for r in rows]
    trace.meta["break_records"] = sum(r["breaks"] for r in rows)
    recompiles = [
        {"frame": r["frame"], "compile_id": r["compile_id"], "reasons": r["recompile_reasons"],
         "user_line": r["user_line"], "note": ONLY_FIRST_GUARD}
        for r in rows if r["compile_id"].split("/")[-1] not in ("0", "-")
    ]
    if recompiles:
        trace.meta["recompiles"] = recompiles


def divergence(by_rank: dict[int, Any]) -> list[str]:
    """Warnings where ranks compiled differently (compile ids, graphs, ops, breaks), like tlparse's."""
    if len(by_rank) < 2:
        return []
    out = []

    def table(t: Any) -> dict[str, tuple[str, int | None, int]]:
        return {r["compile_id"]: (r["status"], r.get("graph_ops"), r["breaks"])
                for r in t.meta.get("compiles", [])}

    tables = {rank: table(t) for rank, t in sorted(by_rank.items())}
    ids = {rank: set(t) for rank, t in tables.items()}
    base_rank = min(tables)
    for rank, have in ids.items():
        if have != ids[base_rank]:
            only = sorted(have - ids[base_rank], key=_sort_key)
            lack = sorted(ids[base_rank] - have, key=_sort_key)
            out.append(f"rank {rank} compiled a different set of frames than rank {base_rank}"
                       + (f": only rank {rank} has {', '.join(only)}" if only else "")
                       + (f"; it lacks {', '.join(lack)}" if lack else ""))
    for cid in sorted(set.intersection(*ids.values()), key=_sort_key):
        seen = {rank: t[cid] for rank, t in tables.items()}
        if len(set(seen.values())) > 1:
            what = "; ".join(f"rank {r}: {s}, {o} ops, {b} break(s)" for r, (s, o, b) in seen.items())
            out.append(f"compile {cid} differs between ranks ({what})")
    return out

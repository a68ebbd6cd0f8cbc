"""Where compile time goes: torch's own chromium events, paired into nested CompileSpans.

Note on the source (torch/_dynamo/utils.py ``dynamo_timed`` and ``ChromiumEventLogger``, 2.11 to
2.15): every ``with dynamo_timed(name):`` block of the compiler logs a structured-trace record
``chromium_event`` when it starts (``"ph": "B"``) and when it ends (``"ph": "E"``), with ``ts`` in
microseconds and ``args.compile_id``; decisions such as ``fx_graph_cache_hit`` are instant events
(``"ph": "i"``). These are the records tlparse turns into a Perfetto trace, and the same timers fill
``compilation_metrics``: ``entire_frame_compile`` is ``entire_frame_compile_time_s``,
``backend_compile`` is ``backend_compile_time_s``, ``inductor_compile`` is
``inductor_compile_time_s`` and ``code_gen`` is ``code_gen_time_s`` (``metric_totals`` adds them up
per compile, so a test can hold the spans to torch's own numbers). A TORCH_TRACE log and a live
``labkit.explore`` both hand us the records, so both get the same spans.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from labkit.trace import COMPILE_METRIC_SPANS, COMPILE_PHASES, CompileSpan, Trace

# The phase of a span, from torch's event name: the first rule that matches wins; a span no rule
# names is part of its parent's phase (a pass inside Inductor is Inductor time), a top one "other".
PHASE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(pattern))
    for phase, pattern in (
        ("C++/Triton compile", r"^async_compile\.|^PyCodeCache\.load_by_key_path$|^compile_file$"
                               r"|^CppCodeCache|^TritonBundler|^aoti_compile|precompile"),
        ("cache", r"cache_(hit|miss|bypass|disabled)$|^CacheBase\.|_key$|^inductor_codecache"
                  r"|^(Fx|AOTAutograd|Autograd)\w*Cache|^autograd_cache|^aotautograd_cache"),
        ("codegen", r"^code_gen$|^GraphLowering\.(codegen|compile_to_fn|compile_to_module)$"
                    r"|^Scheduler\.|Wrapper\w*\.generate$|^PythonWrapperCodegen"),
        ("Inductor passes + lowering", r"^inductor_compile$|^fx_codegen_and_compile$"
                                       r"|^GraphLowering\.run$|^additional_fake_tensor_prop$"
                                       r"|^_recursive_\w*passes$|^pass\.|^compile_fx\."
                                       r"|^select_algorithm|autotune"),
        ("AOTAutograd", r"^backend_compile$|^create_aot_dispatcher_function$|^aot_"
                        r"|partition$|^entire_backward_compile$"),
        ("guards", r"^build_guards$"),
        ("other", r"^gc$"),
        ("Dynamo tracing", r"^dynamo$|^entire_frame_compile$|^compile_attempt_\d+$"
                           r"|^bytecode_tracing$|^insert_deferred_runtime_asserts$|^pgo\."
                           r"|^automatic_dynamic$"),
    )
)
METRIC_SPANS = COMPILE_METRIC_SPANS
BACKWARD = "entire_backward_compile"  # AOTAutograd's lazy backward compile, at the first .backward()
_ARG_KEEP = ("cache_state", "fn_name", "is_backward", "cache_event_time")


def phase_of(name: str) -> str | None:
    """The compile phase torch's event ``name`` belongs to, or None when its parent's decides."""
    for phase, pattern in PHASE_RULES:
        if pattern.search(name):
            return phase
    return None


def parse(payloads: Iterable[Any]) -> list[dict[str, Any]]:
    """Chromium events from record payloads (JSON text, or dicts already); unreadable ones skipped."""
    out = []
    for p in payloads:
        if isinstance(p, str):
            try:
                p = json.loads(p)
            except ValueError:
                continue
        if isinstance(p, dict) and "name" in p and "ts" in p and p.get("ph") in ("B", "E", "i", "X"):
            out.append(p)
    return out


def _cid(args: dict[str, Any]) -> str:
    cid = str(args.get("compile_id") or "")
    return "" if cid == "None" else cid


def spans(events: list[dict[str, Any]]) -> list[CompileSpan]:
    """Pair begin/end events into nested CompileSpans (start order), with phases and self times."""
    if not events:
        return []
    t0 = min(float(e["ts"]) for e in events)
    out: list[CompileSpan] = []
    # open spans: (index in out, begin ts, time taken by spans directly inside, phase)
    stack: list[tuple[int, float, float, str]] = []

    def close(end_ts: float, args: dict[str, Any]) -> None:
        i, start, inner, _ = stack.pop()
        sp = out[i]
        sp.duration_s = max(end_ts - start, 0.0) / 1e6
        sp.self_s = max(sp.duration_s - inner, 0.0)
        sp.meta.update({k: args[k] for k in _ARG_KEEP if k in args and k not in sp.meta})
        if stack:
            j, s, n, ph = stack[-1]
            stack[-1] = (j, s, n + sp.duration_s, ph)

    for e in events:
        ph, name, ts = e["ph"], str(e["name"]), float(e["ts"])
        args = e.get("args") or {}
        if ph == "E":
            if not any(out[i].name == name for i, *_ in stack):
                continue  # an end without its begin (a log that starts mid-compile)
            while out[stack[-1][0]].name != name:  # torch closes overlapped events the same way
                close(ts, {})
            close(ts, args)
            continue
        parent = out[stack[-1][0]] if stack else None
        phase = phase_of(name) or (parent.phase if parent else "other")
        backward = name == BACKWARD or bool(parent and parent.backward)
        sp = CompileSpan(
            name=name, phase=phase, start_s=(ts - t0) / 1e6,
            # a C++ build in a worker thread has no compile id: it is its parent's
            compile_id=_cid(args) or (parent.compile_id if parent else ""),
            duration_s=0.0, depth=len(stack), backward=backward,
            meta={k: args[k] for k in _ARG_KEEP if k in args},
        )
        out.append(sp)
        if ph == "B":
            stack.append((len(out) - 1, ts, 0.0, phase))
        elif ph == "X":  # a complete event: begin and duration in one
            sp.duration_s = sp.self_s = float(e.get("dur", 0.0)) / 1e6
    while stack:  # a log cut mid-compile: what was open ends at the last event seen
        close(max(float(e["ts"]) for e in events), {})
    return out


def metric_totals(spans_: Iterable[CompileSpan]) -> dict[tuple[str, bool], dict[str, float]]:
    """(compile id, backward) -> compilation_metrics' time fields, added up from the spans."""
    out: dict[tuple[str, bool], dict[str, float]] = {}
    for sp in spans_:
        for field, name in METRIC_SPANS.items():
            if sp.name == name:
                row = out.setdefault((sp.compile_id, sp.backward), {})
                row[field] = row.get(field, 0.0) + sp.duration_s
    return out


def totals_text(trace: Trace) -> str:
    """Seconds per phase and compile id as a fixed-width table (the timeline's text form)."""
    ids = list(dict.fromkeys(sp.compile_id for sp in trace.compile_spans if sp.depth == 0))
    lines = [f"{'phase':<28}" + "".join(f"{cid or '-':>10}" for cid in ids) + f"{'all':>10}"]
    per = {cid: trace.compile_time(cid) for cid in ids}
    every = trace.compile_time()
    for phase in COMPILE_PHASES:
        if every[phase] > 0:
            lines.append(f"{phase:<28}" + "".join(f"{per[c][phase]:>10.3f}" for c in ids)
                         + f"{every[phase]:>10.3f}")
    lines.append(f"{'total (s)':<28}" + "".join(f"{sum(per[c].values()):>10.3f}" for c in ids)
                 + f"{sum(every.values()):>10.3f}")
    return "\n".join(lines)


def build(trace: Trace, payloads: Iterable[Any]) -> None:
    """Fill ``trace.compile_spans`` from the chromium_event payloads of a run or a log."""
    trace.compile_spans = spans(parse(payloads))


__all__ = ["METRIC_SPANS", "PHASE_RULES", "build", "metric_totals", "parse", "phase_of", "spans",
           "totals_text"]

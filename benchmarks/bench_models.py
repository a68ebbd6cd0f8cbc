"""labkit on real models: explore vs plain torch.compile, and the page (`make bench-models`).

For each case of tests/real_models.py (timm and transformers, random init, small configs):
seconds for a plain ``torch.compile`` + first call (+ backward, where the case runs one), seconds
for ``labkit.explore`` (timing off) of the same function, their ratio, and the static page's size
and render time. Each is measured twice: wall time, and CPU time (this process plus the processes
it waited for: the C++ compiler, ``dot``), which is what compares on a machine shared with other
work, where the wall time moves with their load. Fair: one thread (torch's, and Inductor compiles
in this process: a worker pool's CPU time would not be counted); a warm-up compile first (a
process's first Inductor compile pays one-time C++ set-up); both sides from
``torch.compiler.reset()`` with caches disabled and a fresh model; rounds interleaved (plain first
in even rounds, explore first in odd ones); medians. Needs the ``models`` extra.

``--json PATH`` merges the rows into PATH (a case measured again replaces its row);
``--doc PATH`` writes the table of PATH's rows into docs/real-models.md between its markers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real-models.md"
BEGIN, END = "<!-- bench-models: begin (written by bench_models.py --doc) -->", "<!-- bench-models: end -->"
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="labkit-models-"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # before torch: no worker pool

import real_models  # noqa: E402
import torch  # noqa: E402

import labkit  # noqa: E402


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of the children it has waited for."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


class Clock:
    """Wall and CPU seconds of a block: ``with Clock() as c: ...; c.wall, c.cpu``."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, cpu_seconds() - self.cpu


def plain(case: real_models.Case) -> Clock:
    """torch.compile + the case's calls, from a clean, cache-less start ("labkit" as explore has it)."""
    from labkit import backends

    torch.compiler.reset()
    compiler = backends.resolve(case.backend, trace=labkit.Trace("plain", case.backend))
    with torch.compiler.config.patch(force_disable_caches=True), Clock() as clock:
        compiled = torch.compile(case.fn, backend=compiler)
        for inputs in (case.inputs, *case.extra):
            compiled(*inputs)
    return clock


def explored(case: real_models.Case) -> tuple[Clock, labkit.Trace]:
    with torch.compiler.config.patch(force_disable_caches=True), Clock() as clock:
        trace = labkit.explore(case.fn, *case.inputs, backend=case.backend, timing=False,
                               progress=None, extra_inputs=case.extra)
    return clock, trace


def warm_up(names: list[str]) -> None:
    """One small Inductor compile, and each case once in eager mode: the process's one-time C++
    set-up and the models' first-call imports land outside the rows (else on round 1's first side)."""
    torch.compiler.reset()
    torch.compile(lambda x: (x.sin() + 1).sum())(torch.randn(8))
    for name in names:
        case = real_models.CASES[name]()
        for inputs in (case.inputs, *case.extra):
            case.fn(*inputs)


SIDES = ("plain", "explore", "render")


def measure(names: list[str], rounds: int) -> Iterator[list[dict]]:
    """Every case, ``rounds`` interleaved rounds: the rows (medians of the wall and CPU samples of
    each side, the page) after each round, so that a bench stopped early keeps what it measured."""
    samples = {n: {f"{s}_{k}": [] for s in SIDES for k in ("s", "cpu_s")} for n in names}
    pages: dict[str, dict] = {}
    for r in range(rounds):
        for name in names:
            got = samples[name]
            for side in ("plain", "explore") if r % 2 == 0 else ("explore", "plain"):
                case = real_models.CASES[name]()  # a fresh model: a step changes its weights
                if side == "plain":
                    clock = plain(case)
                else:
                    clock, trace = explored(case)
                    with Clock() as shown:
                        page = labkit.show(trace, live=False).html
                    got["render_s"].append(shown.wall)
                    got["render_cpu_s"].append(shown.cpu)
                    pages[name] = {"page_chars": len(page), "error": trace.error,
                                   "breaks": f"{len(trace.graph_breaks)} "
                                             f"({trace.meta.get('break_records', 0)})"}
                got[f"{side}_s"].append(clock.wall)
                got[f"{side}_cpu_s"].append(clock.cpu)
                print(f"round {r + 1}: {name}: {side} {clock.wall:.1f} s wall, {clock.cpu:.1f} s CPU"
                      + (f"; page {len(page)} chars in {shown.wall:.1f} s" if side == "explore"
                         else ""), file=sys.stderr, flush=True)
        rows = []
        for name in names:
            med = {k: round(statistics.median(v), 2) for k, v in samples[name].items()}
            rows.append({"case": name, "backend": real_models.CASES[name]().backend, **med,
                         "ratio": round(med["explore_s"] / med["plain_s"], 3),
                         "cpu_ratio": round(med["explore_cpu_s"] / med["plain_cpu_s"], 3),
                         **pages[name], "rounds": r + 1,
                         "samples": {k: [round(x, 2) for x in v] for k, v in samples[name].items()}})
        yield rows


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    out = ["| case | backend | plain compile s (CPU s) | explore s (CPU s) | ratio wall | "
           "ratio CPU | page KB | render s (CPU s) | breaks shown (records) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['backend']} | {r['plain_s']:.1f} ({r['plain_cpu_s']:.1f}) | "
                   f"{r['explore_s']:.1f} ({r['explore_cpu_s']:.1f}) | {r['ratio']:.2f}x | "
                   f"**{r['cpu_ratio']:.2f}x** | {r['page_chars'] / 1000:.0f} | "
                   f"{r['render_s']:.1f} ({r['render_cpu_s']:.1f}) | {r['breaks']} |"
                   + (f" error: {r['error']}" if r.get("error") else ""))
    return "\n".join(out)


def runs_note(runs: list[dict], backends: dict[str, str]) -> str:
    """One line per bench run: when, what, rounds, and the machine's load."""
    return "\n".join(
        f"- {r['date']}: {len(r['cases'])} case(s)"
        + (f" ({', '.join(r['cases'])})" if len(r["cases"]) <= 5 else " (the aot_eager ones)"
           if all(backends.get(c) == "aot_eager" for c in r["cases"]) else "")
        + f", {r['rounds']} interleaved round(s), torch "
        f"{r['torch']}, 1 thread, on {r['cpus']} CPUs; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.1f}' for x in r['load_before'])} before, "
        f"{'/'.join(f'{x:.1f}' for x in r['load_after'])} after" for r in runs)


def write_doc(path: Path, doc: Path = DOC) -> None:
    """Replace the block between the markers in ``doc`` with the table of ``path``'s rows."""
    data = json.loads(path.read_text())
    rows = sorted(data["rows"], key=lambda r: list(real_models.CASES).index(r["case"])
                  if r["case"] in real_models.CASES else len(real_models.CASES))
    cpu = [r["cpu_ratio"] for r in rows]
    summary = (f"explore / plain compile, CPU seconds: median {statistics.median(cpu):.2f}x, "
               f"{min(cpu):.2f}x to {max(cpu):.2f}x over {len(rows)} case(s); "
               f"{sum(c <= 1.2 for c in cpu)} of {len(rows)} at or under 1.2x"
               + "".join(f"; the {b} rows {min(c):.2f}x to {max(c):.2f}x" for b, c in (
                   (b, [r["cpu_ratio"] for r in rows if r["backend"] == b])
                   for b in ("inductor", "labkit")) if c)
               + ". Largest page "
               f"{max(r['page_chars'] for r in rows):,} characters (budget 250,000).")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    block = (f"{BEGIN}\n`{shown}`, medians; the ratios are explore's seconds over "
             f"plain torch.compile's, wall and CPU (this process plus the compiler and `dot` "
             f"processes it waited for).\n\n{runs_note(data['runs'], {r['case']: r['backend'] for r in rows})}\n\n{summary}\n\n"
             f"{table(rows)}\n{END}")
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc} has no {BEGIN!r} ... {END!r} block to fill")
    head, rest = text.split(BEGIN, 1)
    doc.write_text(head + block + rest.split(END, 1)[1])


def save(path: Path, rows: list[dict], run: dict, replacing: dict | None = None) -> dict:
    """Merge ``rows`` into ``path`` (a case measured again replaces its row), with ``run`` in its
    list of runs in place of ``replacing`` (this run's line after its previous round)."""
    data = json.loads(path.read_text()) if path.exists() else {"runs": [], "rows": []}
    new = {r["case"] for r in rows}
    data["rows"] = [r for r in data["rows"] if r["case"] not in new] + rows
    data["runs"] = [r for r in data["runs"] if r != replacing] + [run]
    path.write_text(json.dumps(data, indent=1) + "\n")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append",
                        help="run the cases whose name contains this, or the one case of this exact name "
                        "(repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="merge the rows into this JSON file")
    parser.add_argument("--doc", type=Path, help="write this JSON's table into docs/real-models.md "
                        "and stop")
    args = parser.parse_args(argv)
    if args.doc:
        write_doc(args.doc.resolve())
        return 0
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    names = [n for n in real_models.CASES if not args.only or any(
        o == n or (o in n and o not in real_models.CASES) for o in args.only)]
    if not names:
        raise SystemExit(f"no case matches {args.only}; the cases: {', '.join(real_models.CASES)}")
    before = os.getloadavg()
    warm_up(names)
    saved = None
    for rows in measure(names, args.rounds):
        after = os.getloadavg()
        run = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "cases": names, "rounds": rows[0]["rounds"], "torch": torch.__version__,
               "cpus": os.cpu_count(), "load_before": [round(x, 1) for x in before],
               "load_after": [round(x, 1) for x in after]}
        if args.json:  # after every round: this run's rows and its line replace the last round's
            saved = save(args.json, rows, run, saved)
    print(runs_note([run], {r["case"]: r["backend"] for r in rows}))
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

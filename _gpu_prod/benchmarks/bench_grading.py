"""Grading time of a full-chapter honest submission, with the sandbox and without, in one run.

One process, one grading key, one pass 1 (the reference notebooks executed under the run's secret
seed, and the library tasks' expected values). Then the same honest submission (the instructor's
solution) is graded in interleaved rounds, once in the bubblewrap sandbox and once with
``UNSAFE=1`` (no sandbox; the same environment, limits and workspace otherwise), alternating which
goes first (ABBA), so a load change on this shared machine hits both alike. The ratio of their
medians is what the sandbox costs. Then two submissions are graded at once (``JOBS=2``).

From these: seconds per submission and submissions per hour with JOBS=1 and 2, the estimated wall
time for a class of 40 (pass 1 once, then 40 submissions), and one full submission including
pass 1 (the time a single student's grade takes). Every run's phases (workspace, notebooks under
nbval, library tests) are kept, and the load average is sampled every 10 s throughout, since the
machine is shared. Besides wall time, each run's CPU seconds (this process and all it starts, from
a cgroup v1 cpuacct group, as root) are recorded: on a shared machine the wall-time ratio swings
with the others' load, the CPU-time ratio hardly does. Writes ``benchmarks/results/grading.json``.

Also compared: one full submission including pass 1 against issue 29's baseline of 128 s wall,
131 CPU-s (the limit is +25 %; on a loaded machine only the CPU figure compares). Environment: ``BENCH_ROUNDS`` (default 3), ``BENCH_JOBS2=0`` skips the JOBS=2 run.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

from labkit.grading import grade as G  # noqa: E402
from labkit.grading import sandbox as S  # noqa: E402
from labkit.grading.rubric import load  # noqa: E402

CLASS = 40
LIMIT = 0.25                  # issue 11: the sandbox may add at most 25 %
FIVE_MIN = 300.0              # issue 15: one full submission (pass 1 included) within 5 minutes
BASELINE = 128.0              # issue 29: one full submission incl. pass 1 before its changes (s)
BASELINE_CPU = 131.2          # the same run's CPU seconds (pass 1 74.2 + the submission 57.0)


class LoadSampler(threading.Thread):
    """Samples the 1-minute load average every ``every`` seconds until stopped."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0 if not self.samples else self.every):
            self.samples.append(round(os.getloadavg()[0], 2))


class CpuMeter:
    """CPU seconds used by this process and everything it starts (a cgroup v1 ``cpuacct`` group).

    Wall time on a machine shared with other work swings with their load; the CPU time of the
    grading processes (sandbox or not, all their descendants are in the group) hardly does. None
    where no such group can be made (not root, no cgroup v1 cpuacct).
    """

    def __init__(self) -> None:
        self.group: Path | None = None
        self.home: Path | None = None
        base = Path("/sys/fs/cgroup/cpuacct")
        try:
            rel = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text()
                       .splitlines() if "cpuacct" in line.split(":", 2)[1].split(","))
            self.home = base / rel.lstrip("/")
            group = self.home / f"labkit-bench-{os.getpid()}"
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except (OSError, StopIteration, IndexError):
            self.group = None

    def seconds(self) -> float | None:
        """CPU seconds so far (user + system, the whole group)."""
        if self.group is None:
            return None
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        """Leave the group and remove it."""
        if self.group is not None and self.home is not None:
            try:
                (self.home / "cgroup.procs").write_text(str(os.getpid()))
                time.sleep(0.2)
                self.group.rmdir()
            except OSError:
                pass
            self.group = None


CPU = CpuMeter()
atexit.register(CPU.close)                  # the group goes even when the bench fails


def _cpu_since(before: float | None) -> float | None:
    now = CPU.seconds()
    return None if now is None or before is None else round(now - before, 1)


def honest(dest: Path) -> Path:
    """The instructor's solution laid out as a submission (notebooks + library files)."""
    rubric = load()
    for rel in [*rubric.notebooks, *rubric.library_files()]:
        if (ROOT / rel).exists():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, dest / rel)
    return dest


def _one(setup: G.Setup, sub: Path, tmp: Path) -> dict[str, object]:
    start, cpu = time.monotonic(), CPU.seconds()
    report = G.grade_one(setup, sub, sub.name, tmp, slot=0)
    wall = time.monotonic() - start
    full = all(s.points == s.max_points for s in report.scores)
    if not full:
        print("NOT FULL MARKS:", [(s.task, s.feedback) for s in report.scores
                                   if s.points < s.max_points], report.problems, file=sys.stderr)
    return {"sandboxed": setup.sandboxed, "seconds": round(wall, 1), "cpu_s": _cpu_since(cpu),
            "phases": report.phases,
            "full_marks": full, "load": round(os.getloadavg()[0], 2)}


def main() -> int:
    """Pass 1, interleaved sandboxed/unsafe rounds, then JOBS=2; print and store the figures."""
    why = S.available()
    if why:
        print(f"no sandbox here ({why}): nothing to compare", file=sys.stderr)
        return 3
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    sampler = LoadSampler()
    sampler.start()
    rubric = load()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp_s:
        tmp = Path(tmp_s)
        sub = honest(tmp / "subs" / "student00")
        start, cpu = time.monotonic(), CPU.seconds()
        setup = G.prepare(ROOT, rubric, G.seed_from_key(f"bench-{time.time()}"), tmp)
        pass1 = time.monotonic() - start
        pass1_cpu = _cpu_since(cpu)
        print(f"pass 1: {pass1:.0f} s", flush=True)
        unsafe = dataclasses.replace(setup, sandboxed=False)
        runs = []
        for r in range(rounds):
            order = [setup, unsafe] if r % 2 == 0 else [unsafe, setup]
            for s in order:
                runs.append(_one(s, sub, tmp))
                print(json.dumps(runs[-1]), flush=True)
        jobs2 = None
        if os.environ.get("BENCH_JOBS2", "1") != "0":
            two = tmp / "subs2"
            for k in range(2):
                shutil.copytree(sub, two / f"student{k:02d}")
            start, cpu = time.monotonic(), CPU.seconds()
            reports = G.grade_all(setup, two, tmp, jobs=2)
            wall = time.monotonic() - start
            jobs2 = {"submissions": 2, "wall_s": round(wall, 1), "cpu_s": _cpu_since(cpu),
                     "per_submission_s": [r.seconds for r in reports],
                     "phases": [r.phases for r in reports],
                     "full_marks": all(s.points == s.max_points for r in reports
                                       for s in r.scores)}
            print(json.dumps(jobs2), flush=True)
    sampler.stop.set()
    CPU.close()
    boxed = round(statistics.median(r["seconds"] for r in runs if r["sandboxed"]), 1)
    bare = round(statistics.median(r["seconds"] for r in runs if not r["sandboxed"]), 1)
    cpu_boxed = [r["cpu_s"] for r in runs if r["sandboxed"] and r["cpu_s"] is not None]
    cpu_bare = [r["cpu_s"] for r in runs if not r["sandboxed"] and r["cpu_s"] is not None]
    cpu_cost = (round(statistics.median(cpu_boxed) / statistics.median(cpu_bare) - 1, 3)
                if cpu_boxed and cpu_bare else None)
    per1 = boxed
    per2 = jobs2["wall_s"] / 2 if jobs2 else None
    result = {
        "what": "one honest full-chapter submission (the instructor's solution), "
                f"{len(rubric.tasks)} tasks, graded in one process with one key",
        "pass1_s": round(pass1, 1),
        "sandboxed_s_median": boxed,
        "unsandboxed_s_median": bare,
        "sandbox_cost": round(boxed / bare - 1, 3),
        "sandboxed_cpu_s_median": round(statistics.median(cpu_boxed), 1) if cpu_boxed else None,
        "unsandboxed_cpu_s_median": round(statistics.median(cpu_bare), 1) if cpu_bare else None,
        "sandbox_cost_cpu": cpu_cost,
        "sandbox_cost_limit": LIMIT,
        "pass1_cpu_s": pass1_cpu,
        "one_submission_incl_pass1_s": round(pass1 + boxed, 1),
        "five_minute_target_met": pass1 + boxed <= FIVE_MIN,
        "baseline_incl_pass1_s": BASELINE,
        "vs_baseline": round((pass1 + boxed) / BASELINE - 1, 3),
        "within_25_percent_of_baseline": pass1 + boxed <= BASELINE * (1 + LIMIT),
        "baseline_incl_pass1_cpu_s": BASELINE_CPU,
        "vs_baseline_cpu": (round((pass1_cpu + statistics.median(cpu_boxed)) / BASELINE_CPU - 1, 3)
                            if cpu_boxed and pass1_cpu is not None else None),
        "sandbox_cgroups": sorted(S.cgroup_parents()),
        "seconds_per_submission": {"jobs1": per1, "jobs2": per2},
        "submissions_per_hour": {"jobs1": round(3600 / per1, 1),
                                 "jobs2": round(3600 / per2, 1) if per2 else None},
        f"class_of_{CLASS}_estimated_s": {"jobs1": round(pass1 + CLASS * per1),
                                          "jobs2": round(pass1 + CLASS * per2) if per2 else None},
        "rounds": runs,
        "jobs2": jobs2,
        "all_full_marks": all(r["full_marks"] for r in runs) and (jobs2 is None
                                                                  or jobs2["full_marks"]),
        "load_1min_samples": sampler.samples,
        "load_1min_mean": round(statistics.mean(sampler.samples), 2),
        "machine": platform.node(), "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "grading.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("rounds", "jobs2")}, indent=2))
    return 0 if result["all_full_marks"] else 2


if __name__ == "__main__":
    sys.exit(main())

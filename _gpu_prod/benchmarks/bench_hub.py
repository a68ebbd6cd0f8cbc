"""The hub at class size: time to ready and memory per student, for 10 and 20 students (as root).

For each class size N: boot the real hub (tests/hub_harness.py, the state of tools/setup_hub.sh),
create N students through the REST API, start all N servers at once and record each one's time to
ready (p50/p95); after a quiet minute, each student's memory from their own cgroup (``total_rss``
of memory.stat: what their processes hold, not the shared page cache); then ``ACTIVE`` students
(default 2) run chapter notebook 00 top to bottom in a kernel, and their cgroup's peak memory
(``memory.max_usage_in_bytes``, private /tmp included) is the active figure. The load average is
recorded, since this 2-core machine is shared. Writes ``benchmarks/results/hub.json``.

Environment: ``BENCH_SIZES`` (default "10,20"), ``BENCH_ACTIVE`` (default 2), ``HUB_TEST_STATE``.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "deploy" / "hub"))

import hub_harness  # noqa: E402
from labkit_hub import roster  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "hub.json"
MiB = 1 << 20


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


def cgroup_dir(hub: hub_harness.Hub) -> Path:
    for line in Path(f"/proc/{hub.proc.pid}/cgroup").read_text().splitlines():
        _, names, rel = line.split(":", 2)
        if "memory" in names.split(","):
            return Path("/sys/fs/cgroup") / names / rel.lstrip("/") / "labkit-hub"
    raise LookupError("no memory cgroup")


def rss(group: Path) -> int:
    stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
    return int(stat["total_rss"])


def notebook_code(path: Path) -> str:
    """All code cells of a notebook as one script (magics dropped), run from its folder."""
    nb = json.loads(path.read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    lines = [ln for cell in cells for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return "import os\nos.chdir(os.path.expanduser('~/course/notebooks'))\n" + "\n".join(lines)


def one_size(n: int, active: int) -> dict:
    names = [f"b{i:02d}" for i in range(n)]
    hub = hub_harness.Hub("username,role\n" + "".join(f"{x},student\n" for x in names),
                          env={"HUB_MEM_LIMIT": os.environ.get("HUB_MEM_LIMIT", "2G")}).start()
    try:
        roster.sync(hub.api_url, hub.token, roster.load(hub_harness.STATE / "roster.csv"))
        load0 = os.getloadavg()[0]
        t0 = time.monotonic()
        hub.start_servers(names)
        ready = hub.wait_ready(names, timeout=300, since=t0)
        time.sleep(60)
        groups = cgroup_dir(hub)
        idle = [rss(groups / x) / MiB for x in names]
        code = notebook_code(hub_harness.STATE / "homes" / names[0] / "course" / "notebooks"
                             / "00_overview.ipynb")
        runners = names[:active]
        for x in runners:
            (groups / x / "memory.max_usage_in_bytes").write_text("0")   # reset the peak

        async def run_all():
            return await asyncio.gather(*[hub_harness.execute(
                f"{hub.url}/user/{x}", hub.user_token(x), code, timeout=900) for x in runners])
        t = time.monotonic()
        results = asyncio.run(run_all())
        wall = time.monotonic() - t
        peaks = [int((groups / x / "memory.max_usage_in_bytes").read_text()) / MiB for x in runners]
        return {"students": n, "ready_s": sorted(round(v, 2) for v in ready.values()),
                "ready_p50_s": round(statistics.median(ready.values()), 2),
                "ready_p95_s": round(percentile(list(ready.values()), 95), 2),
                "idle_rss_mib_mean": round(statistics.mean(idle), 1),
                "idle_rss_mib_max": round(max(idle), 1),
                "active_students": active, "active_notebook": "00_overview",
                "active_peak_mib": [round(p) for p in peaks],
                "active_errors": [r["error"] for r in results],
                "active_wall_s": round(wall, 1), "load_before": round(load0, 2),
                "load_after": round(os.getloadavg()[0], 2)}
    finally:
        hub.stop()


def main() -> int:
    why = hub_harness.missing()
    if why:
        print(f"bench-hub: {why}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in os.environ.get("BENCH_SIZES", "10,20").split(",")]
    active = int(os.environ.get("BENCH_ACTIVE", "2"))
    runs = []
    for n in sizes:
        r = one_size(n, active)
        print(json.dumps(r), flush=True)
        runs.append(r)
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MiB
    out = {"host": {"cpus": os.cpu_count(), "memory_mib": round(mem), "platform": platform.platform()},
           "runs": runs}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

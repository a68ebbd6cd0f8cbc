"""Snapshot every program labkit's compiler builds during a test run, and compare two snapshots.

A refactor of the compiler must leave its generated code byte-identical. Run the compiler suites
once on the old tree and once on the new one with this pytest plugin, then compare the folders:

    LABKIT_SNAPSHOT_DIR=/tmp/before python -m pytest -p tools.compiler_snapshot tests/test_compiler*.py
    LABKIT_SNAPSHOT_DIR=/tmp/after  python -m pytest -p tools.compiler_snapshot tests/test_compiler*.py
    python tools/compiler_snapshot.py /tmp/before /tmp/after

Each ``Program`` (kernels and wrapper, i.e. ``Program.code``, then the loop IR and the schedule
text) becomes one file named after the test that built it and its position within that test.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Any

_current = {"test": "outside-tests", "n": 0}


def _text(program: Any) -> str:
    """Output code, loop IR and schedule of one Program, as the Trace would record them."""
    from labkit.compiler.ir import ComputedBuffer, format_extern, format_node
    from labkit.compiler.schedule import format_schedule

    graph = program.graph
    ir_text = "\n\n".join(format_node(b) if isinstance(b, ComputedBuffer) else format_extern(b)
                          for b in graph.buffers if hasattr(b, "op") or isinstance(b, ComputedBuffer))
    return "\n\n".join([program.code, "# ---- loop IR", ir_text, "# ---- schedule",
                        format_schedule(program.schedule, graph)]) + "\n"


def pytest_configure(config: Any) -> None:
    folder = os.environ.get("LABKIT_SNAPSHOT_DIR")
    if not folder:
        return
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    from labkit.compiler import wrapper

    original = wrapper.Program.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        name = re.sub(r"[^\w.-]+", "_", _current["test"])[:120]
        digest = hashlib.sha1(_current["test"].encode()).hexdigest()[:8]
        (out / f"{name}.{digest}.{_current['n']:03d}.txt").write_text(_text(self))
        _current["n"] += 1

    wrapper.Program.__init__ = init  # type: ignore[method-assign]


def pytest_runtest_setup(item: Any) -> None:
    _current["test"], _current["n"] = item.nodeid, 0


def compare(before: Path, after: Path) -> int:
    """Print the files that differ or exist on one side only; return how many."""
    a = {p.name: p for p in before.glob("*.txt")}
    b = {p.name: p for p in after.glob("*.txt")}
    bad = 0
    for name in sorted(a.keys() | b.keys()):
        if name not in a or name not in b:
            print(f"only in {'after' if name in b else 'before'}: {name}")
            bad += 1
        elif a[name].read_bytes() != b[name].read_bytes():
            print(f"differs: {name}")
            bad += 1
    print(f"{len(a)} sources before, {len(b)} after, {bad} differing")
    return bad


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tools/compiler_snapshot.py BEFORE_DIR AFTER_DIR")
    sys.exit(1 if compare(Path(sys.argv[1]), Path(sys.argv[2])) else 0)

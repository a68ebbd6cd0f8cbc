"""pytest plugin for self-checks and grading runs (``-p labkit.grading.plugin``).

It registers the ``taskN_M`` markers, drops stderr from nbval's comparison (library warnings are
noise), writes each item's cell id and task markers into the JUnit XML as properties, logs every
result as it happens (so a run killed at its time limit still leaves a record), and, in grading
runs, deletes the graded notebooks once nbval has read them, before any student code runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

UNLINK_ENV = "LABKIT_GRADING_UNLINK"     # "1": delete collected notebooks before kernels start
LOG_ENV = "LABKIT_GRADING_LOG"           # path of the JSON-lines result log


def pytest_configure(config: pytest.Config) -> None:
    """Register one marker per rubric task (pyproject may not list them yet)."""
    from labkit.grading.rubric import load

    for line in load().markers():
        config.addinivalue_line("markers", line)


def pytest_collectstart(collector: pytest.Collector) -> None:
    """nbval compares stdout and rich outputs of graded cells, never stderr (nbval docs, cell 46)."""
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb" and hasattr(collector, "skip_compare"):
        collector.skip_compare += ("stderr",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Record the cell id (nbval items) and task markers (tests) of every item in the JUnit XML."""
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None:
            item.user_properties.append(("cell_id", str(cell.get("id", ""))))
            item.user_properties.append(("notebook", item.path.name))
        for mark in item.iter_markers():
            if mark.name.startswith("task"):
                item.user_properties.append(("task_marker", mark.name))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Grading runs: nbval holds the notebooks in memory now, so the files can go."""
    if os.environ.get(UNLINK_ENV) != "1":
        return
    for item in session.items:
        if item.path.suffix == ".ipynb" and item.path.exists():
            item.path.unlink()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Append one JSON line per test phase that decides the outcome."""
    log = os.environ.get(LOG_ENV)
    if not log or (report.when != "call" and report.passed):
        return
    record = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
        "properties": [list(p) for p in report.user_properties],
        "detail": str(report.longrepr)[-4000:] if report.failed else "",
    }
    with Path(log).open("a") as fh:
        fh.write(json.dumps(record) + "\n")

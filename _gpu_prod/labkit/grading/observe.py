"""Library tasks: the student's results are computed in the sandbox, judged outside it.

Inside the sandbox, the instructor's task-marked tests run with this module as a pytest plugin
(``-p labkit.grading.observe``). Before each test it seeds ``random`` and ``torch`` from the run's
secret seed and the test id, so inputs drawn from them change with the key. Every value a test
checks with ``torch.testing.assert_close`` (which ``labkit.compiler.testing.assert_same_as_eager``
also goes through) is recorded: the *actual* side only. Each test's record (outcome and values)
is one JSON line in a transcript file in the sandbox's scratch folder.

Outside, :func:`judge` reads that transcript (capped, no links followed) and compares it with the
transcript of the instructor's solution, made in pass 1 with the same seed: a test counts only if
the student's run says it passed *and* every recorded value agrees with the reference's value
within the test's own tolerance. The reference values are never inside a student's sandbox; the
verdict lives outside. (This is why the library run has no pytest-reportlog file: the pytest that
would write it runs student code.)
"""

from __future__ import annotations

import json
import math
import os
import stat
import zlib
from pathlib import Path
from typing import Any

OBSERVE_ENV = "LABKIT_OBSERVE"          # path of the transcript (inside the sandbox's scratch)
SEED_ENV = "LABKIT_GRADE_SEED"
MAX_ELEMENTS = 20000                    # a larger tensor is recorded by a strided sample
MAX_TRANSCRIPT = 32 << 20

_values: list[dict[str, Any]] = []


def _encode(x: Any, rtol: float | None, atol: float | None) -> dict[str, Any]:
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().to("cpu")
        flat = t.reshape(-1)
        sampled = flat.numel() > MAX_ELEMENTS
        if sampled:
            flat = flat[:: flat.numel() // MAX_ELEMENTS + 1]
        vals = flat.to(torch.float64).tolist() if not t.is_complex() else \
            torch.view_as_real(flat).reshape(-1).to(torch.float64).tolist()
        return {"kind": "tensor", "dtype": str(t.dtype), "shape": list(t.shape),
                "sampled": sampled, "values": [_num(v) for v in vals], "rtol": rtol, "atol": atol}
    if isinstance(x, bool | int | float):
        return {"kind": "scalar", "values": [_num(float(x))], "rtol": rtol, "atol": atol}
    if isinstance(x, list | tuple):
        return {"kind": "seq", "items": [_encode(v, rtol, atol) for v in x]}
    return {"kind": "other", "repr": type(x).__name__}


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)


# -- the plugin (inside the sandbox) ---------------------------------------------------------------
def pytest_configure(config: Any) -> None:
    """Register task markers and start recording ``torch.testing.assert_close``'s actual values."""
    from labkit.grading.rubric import load

    for line in load().markers():
        config.addinivalue_line("markers", line)
    import torch.testing

    original = torch.testing.assert_close

    def assert_close(actual: Any, expected: Any, *args: Any, **kwargs: Any) -> None:
        _values.append(_encode(actual, kwargs.get("rtol"), kwargs.get("atol")))
        return original(actual, expected, *args, **kwargs)

    torch.testing.assert_close = assert_close


def pytest_runtest_setup(item: Any) -> None:
    """Seed every test from the run's seed and its id (so its inputs follow the key)."""
    import random

    import torch

    _values.clear()
    seed = zlib.crc32(f"{os.environ.get(SEED_ENV, '0')}:{item.nodeid}".encode())
    random.seed(seed)
    torch.manual_seed(seed)


def pytest_runtest_logreport(report: Any) -> None:
    """One JSON line per test phase that decides the outcome (setup/teardown only on failure)."""
    path = os.environ.get(OBSERVE_ENV)
    if not path or (report.when != "call" and report.passed):
        return
    record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
              "markers": [k for k in report.keywords if k.startswith("task")],
              "values": list(_values) if report.when == "call" else [],
              "detail": str(report.longrepr)[-2000:] if report.failed else ""}
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


# -- the judge (outside) ---------------------------------------------------------------------------
def read_transcript(path: Path) -> dict[str, dict[str, Any]]:
    """Test id -> record: a failed phase wins; a test reported twice fails. Bad lines are skipped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        data = fh.read(MAX_TRANSCRIPT)
    records: dict[str, dict[str, Any]] = {}
    calls: dict[str, int] = {}
    for line in data.decode(errors="replace").splitlines():
        try:
            rec = json.loads(line)
            nodeid = str(rec["nodeid"])
        except (ValueError, KeyError, TypeError):
            continue
        if rec.get("when") == "call":
            calls[nodeid] = calls.get(nodeid, 0) + 1
        seen = records.get(nodeid)
        if seen is None or (seen.get("outcome") == "passed" and rec.get("outcome") != "passed"):
            records[nodeid] = rec
    for nodeid, n in calls.items():
        if n > 1:
            records[nodeid] = {**records[nodeid], "outcome": "failed", "detail": "reported twice"}
    return records


def _agree(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Student value ``a`` agrees with reference value ``b`` (2x the test's tolerance)."""
    if not isinstance(a, dict) or a.get("kind") != b.get("kind"):
        return False
    if b["kind"] == "seq":
        items = a.get("items")
        return isinstance(items, list) and len(items) == len(b["items"]) and all(
            _agree(x, y) for x, y in zip(items, b["items"]))
    if b["kind"] == "other":
        return a.get("repr") == b.get("repr")
    if b["kind"] == "tensor" and (a.get("dtype"), a.get("shape"), a.get("sampled")) != (
            b["dtype"], b["shape"], b["sampled"]):
        return False
    av, bv = a.get("values"), b["values"]
    if not isinstance(av, list) or len(av) != len(bv):
        return False
    rtol = 2 * (b.get("rtol") if b.get("rtol") is not None else 1.3e-6)
    atol = 2 * (b.get("atol") if b.get("atol") is not None else 1e-5)
    for x, y in zip(av, bv):
        if isinstance(y, str) or isinstance(x, str):
            if x != y:
                return False
        elif not isinstance(x, int | float) or abs(x - y) > atol + rtol * abs(y):
            return False
    return True


def judge(student: dict[str, dict[str, Any]], reference: dict[str, dict[str, Any]] | None
          ) -> dict[str, tuple[str, str, list[str]]]:
    """Test id -> (outcome, detail, task markers), decided here, outside the sandbox.

    ``reference=None`` (self-checks on the student's own machine): the run's own outcomes.
    """
    verdicts = {}
    ids = list(reference) if reference is not None else list(student)
    for nodeid in ids:
        ref = reference.get(nodeid) if reference is not None else None
        markers = [str(m) for m in (ref or student.get(nodeid) or {}).get("markers", [])]
        got = student.get(nodeid)
        if got is None:
            verdicts[nodeid] = ("failed", "did not run (killed, or crashed the run)", markers)
            continue
        if got.get("outcome") != "passed":
            verdicts[nodeid] = (str(got.get("outcome")), str(got.get("detail", "")), markers)
            continue
        if ref is None:
            verdicts[nodeid] = ("passed", "", markers)
            continue
        if ref.get("outcome") != "passed":
            verdicts[nodeid] = ("failed", "the reference solution does not pass it", markers)
            continue
        mine, theirs = got.get("values", []), ref.get("values", [])
        if not isinstance(mine, list) or len(mine) != len(theirs) or not all(
                _agree(x, y) for x, y in zip(mine, theirs)):
            verdicts[nodeid] = ("failed", "results differ from the expected results", markers)
            continue
        verdicts[nodeid] = ("passed", "", markers)
    return verdicts

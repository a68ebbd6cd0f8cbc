"""One way to keep torch's log records: ``labkit.capture.logs.routed``, and the helpers built on it."""

from __future__ import annotations

import logging

import pytest
import torch

from labkit.capture.logs import Kept, routed
from labkit.examples import torch_logs


def _state(lg: logging.Logger) -> tuple:
    return lg.handlers[:], lg.level, lg.propagate, lg.isEnabledFor(logging.DEBUG)


def test_routed_keeps_records_from_the_parents_and_restores_the_logger_after_an_error() -> None:
    parent, lg = logging.getLogger("labkit.test"), logging.getLogger("labkit.test.routed")
    parent.addHandler(above := Kept())  # stands for stderr: what propagates reaches it
    lg.addHandler(own := Kept())
    lg.setLevel(logging.WARNING)
    before = _state(lg)
    kept = Kept()
    with pytest.raises(RuntimeError), routed([lg], kept):
        lg.debug("kept %d", 1)
        assert lg.propagate is False and lg.handlers == [own, kept]
        raise RuntimeError("the block failed")
    assert kept.messages == ["kept 1"] and kept.names == ["labkit.test.routed"]
    assert own.messages == ["kept 1"] and above.messages == []  # added to, not replaced; not propagated
    assert _state(lg) == before  # handlers, level, propagation, and logging's level cache
    with routed([lg], kept, level=logging.INFO, replace=True, propagate=None):
        lg.debug("below the level")
        lg.warning("to us alone")
        assert lg.handlers == [kept] and lg.propagate is True
    assert kept.messages == ["kept 1", "to us alone"] and own.messages == ["kept 1"]
    assert above.messages == ["to us alone"]  # propagate=None: as before (on)
    assert _state(lg) == before
    lg.removeHandler(own)
    parent.removeHandler(above)


def test_torch_logs_keeps_graph_breaks_and_recompiles_per_artifact(capfd) -> None:
    def f(x):
        print("a print is a graph break")
        return x * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="eager")
    with torch_logs("graph_breaks", "recompiles") as logs:
        compiled(torch.ones(3))
        compiled(torch.ones(3, dtype=torch.float64))  # a dtype guard fails: one recompile
    assert logs["graph_breaks"] and "print" in logs["graph_breaks"][0]
    assert len(logs["recompiles"]) == 1 and "dtype" in logs["recompiles"][0]
    with pytest.raises(KeyError, match="was not turned on"):
        logs["guards"]
    assert "Graph break" not in capfd.readouterr().err

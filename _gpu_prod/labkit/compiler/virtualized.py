"""Swappable globals, as in the 2022 TorchInductor prototype: ``ops`` (the ops handler) and ``V``.

A loop body calls ``ops.exp(x)`` without knowing who answers: the handler installed with
``set_ops_handler`` (printing, counting, reading loads, or writing C++ / Triton). Lowerings read
``V.graph``, the ``GraphLowering`` running, and its ``current_node`` (the FX node being lowered).
Note on invariants: each global is a per-thread stack, so nested installs restore the outer one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class Virtualized(threading.local):
    """A global whose attributes come from the innermost ``_set_handler`` handler (a stack per thread)."""

    def __init__(self, unset_message: str) -> None:
        self._unset, self._stack = unset_message, []

    @contextlib.contextmanager
    def _set_handler(self, handler: Any) -> Iterator[Any]:
        """Install ``handler`` as the meaning of this global inside the block."""
        self._stack.append(handler)
        try:
            yield handler
        finally:
            self._stack.pop()

    def _get_handler(self, name: str = "") -> Any:
        if not self._stack:
            raise RuntimeError(self._unset + (f" (asked for {name!r})" if name else ""))
        return self._stack[-1]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get_handler(name), name)


ops: Any = Virtualized("ops.* called with no ops handler installed (set_ops_handler)")
_graph = Virtualized("V.graph used outside a lowering (GraphLowering.run installs it)")
set_ops_handler = ops._set_handler


class _V:
    """``V.ops``: the installed ops handler; ``V.graph``: the GraphLowering running."""

    set_graph_handler = staticmethod(_graph._set_handler)
    ops = property(lambda self: ops._get_handler())
    graph = property(lambda self: _graph._get_handler())


V = _V()

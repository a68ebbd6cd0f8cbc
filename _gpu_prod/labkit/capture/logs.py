"""Route Python loggers' records to a handler of ours while a block runs, instead of to stderr.

torch reports through the ``logging`` module: TORCH_LOGS artifacts (graph breaks, recompiles, IR
dumps), Inductor's warnings ("skipping cudagraphs due to ..."), the structured TORCH_TRACE log.
Every place in labkit that keeps such records (a Recorder for its Trace, ``perf.inductor_messages``,
``examples.torch_logs``) goes through ``routed``, which puts each logger back exactly as it was
(handlers, level, propagation) when the block ends, even if the block raised.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator


class Kept(logging.Handler):
    """A handler that keeps every record's message, and the name of the logger that sent it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.names.append(record.name)
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def routed(loggers: Iterable[logging.Logger], handler: logging.Handler, *, level: int | None = logging.DEBUG,
           propagate: bool | None = False, replace: bool = False) -> Iterator[logging.Handler]:
    """While open, each logger passes its records from ``level`` up (None: its level unchanged) to
    ``handler``; ``replace``: to it alone, its own handlers off; ``propagate=False``: not to its
    parents' handlers either (stderr), None: as before. Everything is restored on exit."""
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    try:
        for lg, handlers, _, _ in saved:
            lg.handlers = [handler] if replace else [*handlers, handler]
            if level is not None:
                lg.setLevel(level)
            if propagate is not None:
                lg.propagate = propagate
        yield handler
    finally:
        for lg, handlers, old_level, old_propagate in saved:
            lg.handlers, lg.propagate = handlers, old_propagate
            lg.setLevel(old_level)  # setLevel, not .level =: it clears logging's isEnabledFor cache

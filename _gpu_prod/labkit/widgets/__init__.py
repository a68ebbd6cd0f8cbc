"""Views of a Trace: ``show`` (tabs by pipeline step, static HTML fallback) and its parts.

Modules: ``code`` (highlighting, line numbers, normalising run-dependent names), ``diff`` (before and
after side by side), ``graph`` (graphviz diagrams of FX graphs, kernel provenance), ``plots``
(matplotlib timing plots), ``render`` (HTML for every part of a Trace), ``view`` (the widget and
``show``), ``progress`` (a progress callable for long captures). None of them compiles anything.
Names load on first use, so ``labkit.widgets.progress_bar`` costs no pygments/matplotlib import.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"show": "view", "TraceView": "view", "progress_bar": "progress", "ProgressBar": "progress"}

__all__ = ["ProgressBar", "TraceView", "progress_bar", "show"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"labkit.widgets.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'labkit.widgets' has no attribute {name!r}")

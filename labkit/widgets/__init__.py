"""Views of a Trace: ``show`` (tabs by pipeline step, static HTML fallback) and its parts.

Modules: ``code`` (highlighting, line numbers, normalising run-dependent names), ``diff`` (before and
after side by side), ``graph`` (graphviz diagrams of FX graphs, kernel provenance), ``plots``
(matplotlib timing plots), ``render`` (HTML for every part of a Trace), ``view`` (the widget and
``show``), ``progress`` (a progress callable for long captures). None of them compiles anything.
"""

from __future__ import annotations

from labkit.widgets.progress import ProgressBar, progress_bar
from labkit.widgets.view import TraceView, show

__all__ = ["ProgressBar", "TraceView", "progress_bar", "show"]

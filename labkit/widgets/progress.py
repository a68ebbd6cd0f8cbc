"""Progress for long captures: a callable that explore calls with the name of the step it starts.

``labkit.explore(fn, *inputs, progress=labkit.widgets.progress_bar())`` shows a bar and the current
step under the cell instead of a frozen cell. The contract explore relies on is only
``progress(message: str) -> None``: one call as each step starts, and ``progress("done")`` at the
end (a message starting with "error" turns the bar red). In a plain terminal or script the callable
does nothing and prints nothing, so explore can call it unconditionally.
"""

from __future__ import annotations

from typing import Any

from labkit.widgets.view import in_kernel

DEFAULT_STEPS = 8  # bytecode, dynamo, aot, inductor, kernels, triton, labkit, timing


class ProgressBar:
    """``progress(message)``: advance one step and say what is running. A no-op outside Jupyter."""

    def __init__(self, total: int = DEFAULT_STEPS, description: str = "labkit",
                 live: bool | None = None) -> None:
        self.total = max(int(total), 1)
        self.description = description
        self.live = in_kernel() if live is None else live
        self.messages: list[str] = []  # what was reported, also in a terminal (tests read it)
        self._bar: Any = None
        self._label: Any = None

    def _start(self) -> None:
        import ipywidgets as w
        from IPython.display import display

        self._bar = w.IntProgress(value=0, min=0, max=self.total, description=self.description,
                                  bar_style="info")
        self._label = w.Label(value="")
        display(w.HBox([self._bar, self._label]))

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        if not self.live:
            return
        if self._bar is None:
            self._start()
        low = message.lower()
        if low.startswith("done"):
            self._bar.value, self._bar.bar_style = self.total, "success"
        elif low.startswith("error"):
            self._bar.bar_style = "danger"
        else:
            self._bar.max = max(self._bar.max, len(self.messages))  # more steps than announced
            self._bar.value = min(len(self.messages), self._bar.max)
        self._label.value = message

    def close(self) -> None:
        """Remove the bar from the page (it stays, finished, if you don't)."""
        if self._bar is not None:
            self._bar.close()
            self._label.close()


def progress_bar(total: int = DEFAULT_STEPS, description: str = "labkit") -> ProgressBar:
    """A ``Callable[[str], None]`` for ``labkit.explore(..., progress=...)``: a bar in a notebook,
    silence in a terminal."""
    return ProgressBar(total=total, description=description)

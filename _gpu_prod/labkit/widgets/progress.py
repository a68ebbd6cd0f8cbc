"""Progress for long captures: a callable that explore calls with what it is working on.

``labkit.explore(fn, *inputs, progress=labkit.widgets.progress_bar())`` shows a bar and the current
step under the cell instead of a frozen cell. The contract explore relies on is only
``progress(message: str) -> None``: one call as each stage starts (explore passes stage kinds
such as "dynamo.graph" or "inductor.output_code", then "building stages", "timing"), and
``progress("done")`` at the end. A message starting with "error" turns the bar red.

When done, the bar removes itself from the cell output (the output becomes empty text), so a
stored notebook keeps nothing run-dependent and nbval sees the same output every run. In a plain
terminal or script the callable does nothing and prints nothing, so explore can call it always.
This module imports neither torch nor ipywidgets until a bar is really shown.
"""

from __future__ import annotations

from typing import Any

from labkit.trace import STAGE_REGISTRY

# message prefix -> (position on the bar, what the label says), in pipeline order: the stage kinds'
# prefixes ("bytecode", "dynamo", "aot", ...) give their step, then explore's own last steps.
STEPS: tuple[tuple[str, str], ...] = (
    *dict.fromkeys((k.kind.split(".", 1)[0], k.step) for k in STAGE_REGISTRY),
    ("building", "building the trace"), ("timing", "timing eager vs compiled"), ("done", "done"),
)
_POSITION = {prefix: i for i, prefix in enumerate(dict.fromkeys(
    label for _, label in STEPS))}


def in_kernel() -> bool:
    """True inside a Jupyter kernel (where a widget can be shown), False in a terminal or script."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def step_of(message: str) -> tuple[int, str] | None:
    """(position, step name) of a progress message, or None for a message of no known step."""
    low = message.lower()
    for prefix, label in STEPS:
        if low.startswith(prefix):
            return _POSITION[label] + 1, label
    return None


class ProgressBar:
    """``progress(message)``: move the bar to the step the message names. A no-op outside Jupyter."""

    def __init__(self, description: str = "labkit", live: bool | None = None) -> None:
        self.description = description
        self.live = in_kernel() if live is None else live
        self.messages: list[str] = []  # what was reported, also in a terminal (tests read it)
        self.total = len(_POSITION)
        self._bar: Any = None
        self._label: Any = None
        self._box: Any = None
        self._handle: Any = None
        self._closed = False

    def _start(self) -> None:
        import ipywidgets as w
        from IPython.display import display

        self._bar = w.IntProgress(value=0, min=0, max=self.total, description=self.description,
                                  bar_style="info")
        self._label = w.Label(value="")
        self._box = w.HBox([self._bar, self._label])
        self._box.add_class("lk-progress")
        self._handle = display(self._box, display_id=True)

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        if not self.live or self._closed:
            return
        if self._bar is None:
            self._start()
        if message.lower().startswith("error"):
            self._bar.bar_style = "danger"
            self._label.value = message
            return
        step = step_of(message)
        if step is not None:
            self._bar.value = max(self._bar.value, step[0])
        self._label.value = f"{step[1]}: {message}" if step and step[1].lower() != message.lower() else message
        if step is not None and step[1] == "done":
            self.close()

    def close(self) -> None:
        """Take the bar off the page and leave an empty output behind (same every run)."""
        self._closed = True
        if self._bar is None:
            return
        if self._handle is not None:
            self._handle.update({"text/plain": ""}, raw=True)
        # Close the box with its children: a live box that names closed children makes the
        # frontend's restore of *all* widgets fail after a page refresh (every other output
        # then stays on "Loading widget...").
        for widget in (self._box, self._bar, self._label):
            widget.close()
        self._box = self._bar = self._label = self._handle = None


def progress_bar(description: str = "labkit") -> ProgressBar:
    """A ``Callable[[str], None]`` for ``labkit.explore(..., progress=...)``: a bar in a notebook,
    silence in a terminal."""
    return ProgressBar(description=description)

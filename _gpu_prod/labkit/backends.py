"""The one place a backend name becomes what ``torch.compile(backend=...)`` takes.

``labkit.explore`` and ``labkit.compare`` both resolve names here: "inductor" becomes the same
callable ``torch.compile`` builds for it (so ``mode=`` and ``options=`` act the same), "labkit"
becomes labkit's own compiler, and any other registered name ("eager", "aot_eager", ...) is looked
up in Dynamo's registry. An unknown name fails here, before anything compiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit import _torch
from labkit.trace import Trace


def resolve(name: str, *, trace: Trace | None = None, target: str = "cpp",
            mode: str | None = None, options: dict[str, Any] | None = None,
            dynamic: bool | None = None) -> Callable[..., Any]:
    """The backend callable for ``name``; ``trace``/``target`` go to labkit's, ``mode``/``options``
    /``dynamic`` to Inductor (giving them to another backend is an error)."""
    if name == "inductor":
        return _torch.inductor_backend(mode, options, dynamic)
    if mode is not None or options is not None:
        raise ValueError(f"mode= and options= configure Inductor; backend={name!r} takes neither")
    if name == "labkit":
        from labkit.compiler import make_backend

        return make_backend(trace=trace, target=target)
    return _torch.lookup_backend(name)

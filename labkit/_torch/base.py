"""The base of labkit's private-API home: the error a moved torch API raises, and the lookup
that raises it (``_api``); every submodule of ``labkit._torch`` reaches torch through these."""

from __future__ import annotations

import importlib.util
from typing import Any

import torch


class TorchAPIError(RuntimeError):
    """A private torch API that labkit relies on is missing or changed in this torch version."""


def _moved(api: str, err: BaseException) -> TorchAPIError:
    return TorchAPIError(
        f"labkit needs the private torch API {api}, which torch {torch.__version__} does not "
        f"provide as expected ({type(err).__name__}: {err}). labkit is tested with torch 2.11, "
        "2.13 and 2.15; what needs this API cannot run here."
    )


def _api(module: str, *names: str) -> Any:
    """``module.names[0].names[1]...``, or a TorchAPIError naming it when this torch moved it."""
    try:
        obj: Any = importlib.import_module(module)
        for name in names:
            obj = getattr(obj, name)
    except (ImportError, AttributeError) as e:
        raise _moved(".".join((module, *names)), e) from e
    return obj

"""Private torch APIs of capture: Dynamo's hooks, compile ids, backends and counters, the
TORCH_LOGS artifact loggers and the TORCH_TRACE handler (users: labkit.capture, debugger,
orchestrate, examples, perf and the grading harness's Dynamo checks)."""

from __future__ import annotations

import contextlib
import logging
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from labkit._torch.base import _api, _moved

# The logger behind TORCH_TRACE / tlparse: every structured record (graphs, guards, output code).
TRACE_LOGGER = "torch.__trace"
# modules whose names the grading harness checks an answer left alone (harness.Seal)
DYNAMO_MODULES = ("torch._dynamo",)
DYNAMO_LOGGER = "torch._dynamo"  # graph-break warnings and the like


# The structured record every ``dynamo_timed`` block writes when it begins and ends, and every
# instant compile event (cache hit/miss): torch/_dynamo/utils.py ChromiumEventLogger._log_timed_event
# (2.11 to 2.15). tlparse turns them into a Perfetto trace; labkit into CompileSpans.
CHROMIUM_EVENT = "chromium_event"
# Dynamo names a function resuming a frame after a graph break "torch_dynamo_resume_in_<fn>_at_<n>".
RESUME_PREFIX = "torch_dynamo_resume_in_"


# -- Dynamo: its hooks, compile ids, backends and counters ----------------------------------------
def register_bytecode_hook(hook: Callable[[types.CodeType, types.CodeType], None]) -> Any:
    """Call ``hook(original, transformed)`` for every frame Dynamo compiles; returns a removable handle."""
    try:
        from torch._dynamo.convert_frame import register_bytecode_hook as reg
    except ImportError as e:
        raise _moved("torch._dynamo.convert_frame.register_bytecode_hook", e) from e
    return reg(hook)


def current_compile_id() -> str | None:
    """The Dynamo compile id ("frame/recompile", e.g. "0/1") being compiled right now, or None."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except (ImportError, AttributeError):
        return None  # only used to label log lines; an unlabelled line is still shown
    return None if cid is None else str(cid)


def dynamo_compiling() -> bool:
    """Whether Dynamo is compiling a frame right now (a backend it calls runs inside its compile
    context; the same function called by hand does not)."""
    return _api("torch._guards", "CompileContext", "current_compile_id")() is not None


# the module whose OutputGraph calls a backend (torch/_dynamo/output_graph.py, 2.11 to 2.15)
DYNAMO_CALLS_BACKEND = "torch._dynamo.output_graph"


def called_by_dynamo(depth: int) -> bool:
    """Whether the function ``depth`` frames above the caller (0: the caller itself) was called
    by Dynamo's backend call itself: only torch's own frames (its backend wrappers) between it
    and Dynamo's OutputGraph, no frame of any other module (an answer's backend passing it on)."""
    import sys

    frame = sys._getframe(depth + 1).f_back
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module == DYNAMO_CALLS_BACKEND:
            return True
        if module != "torch" and not module.startswith("torch."):
            return False
        frame = frame.f_back
    return False


def interned_files() -> dict[int, str]:
    """The structured log's file-name table (its stacks say ``"filename": 3``), number -> name."""
    try:
        from torch._logging.structured import INTERN_TABLE
    except ImportError:
        return {}  # stacks then show the numbers: still ordered, only less readable
    return {n: name for name, n in INTERN_TABLE.items()}


def compiled_codes() -> list[types.CodeType]:
    """Code objects Dynamo has compiled that still hold compiled entries (what a reset discards)."""
    try:
        from torch._dynamo import convert_frame
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:
        return []  # only used to warn before a reset; no warning beats a crash
    out = []
    for ref in list(getattr(getattr(convert_frame, "input_codes", None), "seen", [])):
        code = ref()
        if code is not None:
            with contextlib.suppress(Exception):
                if _debug_get_cache_entry_list(code):
                    out.append(code)
    return out


def decompiler() -> Callable[[types.CodeType], str] | None:
    """depyf.decompile when depyf is installed, else None (the GPU machine has no depyf)."""
    try:
        import depyf
    except ImportError:
        return None
    return depyf.decompile


def lookup_backend(name: str) -> Callable[..., Any]:
    """A registered torch.compile backend by name (e.g. "eager", "aot_eager")."""
    return _api("torch._dynamo", "lookup_backend")(name)  # in torch._dynamo.__all__


def mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """Tell Dynamo that ``t``'s size ``dim`` varies (compile it symbolically from the first call)."""
    _api("torch._dynamo", "mark_dynamic")(t, dim)


def copy_dynamic_marks(source: torch.Tensor, target: torch.Tensor) -> None:
    """Give ``target`` the dimension marks Dynamo's mark_dynamic / maybe_mark_dynamic / mark_static
    put on ``source``."""
    import copy

    # torch 2.13 keeps them as ``_dynamo_*`` attributes of the tensor (torch/_dynamo/decorators.py:
    # _dynamo_dynamic_indices, _dynamo_dynamic_range, _dynamo_weak_dynamic_indices, ...)
    for attr, value in vars(source).items():
        if attr.startswith("_dynamo_"):
            setattr(target, attr, copy.copy(value))


def original_callable(fn: Any) -> Any:
    """The function torch.compile wrapped when ``fn`` is a torch.compile result, else ``fn`` itself."""
    return getattr(fn, "_torchdynamo_orig_callable", fn)


def is_dynamo_attribute(name: str) -> bool:
    """Whether an attribute name is one Dynamo sets on objects it compiles (``_torchdynamo_*``)."""
    return name.startswith("_torchdynamo")


def is_c_extension_module(module: str) -> bool:
    """Whether a ``__module__`` is torch's C extension (``torch._C...``): users call its builtins torch.X."""
    return module.startswith("torch._C")


def counters() -> Any:
    """Dynamo's process-wide counters (``["stats"]["unique_graphs"]``, ``["graph_break"]``, ...)."""
    return _api("torch._dynamo.utils", "counters")


def install_dynamo_patches() -> None:
    """What Dynamo patches into torch on its first compile (nn.Module.__init__ and __setstate__
    tag modules with a generation: torch/_dynamo/mutation_guard.py, 2.13), done now, so that a
    later compile changes nothing a snapshot of torch holds."""
    _api("torch._dynamo.mutation_guard", "install_generation_tagging_init")()


def reset_compile_state() -> None:
    """Forget every compiled frame, Dynamo's counters and Inductor's metrics."""
    _api("torch._dynamo", "reset")()
    counters().clear()
    _api("torch._inductor.metrics", "reset")()


def compile_counter(backend: str) -> Any:
    """A Dynamo backend that counts frames (``.frame_count``) and hands each graph to ``backend``."""
    return _api("torch._dynamo.testing", "CompileCounterWithBackend")(backend)


# -- TORCH_LOGS -----------------------------------------------------------------------------------
def artifact_loggers(names: tuple[str, ...]) -> list[logging.Logger]:
    """The TORCH_LOGS artifact loggers (e.g. ir_pre_fusion) with these names, found without set_logs."""
    try:
        # Artifact loggers exist only once their module is imported: import the ones we read.
        import torch._inductor.compile_fx  # noqa: F401
        import torch._inductor.debug  # noqa: F401
        import torch._inductor.scheduler  # noqa: F401
        from torch._logging._internal import log_registry

        qnames = log_registry.get_artifact_log_qnames()
    except (ImportError, AttributeError) as e:
        raise _moved("torch._logging._internal.log_registry.get_artifact_log_qnames", e) from e
    return [logging.getLogger(q) for q in sorted(qnames) if artifact_name(q) in names]


def artifact_name(logger_name: str) -> str:
    """The TORCH_LOGS artifact an artifact logger stands for: "torch._dynamo.__recompiles" -> "recompiles"."""
    return logger_name.rsplit(".__", 1)[-1]


def set_logs(**artifacts: Any) -> None:
    """``torch._logging.set_logs``: switch TORCH_LOGS artifacts on (no arguments: back to default)."""
    _api("torch._logging", "set_logs")(**artifacts)


@contextlib.contextmanager
def writing_torch_trace(directory: str | os.PathLike[str]) -> Iterator[None]:
    """Write the structured records of the compiles inside to ``directory`` as TORCH_TRACE would."""
    # TORCH_TRACE is read once, at import (torch/_logging/_internal.py _init_logs); this adds the
    # same handler and formatter for a block, so that tlparse can read a live process's compiles.
    log = logging.getLogger(TRACE_LOGGER)
    handler = _api("torch._logging._internal", "LazyTraceHandler")(str(directory))
    handler.setFormatter(_api("torch._logging._internal", "TorchLogsFormatter")(trace=True))
    level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        handler.close()

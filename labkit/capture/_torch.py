"""Every private torch (and triton) API labkit's capture touches, each behind one small function.

A torch release that moves one of these breaks exactly one function here, and the error says which
API moved and on which torch version, instead of an AttributeError deep inside a capture. Each
function names the recipe it implements (shared/notes/capture-recipes.md) and was checked against
torch 2.11 and 2.13.
"""

from __future__ import annotations

import contextlib
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

# The logger behind TORCH_TRACE / tlparse: every structured record (graphs, guards, output code).
TRACE_LOGGER = "torch.__trace"


class TorchAPIError(RuntimeError):
    """A private torch API that labkit relies on is missing or changed in this torch version."""


def _moved(api: str, err: BaseException) -> TorchAPIError:
    return TorchAPIError(
        f"labkit needs the private torch API {api}, which torch {torch.__version__} does not "
        f"provide as expected ({type(err).__name__}: {err}). labkit is tested with torch 2.11 "
        "and 2.13; this stage cannot be captured here."
    )


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
    return [logging.getLogger(q) for q in sorted(qnames) if q.rsplit(".__", 1)[-1] in names]


def custom_graph_pass_base() -> type:
    """Inductor's CustomGraphPass base class (a post-grad pass hook that sees Inductor's input graph)."""
    try:
        from torch._inductor.custom_graph_pass import CustomGraphPass
    except ImportError as e:
        raise _moved("torch._inductor.custom_graph_pass.CustomGraphPass", e) from e
    return CustomGraphPass


@contextlib.contextmanager
def fresh_compile_config(post_grad_pass: Any | None) -> Iterator[None]:
    """Force real lowering (no cache hits), kernel provenance and a post-grad pass; undone on exit."""
    import torch._inductor.config as inductor_config

    patches: dict[str, Any] = {"force_disable_caches": True}
    if hasattr(inductor_config, "trace") and hasattr(
        inductor_config.trace, "provenance_tracking_level"
    ):
        patches["trace.provenance_tracking_level"] = 1  # kernel -> ATen node map, also on CPU
    if post_grad_pass is not None:
        patches["post_grad_custom_post_pass"] = post_grad_pass
    # config.patch restores every key on exit, so the user's own settings survive.
    with inductor_config.patch(patches), torch.compiler.config.patch(force_disable_caches=True):
        yield


def kernel_post_grad_nodes() -> dict[str, list[str]] | None:
    """Inductor's provenance map of the graph just compiled: "kernel:handle" -> post-grad node names.

    Read straight from torch._inductor.debug because its structured record is empty for backward
    graphs (it is only dumped when a pre-grad graph id is set, and backward graphs have none).
    """
    try:
        from torch._inductor import debug
    except ImportError:
        return None
    info = getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", None)
    if not isinstance(info, dict):
        return None
    return {str(k): [str(n) for n in v] for k, v in info.items() if isinstance(v, list | tuple)}


def inductor_backend(mode: str | None, options: dict[str, Any] | None, dynamic: bool | None) -> Any:
    """The backend torch.compile builds for backend="inductor" (so mode/options act the same)."""
    try:
        wrapper = torch._TorchCompileInductorWrapper  # type: ignore[attr-defined]
    except AttributeError as e:
        raise _moved("torch._TorchCompileInductorWrapper", e) from e
    return wrapper(mode, options, dynamic)


def lookup_backend(name: str) -> Callable[..., Any]:
    """A registered torch.compile backend by name (e.g. "eager", "aot_eager")."""
    return torch._dynamo.lookup_backend(name)  # in torch._dynamo.__all__


def triton_kernel_from_source(source: str) -> Any:
    """Load an Inductor Triton kernel module from source; return its CachingAutotuner (uncompiled)."""
    import hashlib
    import importlib.util
    import tempfile
    from pathlib import Path

    # A real file, as Inductor does: @triton.jit reads the kernel's source back through inspect,
    # and the kernel decorator takes filename=__file__.
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / "labkit-triton-kernels" / f"k{digest}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"labkit_kernel_{digest}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tuners = [v for v in vars(module).values() if hasattr(v, "triton_meta") and hasattr(v, "fn")]
    if not tuners:
        raise TorchAPIError(
            "Inductor's Triton kernel source defines no CachingAutotuner with .fn and .triton_meta "
            f"in torch {torch.__version__}; cannot recompile it for its IR stages"
        )
    return tuners[0]


def live_triton_kernel(name: str, source: str) -> Any | None:
    """The CachingAutotuner Inductor loaded for kernel ``name`` with this ``source``, or None."""
    try:
        from torch._inductor.codecache import PyCodeCache
    except ImportError:
        return None
    modules = PyCodeCache.modules if isinstance(PyCodeCache.modules, list) else []
    for module in reversed(modules):  # newest first
        tuner = getattr(module, name, None)
        if tuner is None or not hasattr(tuner, "launchers"):
            continue
        # Names repeat across graphs ("triton_poi_fused_mul_0"): the kernel body must match too.
        body = getattr(getattr(tuner, "fn", None), "src", None)
        if not body or body.strip() in source:
            return tuner
    return None


def compiled_triton_asm(tuner: Any) -> dict[str, str] | None:
    """The IR text of the config a live CachingAutotuner actually launched (GPU only), or None."""
    for launcher in getattr(tuner, "launchers", None) or []:
        asm = getattr(getattr(launcher, "bin", None), "asm", None)
        if asm:
            return {k: v for k, v in asm.items() if isinstance(v, str)}
    for result in getattr(tuner, "compile_results", None) or []:
        asm = getattr(getattr(result, "kernel", None), "asm", None)
        if asm:
            return {k: v for k, v in asm.items() if isinstance(v, str)}
    return None


def decompiler() -> Callable[[types.CodeType], str] | None:
    """depyf.decompile when depyf is installed, else None (the GPU machine has no depyf)."""
    try:
        import depyf
    except ImportError:
        return None
    return depyf.decompile


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

"""Every private torch and Triton API labkit touches, each behind one small named function.

This is the only module of labkit that reaches into ``torch._*``, private attributes of torch
objects, or Triton's compiler/runtime internals (``ASTSource``, ``GPUTarget``, ``JITFunction``,
the ``TRITON_INTERPRET`` switch). capture, compiler, explore, perf, examples and grading all come
here; ``tests/test_layering.py`` fails on any private name elsewhere. A torch release that moves
one of these breaks exactly one function here, and the error says which API moved and on which
torch version, instead of an AttributeError deep inside a capture. Checked against torch 2.11,
2.13 and 2.15 (Triton 3.6 and 3.9).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

# The logger behind TORCH_TRACE / tlparse: every structured record (graphs, guards, output code).
TRACE_LOGGER = "torch.__trace"
# modules whose names the grading harness checks an answer left alone (harness.Seal)
DYNAMO_MODULES = ("torch._dynamo",)
DYNAMO_LOGGER = "torch._dynamo"  # graph-break warnings and the like
INDUCTOR_LOGGER = "torch._inductor"  # e.g. "skipping cudagraphs due to ..."
# The structured record every ``dynamo_timed`` block writes when it begins and ends, and every
# instant compile event (cache hit/miss): torch/_dynamo/utils.py ChromiumEventLogger._log_timed_event
# (2.11 to 2.15). tlparse turns them into a Perfetto trace; labkit into CompileSpans.
CHROMIUM_EVENT = "chromium_event"
# Dynamo names a function resuming a frame after a graph break "torch_dynamo_resume_in_<fn>_at_<n>".
RESUME_PREFIX = "torch_dynamo_resume_in_"
DEFAULT_TARGET = ("cuda", 90, 32)  # an H100 (sm_90), the GPU the course's recordings come from


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


def inductor_backend(mode: str | None, options: dict[str, Any] | None, dynamic: bool | None) -> Any:
    """The backend torch.compile builds for backend="inductor" (so mode/options act the same)."""
    try:
        wrapper = torch._TorchCompileInductorWrapper  # type: ignore[attr-defined]
    except AttributeError as e:
        raise _moved("torch._TorchCompileInductorWrapper", e) from e
    return wrapper(mode, options, dynamic)


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


def dispatch_mode_base() -> type:
    """``TorchDispatchMode``: subclass it to see every ATen call (the exercises count matmuls)."""
    return _api("torch.utils._python_dispatch", "TorchDispatchMode")


# the special methods through which Python code answers torch's operators (modes, tensor subclasses)
PYTHON_HANDLERS = ("__torch_dispatch__", "__torch_function__")


def python_handlers() -> list[str]:
    """The modules whose ``__torch_dispatch__``/``__torch_function__`` (a mode's or a tensor
    subclass's handler) is running on the stack now, innermost first."""
    import sys

    frame, found = sys._getframe(1), []
    while frame is not None:
        if frame.f_code.co_name in PYTHON_HANDLERS:
            found.append(str(frame.f_globals.get("__name__", "")))
        frame = frame.f_back
    return found


def storage_weak_ref(t: torch.Tensor) -> Any:
    """A weak reference to ``t``'s storage (``.expired()`` once nothing holds the memory)."""
    return _api("torch.multiprocessing.reductions", "StorageWeakRef")(t.untyped_storage())


def compile_entry_points() -> list[tuple[Any, str]]:
    """Every (object, attribute) through which user code starts a Dynamo compile or export."""
    dynamo = _api("torch._dynamo")
    return [(torch, "compile"), (dynamo, "optimize"), (dynamo, "explain"), (torch, "export")]


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


# -- AOTAutograd, decompositions and torch's type rules (used by labkit's compiler) ---------------
def aot_module_simplified() -> Callable[..., Any]:
    """AOTAutograd's entry point for a Dynamo backend (joint graph, partition, fw/bw compilers)."""
    return _api("torch._functorch.aot_autograd", "aot_module_simplified")


def cuda_properties(device: Any = None) -> Any | None:
    """torch.cuda.get_device_properties(device): SM count, shared memory, L2 size; None with no GPU."""
    return torch.cuda.get_device_properties(device) if torch.cuda.is_available() else None


def make_boxed_func(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` in AOTAutograd's boxed calling convention (one list argument it may clear)."""
    return _api("torch._functorch.aot_autograd", "make_boxed_func")(fn)


def default_partition() -> Callable[..., Any]:
    """AOTAutograd's default joint-graph partitioner (saves what the backward reads)."""
    return _api("torch._functorch.partitioners", "default_partition")


def core_aten_decompositions() -> dict[Any, Callable[..., Any]]:
    """torch's decomposition table into core ATen (what Inductor starts from)."""
    return dict(_api("torch._decomp", "core_aten_decompositions")())


def computation_dtype(dtype: torch.dtype) -> torch.dtype:
    """torch's opmath type for ``dtype``: what arithmetic on it runs in (half -> float32)."""
    return _api("torch._prims_common", "get_computation_dtype")(dtype)


def promoted_dtype(*examples: Any) -> torch.dtype:
    """torch's default elementwise type promotion of these tensors and Python scalars."""
    default = _api("torch._prims_common", "ELEMENTWISE_TYPE_PROMOTION_KIND", "DEFAULT")
    promote = _api("torch._prims_common", "elementwise_dtypes")
    return promote(*examples, type_promotion_kind=default)[1]


def make_fx(fn: Callable[..., Any], decompositions: dict[Any, Callable[..., Any]],
            tracing_mode: str = "fake") -> Callable[..., torch.fx.GraphModule]:
    """``torch.fx.experimental``'s make_fx: trace ``fn`` to an ATen FX graph with these decompositions."""
    trace = _api("torch.fx.experimental.proxy_tensor", "make_fx")
    return trace(fn, decomposition_table=decompositions, tracing_mode=tracing_mode)


# -- Inductor -------------------------------------------------------------------------------------
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


def post_grad_custom_post_pass() -> Any:
    """The post-grad pass the user set in Inductor's config (None when there is none)."""
    return _api("torch._inductor.config", "post_grad_custom_post_pass")


def kernel_post_grad_nodes() -> dict[str, list[str]] | None:
    """Inductor's provenance map of the graph just compiled: "kernel:handle" -> post-grad node names."""
    # Read straight from torch._inductor.debug because its structured record is empty for backward
    # graphs (it is only dumped when a pre-grad graph id is set, and backward graphs have none).
    try:
        from torch._inductor import debug
    except ImportError:
        return None
    info = getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", None)
    if not isinstance(info, dict):
        return None
    return {str(k): [str(n) for n in v] for k, v in info.items() if isinstance(v, list | tuple)}


def run_and_get_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    """Reset Dynamo, call a torch.compile'd ``fn``; return (its result, the output code of every
    graph Inductor compiled, one entry per graph, in order)."""
    from unittest import mock

    # torch's own run_and_get_code keeps the codes in a set: two graphs whose code is the same
    # text (``[sin, break, sin]``) would come back as one, and their kernels be counted once.
    # Inductor calls this hook for every graph it lowers and for every FX-graph-cache hit.
    lowering = _api("torch._inductor.graph", "GraphLowering")
    codes: list[str] = []
    with mock.patch.object(lowering, "save_output_code", codes.append):
        _api("torch._dynamo", "reset")()
        result = fn(*args)
    return result, codes


def cudagraph_dynamic_shape_warn_limit() -> int:
    """How many distinct input sizes CUDA graphs record before Inductor warns (8 when unset)."""
    return _api("torch._inductor.config", "triton", "cudagraph_dynamic_shape_warn_limit") or 8


def graph_partition() -> bool:
    """Whether Inductor cuts a graph around work CUDA graphs can't capture instead of skipping it."""
    return bool(_api("torch._inductor.config", "graph_partition"))


def _driver_or_none(switch: Callable[[], None]) -> Callable[[], None]:
    """``switch``, except that finding no GPU backend is not an error."""
    def maybe() -> None:
        try:
            switch()
        except RuntimeError as e:
            if "active GPU backend" not in str(e):
                raise
    return maybe


def triton_kernel_from_source(source: str) -> Any:
    """Load an Inductor Triton kernel module from source; return its CachingAutotuner (uncompiled)."""
    helpers = _api("torch._inductor.runtime.triton_helpers")
    switch = helpers.set_driver_to_gpu
    # Inductor's GPU kernel modules switch Triton to a GPU driver when imported; without a GPU
    # (IR for a GPU target compiled here) there is none, and compiling for a target needs no driver.
    helpers.set_driver_to_gpu = _driver_or_none(switch)
    try:
        module = module_from_source(source, Path(tempfile.gettempdir()) / "labkit-triton-kernels")
    finally:
        helpers.set_driver_to_gpu = switch
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


# -- Triton: the interpreter, GPU targets, the compiler -------------------------------------------
def assert_on_device(ok: torch.Tensor, message: str) -> None:
    """Unless the one-element ``ok`` is true, fail the device (raised at the next sync); no host sync."""
    # A CUDA device-side assert, as eager's own index checks: the CUDA context is lost afterwards.
    torch._assert_async(ok, message)


def module_from_source(source: str, folder: Path, interpret: bool = False) -> types.ModuleType:
    """Run Python source as a module from a file in ``folder``; ``interpret``: its kernels interpreted."""
    # A real file, as Inductor does: @triton.jit reads a kernel's source back through inspect, and
    # Inductor's kernels take filename=__file__.
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"lk_{key}.py"
    if not path.exists():  # written once, atomically: other processes may load it concurrently
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source, encoding="utf-8")
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"labkit_src_{key}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with triton_interpreter(interpret):
        spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def triton_interpreter(on: bool = True) -> Iterator[None]:
    """While open (and ``on``), ``@triton.jit`` builds kernels for the CPU interpreter; undone on exit."""
    old = os.environ.get("TRITON_INTERPRET")
    if on:  # read by @triton.jit when the decorator runs, not at launch
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if on and old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        elif on:
            os.environ["TRITON_INTERPRET"] = old


def interpret_triton_without_gpu() -> None:
    """Without CUDA, make Triton interpret kernels on the CPU (call before the first triton import)."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def triton_kernel_types() -> tuple[type, ...]:
    """The classes ``@triton.jit`` makes: JITFunction, and the interpreter's InterpretedFunction."""
    return (_api("triton.runtime.jit", "JITFunction"),
            _api("triton.runtime.interpreter", "InterpretedFunction"))


def triton_interpreter_names() -> frozenset[str]:
    """The names Triton's interpreter module binds: it copies them into a kernel's module before
    it runs the kernel's recompiled source, unless the module binds them already (triton 3.9,
    runtime/interpreter.py FunctionRewriter._compile_and_exec), and that source calls some
    (``interpreter_semantic``, ``_InterpreterComparison``)."""
    return frozenset(vars(_api("triton.runtime.interpreter")))


class OutOfBounds(IndexError):
    """An interpreted Triton kernel reached memory outside the tensors it was launched with."""


@contextlib.contextmanager
def triton_bounded_memory() -> Iterator[None]:
    """While open, an interpreted Triton kernel may load and store only inside the storages of the
    tensors its launch was given (:class:`OutOfBounds` otherwise, before the access). The
    interpreter reads and writes raw addresses unchecked (triton 3.9: ``GridExecutor`` passes
    pointers as integers; every ``tl.load``/``tl.store`` reaches ``_interpreter.load``/``.store``
    in runtime/interpreter.py), so without this a kernel could write any memory of its process."""
    import numpy as np

    interp = _api("triton.runtime.interpreter")
    executor = interp.GridExecutor
    real, init = interp._interpreter, executor._init_args_hst
    ranges: list[tuple[int, int]] = []

    def init_args(self: Any, args_dev: Any, kwargs: Any) -> Any:
        storages = [a.untyped_storage() for a in [*args_dev, *kwargs.values()] if isinstance(a, torch.Tensor)]
        ranges[:] = [(s.data_ptr(), s.data_ptr() + s.nbytes()) for s in storages if s.nbytes()]
        return init(self, args_dev, kwargs)

    def check(ptrs: Any, mask: Any, itemsize: int) -> None:
        at = np.asarray(ptrs, dtype=np.uint64)[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(ptrs))]
        ok = np.zeros(at.shape, dtype=bool)
        for lo, hi in ranges:
            ok |= (at >= lo) & (at + np.uint64(itemsize) <= hi)
        if not ok.all():
            raise OutOfBounds("a Triton kernel loaded or stored outside the tensors it was given")

    class Bounded:
        def load(self, ptrs: Any, mask: Any, other: Any, dtype: Any) -> Any:
            check(ptrs, mask, np.dtype(dtype).itemsize)
            return real.load(ptrs, mask, other, dtype)

        def store(self, ptrs: Any, value: Any, mask: Any) -> Any:
            check(ptrs, mask, np.asarray(value).dtype.itemsize)
            return real.store(ptrs, value, mask)

        def __getattr__(self, name: str) -> Any:    # atomics and the rest: kernels may not use them
            if name in ("atomic_cas", "atomic_rmw"):
                raise OutOfBounds(f"a Triton kernel used {name}, which this guard does not check")
            return getattr(real, name)

    interp._interpreter, executor._init_args_hst = Bounded(), init_args
    try:
        yield
    finally:
        interp._interpreter, executor._init_args_hst = real, init


def triton_runtime_modules() -> list[types.ModuleType]:
    """Triton's modules an interpreted launch runs through: the interpreter (GridExecutor,
    InterpretedFunction, FunctionRewriter, _patch_lang) and the jit runtime (KernelInterface,
    JITFunction)."""
    return [_api("triton.runtime.interpreter"), _api("triton.runtime.jit")]


def triton_rewritten_functions() -> dict[Any, Any]:
    """The interpreter's cache of recompiled functions: a jit function's Python function -> what
    its source compiled to, which every later launch or device call runs (triton 3.9:
    ``InterpretedFunction.rewritten_fn``, filled by ``InterpretedFunction.rewrite``)."""
    return _api("triton.runtime.interpreter", "InterpretedFunction", "rewritten_fn")


def triton_rewriter_function(obj: Any) -> types.FunctionType | None:
    """The function whose source an interpreted kernel recompiles when it runs, if ``obj`` is
    exactly an InterpretedFunction whose rewriter is exactly Triton's FunctionRewriter."""
    rewriter = vars(obj).get("rewriter") if type(obj) is triton_kernel_types()[1] else None
    if type(rewriter) is not _api("triton.runtime.interpreter", "FunctionRewriter"):
        return None
    fn = vars(rewriter).get("fn")
    return fn if type(fn) is types.FunctionType else None


def jit_kernel_function(obj: Any) -> types.FunctionType | None:
    """The Python function a ``@triton.jit`` kernel was made from, if ``obj``'s type is exactly
    Triton's JITFunction or InterpretedFunction (never a subclass or another KernelInterface);
    read from the instance's own dict, so no property or ``__getattr__`` of anyone else runs."""
    if not any(type(obj) is kind for kind in triton_kernel_types()):
        return None
    fn = vars(obj).get("fn")    # (triton 3.9: JITCallable.__init__ / InterpretedFunction.__init__)
    return fn if type(fn) is types.FunctionType else None


def operator_names() -> frozenset[str]:
    """The qualified names ("ns::op") of every operator the dispatcher knows now."""
    return frozenset(_api("torch._C", "_dispatch_get_all_op_names")())


def library_registrations() -> frozenset[str]:
    """What Python registered on operators so far, as "ns::op/what": torch.library's kernels
    ("ns::op/<dispatch key>", from its ``_impls``: "ns/op/key") and the fake kernels and
    torch-dispatch rules of its simple registry ("ns::op/fake", "ns::op/torch_dispatch")."""
    # torch/library.py Library.impl records "ns/op/key" in the module's _impls;
    # torch/_library/simple_registry.py keeps a SimpleOperatorEntry per qualname (2.11 to 2.15)
    out = set()
    for key in _api("torch.library", "_impls"):
        ns, _, rest = key.partition("/")
        op, _, dispatch = rest.rpartition("/")
        out.add(f"{ns}::{op}/{dispatch}")
    for name, entry in _api("torch._library.simple_registry", "singleton", "_data").items():
        if entry.fake_impl.kernel is not None:
            out.add(f"{name}/fake")
        if getattr(entry.torch_dispatch_rules, "_data", None):
            out.add(f"{name}/torch_dispatch")
    return frozenset(out)


PYTHON_KERNEL_TABLES = ("py_kernels", "python_key_table", "functorch_table")


def python_kernels() -> frozenset[tuple[str, str, str]]:
    """The Python kernels on every operator object created so far (overloads and higher-order
    operators under ``torch.ops``), as (operator, "table[key]", the kernel's module): what
    ``py_impl`` or a write into an operator's ``python_key_table`` adds (torch/_ops.py
    OperatorBase, 2.11 to 2.15)."""
    base, packet = _api("torch._ops", "OperatorBase"), _api("torch._ops", "OpOverloadPacket")
    found = set()
    for space in list(vars(torch.ops).values()):
        for value in list(getattr(space, "__dict__", {}).values()):
            ops = [value] if isinstance(value, base) else (
                [v for v in list(vars(value).values()) if isinstance(v, base)]
                if isinstance(value, packet) else [])
            for op in ops:
                for table in PYTHON_KERNEL_TABLES:
                    for key, fn in list(getattr(op, table, {}).items()):
                        while isinstance(fn, functools.partial):   # torch's own higher-order
                            fn = fn.func                           # ops register partials
                        module = getattr(fn, "__module__", None) or type(fn).__module__
                        found.add((str(op), f"{table}[{getattr(key, '__name__', key)}]", str(module)))
    return frozenset(found)


@contextlib.contextmanager
def jitted_helpers_in_python(kernel: Any) -> Iterator[None]:
    """While open, an interpreted ``kernel`` may call Triton's jitted helpers (``tl.max``, ``tl.sum``)."""
    # triton decides at import time whether its helpers are interpreted; if it was imported before
    # TRITON_INTERPRET=1 was set, calling them from an interpreted kernel raises "Cannot call
    # @triton.jit'd outside of the scope of a kernel". Such calls then run their Python body, which
    # is what the interpreter does. A compiled kernel (on a GPU) needs nothing.
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        yield
        return
    saved = JITFunction.__call__
    JITFunction.__call__ = lambda self, *args, **kwargs: self.fn(*args, **kwargs)  # type: ignore[method-assign]
    try:
        yield
    finally:
        JITFunction.__call__ = saved  # type: ignore[method-assign]


def triton_target(target: Any = None) -> Any:
    """A triton GPUTarget from None (this GPU, else sm_90), "cuda:80", "hip:gfx942" or a GPUTarget."""
    from triton.backends.compiler import GPUTarget

    if isinstance(target, GPUTarget):
        return target
    if target is None:
        try:
            if torch.cuda.is_available():
                import triton

                return triton.runtime.driver.active.get_current_target()
        except Exception:  # no usable driver: fall back on the default target
            pass
        return GPUTarget(*DEFAULT_TARGET)
    if isinstance(target, str):
        backend, _, arch = target.partition(":")
        if backend == "cuda" and arch.isdigit():
            return GPUTarget("cuda", int(arch), 32)
        if backend == "hip" and arch:
            return GPUTarget("hip", arch, 64)
    raise ValueError(
        f"target must be None, a GPUTarget, 'cuda:<sm>' or 'hip:<gfx>', got {target!r}"
    )


def jit_function(kernel_fn: Any) -> Any:
    """A compilable JITFunction from a @triton.jit kernel, an interpreted one, or a plain function."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel_fn, JITFunction):
        return kernel_fn
    # Under TRITON_INTERPRET=1 @triton.jit returns an InterpretedFunction, which ASTSource rejects
    # (no cache_key); its .fn is the raw Python function, which JITFunction wraps for compiling.
    raw = getattr(kernel_fn, "fn", kernel_fn)
    if not callable(raw):
        raise TypeError(
            f"expected a @triton.jit kernel or a Python function, got {type(kernel_fn).__name__}"
        )
    return JITFunction(raw)


def compile_triton(
    fn: Any,
    signature: dict[str, str],
    constexprs: dict[str, Any] | None,
    target: Any,
    options: dict[str, Any] | None = None,
    attrs: Any = None,
) -> dict[str, str]:
    """Run triton's compiler for ``target``; return the text stages (ttir, ttgir, llir, ptx/amdgcn)."""
    import triton
    from triton.compiler import ASTSource

    jit = jit_function(fn)
    constexprs = dict(constexprs or {})
    sig = dict(signature)
    for name in constexprs:  # triton 3.x wants constexpr parameters in the signature too
        sig.setdefault(name, "constexpr")
    missing = [a for a in getattr(jit, "arg_names", []) if a not in sig]
    if missing:
        raise ValueError(
            f"signature has no type for parameter(s) {missing} of {jit.__name__}; "
            "give e.g. {'x_ptr': '*fp32', 'n': 'i32'} and constexprs={'BLOCK': 1024}"
        )

    def run(*source_args: Any) -> dict[str, str]:
        compiled = triton.compile(
            ASTSource(jit, sig, constexprs, *source_args),
            target=triton_target(target),
            options=options or {"num_warps": 4},
        )
        return {k: v for k, v in compiled.asm.items() if isinstance(v, str)}

    if attrs is not None:
        try:  # Inductor's divisibility hints (16-byte aligned pointers) give vectorized loads
            return run(attrs)
        except Exception:  # an attrs format this triton does not take: compile without hints
            pass
    return run()


# -- exercise 15.1: a bug planted in one layer of Inductor ------------------------------------------
PLANT_LAYERS = ("decomposition", "lowering")


@contextlib.contextmanager
def planted_bug(layer: str, op: str) -> Iterator[None]:
    """Inside, ``aten.<op>`` is computed wrongly by one layer: its entry in Inductor's decomposition
    table (``x * 0.5 + 1``; aot_eager_decomp_partition uses the same table) or its lowering (as
    ``abs``). Caches are off inside, so no compiled code outlives the bug or hides it."""
    from torch._inductor import config, decomposition, lowering

    if layer not in PLANT_LAYERS:
        raise ValueError(f"layer must be one of {PLANT_LAYERS}, not {layer!r}")
    key = getattr(torch.ops.aten, op).default
    if layer == "decomposition":
        table: dict[Any, Any] = decomposition.decompositions

        def wrong(x: Any, *args: Any, **kwargs: Any) -> Any:
            return x * 0.5 + 1.0
    else:
        table, absolute = lowering.lowerings, lowering.lowerings[torch.ops.aten.abs.default]

        def wrong(x: Any, *args: Any, **kwargs: Any) -> Any:
            return absolute(x)
    # select_decomp_table() serves a functools.cache'd copy of the table: cleared on entry and exit
    copied = getattr(decomposition, "fast_random_decomps", None)
    clear = getattr(copied, "cache_clear", lambda: None)
    missing = object()
    old = table.get(key, missing)
    table[key] = wrong
    clear()
    try:
        with config.patch(force_disable_caches=True):
            yield
    finally:
        if old is missing:
            del table[key]
        else:
            table[key] = old
        clear()


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

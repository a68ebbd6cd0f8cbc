"""Triton's compiler and runtime internals, and Inductor's Triton kernels: the interpreter switch,
kernel types, GPU targets, compiling for a target, and loading kernel sources (users:
labkit.capture.triton, labkit.compiler's Triton codegen, exercises, grading's harness_ops and
shape71). Guards of the Triton interpreter belong here too."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from labkit._torch.base import TorchAPIError, _api

DEFAULT_TARGET = ("cuda", 90, 32)  # an H100 (sm_90), the GPU the course's recordings come from


# -- Inductor's Triton kernels: loaded from their source, found live, their IR -------------------
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


# -- guards of the Triton interpreter (what grading checks an interpreted launch with) ------------
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
    real, init, run = interp._interpreter, executor._init_args_hst, executor.__call__
    ranges: list[tuple[int, int]] = []
    alive: list[Any] = []           # the launch's storages, held while their ranges are allowed
    busy: list[bool] = []           # a launch is running

    def init_args(self: Any, args_dev: Any, kwargs: Any) -> Any:
        storages = [a.untyped_storage() for a in [*args_dev, *kwargs.values()] if isinstance(a, torch.Tensor)]
        alive[:] = storages
        ranges[:] = [(s.data_ptr(), s.data_ptr() + s.nbytes()) for s in storages if s.nbytes()]
        return init(self, args_dev, kwargs)

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if busy:                      # a launch from inside a kernel (red team 10, S2)
            raise OutOfBounds("a Triton kernel launched from inside a kernel")
        busy.append(True)
        try:
            return run(self, *args, **kwargs)
        finally:
            busy.clear()
            ranges.clear()
            alive.clear()

    def check(ptrs: Any, mask: Any, itemsize: int, *same: Any) -> None:
        # the interpreter pairs the i-th address with the i-th mask (and value) element, flat and
        # unchecked: a mask of another shape (``.T`` of a 3-d value swaps two axes in its type and
        # reverses all in its data) left addresses unchecked that it then accessed (red team 12, B1)
        if any(np.shape(a) != np.shape(ptrs) for a in (mask, *same)):
            raise OutOfBounds("a Triton load or store whose mask or values are not shaped as its pointers")
        at = np.asarray(ptrs, dtype=np.uint64)[np.asarray(mask, dtype=bool)]
        ok = np.zeros(at.shape, dtype=bool)
        for lo, hi in ranges:
            ok |= (at >= lo) & (at <= np.uint64(hi - itemsize))       # no wrap past 2**64
        if not ok.all():
            raise OutOfBounds("a Triton kernel loaded or stored outside the tensors it was given")

    class Bounded:
        def load(self, ptrs: Any, mask: Any, other: Any, dtype: Any) -> Any:
            check(ptrs, mask, np.dtype(dtype).itemsize, other)
            return real.load(ptrs, mask, other, dtype)

        def store(self, ptrs: Any, value: Any, mask: Any) -> Any:
            check(ptrs, mask, np.asarray(value).dtype.itemsize, value)
            return real.store(ptrs, value, mask)

        def __getattr__(self, name: str) -> Any:    # atomics and the rest: kernels may not use them
            if name in ("atomic_cas", "atomic_rmw"):
                raise OutOfBounds(f"a Triton kernel used {name}, which this guard does not check")
            return getattr(real, name)

    interp._interpreter, executor._init_args_hst, executor.__call__ = Bounded(), init_args, launch
    try:
        yield
    finally:
        interp._interpreter, executor._init_args_hst, executor.__call__ = real, init, run

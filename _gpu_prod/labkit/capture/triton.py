"""Triton stages: TTIR, TTGIR, LLVM IR and PTX of every Triton kernel, with or without a GPU.

Triton lowers a ``@triton.jit`` Python function through MLIR dialects: TTIR (target-independent
tensor ops), TTGIR (the same ops with a GPU layout: warps, threads, shared memory), LLVM IR, then
PTX for NVIDIA (AMDGCN for AMD). ``triton.compile`` runs that whole pipeline for any GPU target
without needing the GPU itself (``labkit._torch.compile_triton``), so a CPU-only laptop can read
the IR of a kernel for an H100.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit import _torch
from labkit.trace import Kernel, Trace, environment, kinds_of

# trace stage kind -> key in triton's CompiledKernel.asm ("triton.ttir" -> "ttir")
IR_STAGES = tuple((kind, kind.split(".", 1)[1]) for kind in kinds_of("Triton IR"))
CPU_REASON = (
    "On a CPU, Inductor generates C++ kernels (see trace.kernels, language 'cpp'), not Triton, so "
    "there is no Triton IR to show here. Try labkit.triton_stages(kernel, signature, constexprs) "
    "on a hand-written @triton.jit kernel (it compiles for an H100 without one), or open a GPU "
    "recording: labkit.Trace.from_json('figures/recordings/<name>.json')."
)


def add_ir_stages(
    trace: Trace, asm: dict[str, str], name: str, frame: str, meta: dict[str, Any]
) -> None:
    """Append the four triton.* stages of one kernel (missing ones say why)."""
    for kind, key in IR_STAGES:
        text = asm.get(key)
        stage_meta = {"kernel": name, **meta}
        if key == "ptx" and text is None and "amdgcn" in asm:
            text, stage_meta["language"] = asm["amdgcn"], "text"  # AMD targets end in AMDGCN
        title = f"{key.upper()} of {name}"
        if text is None:
            trace.missing(
                kind,
                title,
                f"triton produced no {key} for this target",
                frame=frame,
                meta=stage_meta,
            )
        else:
            trace.add(kind, title, text, frame=frame, meta=stage_meta)


def triton_stages(
    kernel_fn: Any,
    signature: dict[str, str],
    constexprs: dict[str, Any] | None = None,
    target: Any = None,
    options: dict[str, Any] | None = None,
) -> Trace:
    """A Trace with the TTIR/TTGIR/LLIR/PTX of a hand-written @triton.jit kernel built for ``target``."""
    jit = _torch.jit_function(kernel_fn)
    tgt = _torch.triton_target(target)
    name = getattr(jit, "__name__", "kernel")
    trace = Trace(fn_name=name, backend="triton", env=environment())
    trace.env["target"] = f"{tgt.backend}:{tgt.arch}"
    meta = {"target": trace.env["target"], "options": dict(options or {"num_warps": 4})}
    try:
        import inspect

        source = inspect.getsource(jit.fn)
    except (OSError, TypeError):
        source = ""
    trace.kernels.append(
        Kernel(
            name=name,
            language="triton",
            source=source,
            producer="user",
            meta={"signature": dict(signature), "constexprs": dict(constexprs or {})},
        )
    )
    asm = _torch.compile_triton(jit, signature, constexprs, tgt, options)
    add_ir_stages(trace, asm, name, "", meta)
    return trace


def inductor_kernel_asm(kernel: Kernel, on_gpu: bool) -> tuple[dict[str, str], str]:
    """(asm, how) of an Inductor Triton kernel: what ran on this GPU, else a fresh compile of it."""
    if on_gpu:
        tuner = _torch.live_triton_kernel(kernel.name, kernel.source)
        asm = _torch.compiled_triton_asm(tuner) if tuner is not None else None
        if asm:
            return asm, "the binary Inductor launched on this GPU"
    tuner = _torch.triton_kernel_from_source(kernel.source)
    meta = dict(tuner.triton_meta)
    constants = dict(meta.get("constants") or {})
    cfg = tuner.configs[0] if getattr(tuner, "configs", None) else None
    options: dict[str, Any] = {"num_warps": 4}
    if cfg is not None:
        constants.update(cfg.kwargs)
        options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    attrs = (meta.get("configs") or [None])[0]
    target = _torch.triton_target(None)
    asm = _torch.compile_triton(tuner.fn, meta["signature"], constants, target, options, attrs)
    return (
        asm,
        f"recompiled from Inductor's source for {target.backend}:{target.arch} (first config)",
    )


def build(trace: Trace, on_gpu: bool, progress: Callable[[str], None] | None = None) -> None:
    """Add triton.* stages for every Inductor Triton kernel; on CPU, say why there are none."""
    kernels = [k for k in trace.kernels if k.language == "triton"]
    if not kernels:
        for kind, key in IR_STAGES:
            trace.missing(
                kind,
                key.upper(),
                CPU_REASON
                if not on_gpu
                else "Inductor generated no Triton kernel for this function",
            )
        return
    for k in kernels:
        if progress is not None:
            progress("triton.ttir")
        try:
            asm, how = inductor_kernel_asm(k, on_gpu)
        except Exception as e:  # one kernel's IR failing must not lose the others
            for kind, key in IR_STAGES:
                trace.missing(
                    kind,
                    f"{key.upper()} of {k.name}",
                    f"could not get Triton IR for {k.name}: {type(e).__name__}: {e}",
                    frame=k.frame,
                )
            continue
        add_ir_stages(trace, asm, k.name, k.frame, {"from": how, "graph": k.meta.get("graph")})

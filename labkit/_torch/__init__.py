"""Every private torch and Triton API labkit touches, each behind one small named function.

This package is the only part of labkit that reaches into ``torch._*``, private attributes of
torch objects, or Triton's compiler/runtime internals (``ASTSource``, ``GPUTarget``,
``JITFunction``, the ``TRITON_INTERPRET`` switch). capture, compiler, explore, perf, examples and
grading all come here; ``tests/test_layering.py`` fails on any private name elsewhere. Its
submodules group the functions by user: ``dynamo`` (capture), ``inductor`` (the compiler),
``guards`` (grading) and ``triton`` (Triton and Inductor's Triton kernels), over ``base`` (the
lookup and its error); every name is re-exported here, so ``_torch.counters`` is the way to call
them. A torch release that moves one of these breaks exactly one function, and the error says
which API moved and on which torch version, instead of an AttributeError deep inside a capture.
Checked against torch 2.11, 2.13 and 2.15 (Triton 3.6 and 3.9).
"""

from __future__ import annotations

from labkit._torch.base import (
    TorchAPIError,
    _api,
    _moved,
)
from labkit._torch.dynamo import (
    CHROMIUM_EVENT,
    DYNAMO_CALLS_BACKEND,
    DYNAMO_LOGGER,
    DYNAMO_MODULES,
    RESUME_PREFIX,
    TRACE_LOGGER,
    artifact_loggers,
    artifact_name,
    called_by_dynamo,
    compile_counter,
    compiled_codes,
    copy_dynamic_marks,
    counters,
    current_compile_id,
    decompiler,
    dynamo_compiling,
    install_dynamo_patches,
    interned_files,
    is_c_extension_module,
    is_dynamo_attribute,
    lookup_backend,
    mark_dynamic,
    original_callable,
    register_bytecode_hook,
    reset_compile_state,
    set_logs,
    writing_torch_trace,
)
from labkit._torch.guards import (
    PYTHON_HANDLERS,
    PYTHON_KERNEL_TABLES,
    compile_entry_points,
    dispatch_mode_base,
    library_registrations,
    operator_names,
    python_handlers,
    python_kernels,
    storage_weak_ref,
)
from labkit._torch.inductor import (
    INDUCTOR_LOGGER,
    PLANT_LAYERS,
    aot_module_simplified,
    computation_dtype,
    core_aten_decompositions,
    cuda_properties,
    cudagraph_dynamic_shape_warn_limit,
    custom_graph_pass_base,
    default_partition,
    fresh_compile_config,
    graph_partition,
    inductor_backend,
    kernel_post_grad_nodes,
    make_boxed_func,
    make_fx,
    planted_bug,
    post_grad_custom_post_pass,
    promoted_dtype,
    run_and_get_code,
)
from labkit._torch.triton import (
    DEFAULT_TARGET,
    OutOfBounds,
    _driver_or_none,
    assert_on_device,
    compile_triton,
    compiled_triton_asm,
    interpret_triton_without_gpu,
    jit_function,
    jit_kernel_function,
    jitted_helpers_in_python,
    live_triton_kernel,
    module_from_source,
    triton_bounded_memory,
    triton_interpreter,
    triton_interpreter_names,
    triton_kernel_from_source,
    triton_kernel_types,
    triton_rewriter_function,
    triton_rewritten_functions,
    triton_runtime_modules,
    triton_target,
)

__all__ = [
    "CHROMIUM_EVENT", "DEFAULT_TARGET", "DYNAMO_CALLS_BACKEND", "DYNAMO_LOGGER",
    "DYNAMO_MODULES", "INDUCTOR_LOGGER", "OutOfBounds", "triton_bounded_memory", "PLANT_LAYERS", "PYTHON_HANDLERS",
    "PYTHON_KERNEL_TABLES", "RESUME_PREFIX", "TRACE_LOGGER", "TorchAPIError", "_api",
    "_driver_or_none", "_moved", "aot_module_simplified", "artifact_loggers", "artifact_name",
    "assert_on_device", "called_by_dynamo", "compile_counter", "compile_entry_points",
    "compile_triton", "compiled_codes", "compiled_triton_asm", "computation_dtype",
    "copy_dynamic_marks", "core_aten_decompositions", "counters", "cuda_properties",
    "cudagraph_dynamic_shape_warn_limit", "current_compile_id", "custom_graph_pass_base",
    "decompiler", "default_partition", "dispatch_mode_base", "dynamo_compiling",
    "fresh_compile_config", "graph_partition", "inductor_backend", "install_dynamo_patches",
    "interned_files", "interpret_triton_without_gpu", "is_c_extension_module",
    "is_dynamo_attribute", "jit_function", "jit_kernel_function", "jitted_helpers_in_python",
    "kernel_post_grad_nodes", "library_registrations", "live_triton_kernel", "lookup_backend",
    "make_boxed_func", "make_fx", "mark_dynamic", "module_from_source", "operator_names",
    "original_callable", "planted_bug", "post_grad_custom_post_pass", "promoted_dtype",
    "python_handlers", "python_kernels", "register_bytecode_hook", "reset_compile_state",
    "run_and_get_code", "set_logs", "storage_weak_ref", "triton_interpreter",
    "triton_interpreter_names", "triton_kernel_from_source", "triton_kernel_types",
    "triton_rewriter_function", "triton_rewritten_functions", "triton_runtime_modules",
    "triton_target", "writing_torch_trace",
]

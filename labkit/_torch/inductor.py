"""Private torch APIs of the compiler: AOTAutograd, decompositions, torch's type rules, Inductor's
config, provenance and output code, and exercise 15.1's planted bug (users: labkit.compiler,
labkit.backends, capture's Inductor hooks, perf, grading's nbcheck)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from labkit._torch.base import _api, _moved

INDUCTOR_LOGGER = "torch._inductor"  # e.g. "skipping cudagraphs due to ..."


def inductor_backend(mode: str | None, options: dict[str, Any] | None, dynamic: bool | None) -> Any:
    """The backend torch.compile builds for backend="inductor" (so mode/options act the same)."""
    try:
        wrapper = torch._TorchCompileInductorWrapper  # type: ignore[attr-defined]
    except AttributeError as e:
        raise _moved("torch._TorchCompileInductorWrapper", e) from e
    return wrapper(mode, options, dynamic)


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

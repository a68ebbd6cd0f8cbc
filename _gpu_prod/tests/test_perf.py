"""labkit.perf: notebook 11's examples. The CPU parts run here; the GPU recorders run with CUDA only.

On the GPU machine: ``python -m pytest tests/test_perf.py -m gpu`` checks that Inductor really picks
the strategies the notebook explains (persistent, looped, split, Welford) and fuses the epilogue into
the max-autotune template.
"""

from __future__ import annotations

import re

import pytest
import torch

from labkit import perf
from labkit.trace import Trace

CUDA = torch.cuda.is_available()


@pytest.mark.parametrize(
    ("outputs", "reduced", "want"),
    [
        (4096, 512, "persistent"),
        (4096, 1024, "persistent"),
        (4096, 1025, "looped"),
        (1024, 8192, "looped"),
        (1, 1 << 24, "split"),
        (100, 16384, "split"),  # fewer outputs than 2 x 132 SMs and > 8192 per output
        (264, 16384, "looped"),  # exactly 2 x SMs outputs: enough parallelism, no split
        (1, 8192, "looped"),  # at the split threshold: not split
    ],
)
def test_reduction_choice_follows_inductors_thresholds(outputs, reduced, want):
    kind, why = perf.reduction_choice(outputs, reduced, num_sm=132)
    assert kind == want
    assert str(reduced) in why or str(outputs) in why


def test_reduction_cases_cover_every_strategy():
    kinds = set()
    for _, shape, _ in perf.REDUCTION_CASES:
        outputs, reduced = (1, shape[0]) if len(shape) == 1 else shape
        kinds.add(perf.reduction_choice(outputs, reduced, 132)[0])
    assert kinds == {"persistent", "looped", "split"}


def test_checkpointing_keeps_one_activation_instead_of_five():
    x, w = perf.checkpoint_inputs("cpu", n=32)
    one = x.numel() * x.element_size()
    eager = {fn.__name__: perf.eager_saved_bytes(fn, (x, w)) for fn in (perf.net, perf.net_checkpointed)}
    compiled = {}
    for fn in (perf.net, perf.net_checkpointed):
        torch.compiler.reset()
        out = torch.compile(fn, backend="aot_eager")(x, w)
        compiled[fn.__name__] = perf.saved_bytes(out, (x, w))
        out.backward()
        # the compiled function still computes the same gradient
        gx = x.grad.clone()
        x.grad = w.grad = None
        fn(x, w).backward()
        assert torch.allclose(gx, x.grad, rtol=1e-4, atol=1e-5)
        x.grad = w.grad = None
    assert eager == compiled == {"net": 5 * one, "net_checkpointed": one}


def test_saved_bytes_counts_a_storage_once_and_skips_inputs():
    x = torch.randn(16, requires_grad=True)
    out = torch.compile(lambda t: (t * 2).sin() + (t * 2).cos(), backend="aot_eager")(x)
    assert perf.saved_bytes(out, (x,)) <= 16 * 4  # at most the one t*2 buffer; x itself never counts


def test_wall_time_and_launches_on_cpu():
    args = perf.small_mlp_inputs("cpu")
    t = perf.wall_time(perf.small_mlp, args, "eager", calls=3, repeats=3)
    assert t.median_s > 0 and t.spread_s >= 0 and t.device == "cpu"
    assert perf.launches(perf.small_mlp, args) == {}  # no GPU: no kernel launches to count


def test_inductor_messages_captures_cudagraph_skips_off_stderr(capfd):
    from torch._inductor import cudagraph_utils

    with perf.inductor_messages() as messages:
        cudagraph_utils.log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to a test")
    assert messages == ["skipping cudagraphs due to a test"]
    assert "skipping" not in capfd.readouterr().err


@pytest.mark.slow
def test_recorders_build_traces_on_cpu(tmp_path):
    """The record_gpu.py code path, on CPU tensors: each Trace survives a JSON round trip."""
    for name in ("cudagraphs", "checkpoint_memory"):
        trace = perf.RECORDERS[name]("cpu")
        trace.to_json(tmp_path / f"{name}.json")
        back = Trace.from_json(tmp_path / f"{name}.json")
        assert back.timings and back.meta == trace.meta
    assert back.meta["memory"]["compiled + checkpoint"]["saved_bytes"] == back.meta["activation_bytes"]


# -- on a GPU: what notebook 11 says about the recordings --------------------------------------------
def _numels(source: str) -> tuple[int, int | None]:
    x = re.search(r"\bxnumel = (\d+)", source)
    r = re.search(r"\br0?_?numel = (\d+)", source)
    return (int(x[1]) if x else 1), (int(r[1]) if r else None)


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_reductions_on_gpu_pick_each_strategy():
    trace = perf.reductions("cuda")
    kinds = {}
    for k in trace.kernels:
        kinds[_numels(k.source)] = (k.name.split("_")[1], "triton_helpers.welford" in k.source)
    assert kinds[(4096, 512)] == ("per", False)
    assert kinds[(1024, 8192)] == ("red", False)
    assert kinds[(512, 16384)] == ("red", True)  # looped var_mean: Welford
    assert kinds[(2048, 256)] == ("per", False)  # persistent var_mean: two passes, no Welford
    split = [key for key in kinds if key[0] * (key[1] or 1) == 1 << 24 and key[0] > 1]
    assert split, f"no split partial-sum kernel among {kinds}"


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_max_autotune_template_fuses_the_epilogue():
    trace = perf.matmul_autotune("cuda")
    tem = [k for k in trace.kernels if "tem" in k.name]
    assert tem and "tl.dot" in tem[0].source and "maximum" in tem[0].source


@pytest.mark.slow
@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cudagraphs_skip_a_mutated_input_and_partition_around_a_cpu_input():
    cases = perf.cudagraph_skips("cuda")
    mutated, host = cases["an input mutated in place"], cases["a CPU tensor input"]
    assert mutated["skips"] == 1 and "mutated inputs" in mutated["message"]
    assert "cudaGraphLaunch" not in mutated["launches"]
    if host["graph_partition"]:  # partitioned: the GPU piece is still replayed as a graph
        assert host["skips"] == 0 and host["launches"].get("cudaGraphLaunch") == 1
    else:
        assert host["skips"] == 1 and "cpu device" in host["message"]
    assert "distinct" in cases["a new input size each call"]["message"]

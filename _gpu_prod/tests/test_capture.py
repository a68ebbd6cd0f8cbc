"""labkit.explore on CPU: every real torch.compile stage lands in the Trace (structural checks only).

Each function is explored once (module-scoped fixtures) and many tests read that one Trace: a real
compile costs seconds on a 2-core machine. Checks are counts, op sets and markers, never whole-text
goldens: generated names carry UUIDs and bytecode offsets.
"""

from __future__ import annotations

import logging
import re
import types

import pytest
import torch

import labkit
from labkit import examples
from labkit.examples import mlp, sincos, toy_example
from labkit.orchestrate import explore
from labkit.trace import Trace

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def scaled(x):
    return torch.sin(x) * 2


def breaks_then_fails(a):
    x = a.sin()
    torch._dynamo.graph_break()
    return x @ torch.ones(3, 3)  # wrong inner dimension: Dynamo fails tracing the resume frame


def ok_kinds(trace: Trace, kind: str) -> list:
    return [s for s in trace.stage(kind) if s.ok]


@pytest.fixture(scope="module")
def toy() -> Trace:
    return explore(toy_example, *examples.toy_inputs(), timing=False)


@pytest.fixture(scope="module")
def mlp_trace() -> Trace:
    return explore(mlp, *examples.mlp_inputs(), timing=False)


@pytest.fixture(scope="module")
def sincos_trace() -> Trace:
    return explore(sincos, *examples.sincos_inputs(), timing=True)  # the one timed explore


@pytest.fixture(scope="module")
def recompiled() -> Trace:
    return explore(scaled, torch.randn(8), extra_inputs=[(torch.randn(9),)], timing=False)


# -- the toy example: graph break, resume function, two graphs, C++ kernels --------------------------
def test_toy_graphs_and_break(toy):
    assert toy.error is None
    assert len(ok_kinds(toy, "dynamo.graph")) >= 2
    assert len(toy.graph_breaks) == 1
    gb = toy.graph_breaks[0]
    assert gb.filename == examples.__file__
    assert gb.code == "if b.sum() < 0:"
    assert gb.lineno == toy_example.__code__.co_firstlineno + 2
    assert "Data-dependent" in gb.reason or "jump" in gb.reason
    assert "User code traceback" in gb.detail or "Explanation" in gb.detail


def test_toy_bytecode_has_resume_function(toy):
    originals = ok_kinds(toy, "bytecode.original")
    transformed = ok_kinds(toy, "bytecode.transformed")
    assert len(originals) == len(transformed) >= 2
    assert any(s.meta["resume"] for s in originals)
    assert any("torch_dynamo_resume_in_toy_example" in s.frame for s in transformed)
    first = transformed[0]
    assert any(n.startswith("__compiled_fn") for n in first.meta["calls"])
    assert any(n.startswith("__resume_at") for n in first.meta["calls"])
    assert "LOAD_GLOBAL" in first.meta["dis"] or "LOAD_" in first.text
    from labkit.capture.bytecode import canonical

    stable = canonical(" ".join(first.meta["calls"]))
    assert "__compiled_fn_" in stable and not re.search(r"[0-9a-f]{8}_[0-9a-f]{4}", stable)
    if first.meta["decompiled"]:  # depyf present here; the GPU machine has none
        assert "def " in first.meta["source"]
    else:
        assert "depyf" in first.meta["decompile_note"]


def test_toy_rewritten_frame_reads_as_python(toy):
    """The frame Dynamo rewrote at the break reads back as Python: graph call, if, resume calls."""
    import ast

    transformed = ok_kinds(toy, "bytecode.transformed")
    first = transformed[0]
    python = first.meta["python"]
    assert python, first.meta["python_note"]
    ast.parse(python)  # it is Python, not a listing
    assert "LOAD_" in first.meta["dis"] and "LOAD_" not in python  # dis stays one field away
    assert re.search(r"graph_out_0 = __compiled_fn_\d+\(a, b\)", python)
    cond = re.search(r"^    if graph_out_0\[(\d)\]:", python, re.M)
    assert cond, python
    # the jump tests the graph output that is the comparison b.sum() < 0
    graph = ok_kinds(toy, "dynamo.graph")[0]
    out = next(n for n in graph.nodes if n.op == "output")
    tested = next(n for n in graph.nodes if n.name == out.inputs[int(cond.group(1))])
    assert "lt" in tested.target
    assert len(re.findall(r"return __resume_at_\d+\(", python)) == 2  # one per side of the jump
    assert "else:" in python and "guards" in python
    for resume in transformed[1:]:  # a resume function: call its graph, return its output
        body = resume.meta["python"]
        ast.parse(body)
        assert re.search(r"graph_out_0 = __compiled_fn_\d+\(", body) and "return graph_out_0[0]" in body
        assert "if " not in body.split("):", 1)[1]


def test_readable_degrades_to_dis_with_reason():
    """Code the reader does not know (a loop, arithmetic) gives None and a reason, never a crash."""
    from labkit.capture.bytecode import readable, render

    def loop(xs):
        total = 0
        for x in xs:
            total += x
        return total

    source, note = readable(loop.__code__)
    assert source is None and "dis only" in note and "could not read" in note
    text, meta = render(loop.__code__, "transformed by Dynamo", rewritten=True)
    assert meta["python"] == "" and "FOR_ITER" in meta["dis"] and note in text

def test_toy_guards_and_nodes(toy):
    guards = ok_kinds(toy, "dynamo.guards")
    assert len(guards) == 2
    assert "TENSOR_MATCH" in guards[0].text
    graph = ok_kinds(toy, "dynamo.graph")[0]
    ops = {n.op for n in graph.nodes}
    assert {"placeholder", "call_function", "output"} <= ops
    abs_node = next(n for n in graph.nodes if n.target == "torch.abs")
    assert abs_node.shape == [1024] and abs_node.dtype == "float32"
    assert abs_node.source and "toy_example" not in abs_node.source  # "file.py:N  code"
    assert "torch.abs(a)" in abs_node.source


def test_toy_inductor_cpp_kernels_vectorized(toy):
    assert len(ok_kinds(toy, "aot.inference")) == 2
    assert [s.status for s in toy.stage("aot.joint")] == ["unavailable"]
    from labkit.capture.inductor import STAGES

    for kind in STAGES:
        assert len(ok_kinds(toy, kind)) == 2, kind
    assert len(toy.kernels) >= 2
    assert all(k.language == "cpp" for k in toy.kernels)
    assert any(k.meta["vectorized"] for k in toy.kernels)
    assert any("at::vec" in k.source or "Vectorized" in k.source for k in toy.kernels)
    first = toy.kernels[0]
    assert {"abs_1", "div"} <= set(first.origins)
    assert "aten.abs.default" in first.meta["ops"]


def test_cpu_triton_stages_unavailable_with_reason(toy):
    for kind in ("triton.ttir", "triton.ttgir", "triton.llir", "triton.ptx"):
        (stage,) = toy.stage(kind)
        assert stage.status == "unavailable"
        assert "C++" in stage.text and "triton_stages" in stage.text


# -- the MLP: training graphs, saved activations, backward kernels -----------------------------------
def test_mlp_joint_forward_backward(mlp_trace):
    assert mlp_trace.error is None
    for kind in ("aot.joint", "aot.forward", "aot.backward"):
        assert len(ok_kinds(mlp_trace, kind)) == 1, kind
    assert mlp_trace.stage("aot.inference")[0].status == "unavailable"
    fw = ok_kinds(mlp_trace, "aot.forward")[0]
    saved = fw.meta["saved_activations"]
    assert {"relu", "relu_1"} <= set(saved)
    assert fw.meta["saved_count"] == len(saved)
    bw = ok_kinds(mlp_trace, "aot.backward")[0]
    assert any(n.op == "placeholder" and n.name.startswith("tangents") for n in bw.nodes)
    assert any("mm" in t for t in bw.meta["ops"])
    mm = next(n for n in fw.nodes if n.target == "aten.mm.default")
    assert mm.shape == [32, 128] and mm.dtype == "float32" and "examples.py:" in mm.source


def test_mlp_backward_kernels(mlp_trace):
    roles = [s.meta["graph"] for s in ok_kinds(mlp_trace, "inductor.output_code")]
    assert roles == ["forward", "backward"]
    backward = [k for k in mlp_trace.kernels if k.meta["graph"] == "backward"]
    assert backward, "no backward kernels"
    assert any(k.origins for k in backward)  # provenance works for backward graphs too
    assert any(
        "threshold_backward" in k.name or "aten.le.Scalar" in k.meta["ops"] for k in backward
    )


# -- recompiles, fusion, timings ------------------------------------------------------------------
def test_recompile_recorded_with_reason(recompiled):
    (entry,) = recompiled.meta["recompiles"]
    assert entry["frame"].startswith("0/1")
    assert "size mismatch" in entry["reasons"][0]
    guards = ok_kinds(recompiled, "dynamo.guards")
    assert len(guards) == 2
    assert guards[1].meta["recompile_reasons"] == entry["reasons"]
    assert "Recompiled because" in guards[1].text


def test_sincos_fuses_into_one_kernel(sincos_trace):
    (kernel,) = sincos_trace.kernels
    assert {"aten.sin.default", "aten.cos.default", "aten.add.Tensor"} <= set(kernel.meta["ops"])
    assert len(kernel.origins) == 5
    (fusion,) = ok_kinds(sincos_trace, "inductor.fusion")
    assert fusion.meta["kernels"] == {kernel.name: kernel.origins}
    assert "1 kernel(s)" in fusion.text and "one kernel computes them all" in fusion.text


def test_sincos_timings(sincos_trace):
    labels = {t.label for t in sincos_trace.timings}
    assert {
        "eager",
        "compiled",
        "compile + first call",
        "compile: dynamo",
        "compile: inductor",
    } <= labels
    timed = {t.label: t for t in sincos_trace.timings}
    assert timed["eager"].median_s > 0 and timed["eager"].meta["threads"] == 1
    assert sincos_trace.env["threads"] == 1


# -- JSON, errors, state hygiene --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["toy", "mlp_trace"])
def test_json_round_trip_exact(name, request, tmp_path):
    trace = request.getfixturevalue(name)
    path = tmp_path / "t.json"
    trace.to_json(path)
    back = Trace.from_json(path)
    assert back == trace
    assert back.to_json() == trace.to_json()


def test_labkit_explore_is_a_plain_function():
    import labkit.orchestrate  # binding the submodule must not shadow the function

    assert isinstance(labkit.explore, types.FunctionType) and labkit.explore.__wrapped__ is explore
    with pytest.raises(TypeError, match="needs a function"):
        labkit.explore(42)


def test_bad_inputs_fail_before_compiling():
    with pytest.raises(TypeError, match="needs a function"):
        explore(42, torch.randn(3))
    with pytest.raises(TypeError, match="do not fit toy_example"):
        explore(toy_example, torch.randn(3))
    with pytest.raises(TypeError, match="generator"):
        explore(lambda x: x, (i for i in range(3)))
    with pytest.raises(TypeError, match=r"input 0\[1\].*object"):
        explore(lambda x: x, [torch.randn(2), object()])
    with pytest.raises(TypeError, match=r"do not fit Linear\(input"):  # nn.Module: forward's
        explore(torch.nn.Linear(3, 2), torch.randn(3), torch.randn(3))
    with pytest.raises(TypeError, match="unexpected keyword"):
        explore(toy_example, torch.randn(3), torch.randn(3), bogus=True)
    with pytest.raises(ValueError, match="backend must be one of"):
        explore(toy_example, torch.randn(3), torch.randn(3), backend="tvm")


def _logging_state() -> list:
    from labkit.capture import LOG_ARTIFACTS, _torch

    loggers = [logging.getLogger(_torch.TRACE_LOGGER), *_torch.artifact_loggers(LOG_ARTIFACTS)]
    return [(lg.name, lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]


def test_partial_trace_on_failure_and_state_restored():
    import torch._dynamo.convert_frame as convert_frame
    import torch._inductor.config as inductor_config

    torch.compile(lambda x: x + 1, backend="eager")(torch.randn(2))  # torch's own first-use setup
    before = _logging_state()
    hooks = len(getattr(convert_frame, "_bytecode_hooks", {}))
    caches, post_pass = (
        inductor_config.force_disable_caches,
        inductor_config.post_grad_custom_post_pass,
    )
    said: list[str] = []
    trace = explore(breaks_then_fails, torch.randn(4, 4), timing=False, progress=said.append)
    assert trace.error and "RuntimeError" in trace.error
    assert said[-1] == f"error: {trace.error}"
    failed = [s for s in trace.stages if s.status == "error"]
    assert len(failed) == 1 and failed[0].kind == "dynamo.graph"
    assert "torch_dynamo_resume_in_breaks_then_fails" in failed[0].frame
    assert len(ok_kinds(trace, "inductor.output_code")) == 1  # the first graph still compiled
    assert _logging_state() == before
    assert len(getattr(convert_frame, "_bytecode_hooks", {})) == hooks
    assert inductor_config.force_disable_caches == caches
    assert inductor_config.post_grad_custom_post_pass is post_pass
    with pytest.raises(Exception, match="fake tensor|reduction dim"):
        explore(breaks_then_fails, torch.randn(4, 4), timing=False, raise_errors=True)
    assert _logging_state() == before


def test_fullgraph_error_still_shows_the_break():
    trace = explore(
        toy_example, *examples.toy_inputs(), backend="eager", fullgraph=True, timing=False
    )
    assert trace.error and trace.error.startswith("Unsupported")
    (gb,) = trace.graph_breaks
    assert gb.code == "if b.sum() < 0:" and gb.filename == examples.__file__
    graph_stages = trace.stage("dynamo.graph")
    assert [s.status for s in graph_stages] == ["error"]
    assert all(
        s.status == "unavailable" and "AOTAutograd" in s.text for s in trace.stage("aot.joint")
    )


def test_capture_bug_is_reported_not_hidden(monkeypatch):
    from labkit.capture import dynamo

    def broken(*args, **kwargs):
        raise KeyError("a labkit bug")

    monkeypatch.setattr(dynamo, "build", broken)
    trace = explore(scaled, torch.randn(4), backend="eager", timing=False)
    assert trace.error.startswith("labkit could not build every stage: KeyError")
    assert "a labkit bug" in trace.meta["capture_error"]
    assert any(s.ok for s in trace.stage("bytecode.original"))  # what was built is kept
    with pytest.raises(KeyError):
        explore(scaled, torch.randn(4), backend="eager", timing=False, raise_errors=True)


def test_progress_reports_stage_kinds():
    seen: list[str] = []
    explore(lambda x: x.cos() + 1, torch.randn(4), timing=False, progress=seen.append)
    assert seen[0] == "dynamo.graph" and seen[-1] == "done"
    assert {"aot.inference", "inductor.ir_pre_fusion", "inductor.output_code"} <= set(seen)
    from labkit.capture import PROGRESS_STEPS

    assert set(seen) <= set(PROGRESS_STEPS)


def test_labkit_backend_or_clear_error():
    import labkit.compiler as compiler

    if not hasattr(compiler, "make_backend"):
        with pytest.raises(RuntimeError, match="make_backend"):
            explore(scaled, torch.randn(4), backend="labkit", timing=False)
        return
    trace = explore(scaled, torch.randn(4), backend="labkit", timing=False)
    assert trace.error is None, trace.error
    assert ok_kinds(trace, "dynamo.graph") and ok_kinds(trace, "bytecode.transformed")
    assert ok_kinds(trace, "aot.inference") and ok_kinds(trace, "labkit.cpp")
    assert not trace.stage("inductor.output_code")
    assert {s.frame for s in trace.stages} == {"0/0 scaled"}  # one frame label for every stage
    assert all(k.producer == "labkit" and k.frame == "0/0 scaled" for k in trace.kernels)
    assert any(n.op == "call_function" for n in ok_kinds(trace, "aot.inference")[0].nodes)


# -- Triton IR without a GPU ------------------------------------------------------------------------
def _add_kernel_source():
    import triton
    import triton.language as tl

    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(
            out_ptr + offs,
            tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
            mask=mask,
        )

    return triton, add_kernel


SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def test_triton_stages_for_gpu_target_on_cpu():
    triton, add_kernel = _add_kernel_source()
    trace = labkit.triton_stages(triton.jit(add_kernel), SIG, {"BLOCK": 1024}, target="cuda:90")
    texts = {s.kind: s.text for s in trace.stages if s.ok}
    assert set(texts) == {"triton.ttir", "triton.ttgir", "triton.llir", "triton.ptx"}
    assert "tt.func" in texts["triton.ttir"] and "tt.load" in texts["triton.ttir"]
    assert "ttg.blocked" in texts["triton.ttgir"] or "#blocked" in texts["triton.ttgir"]
    assert "define" in texts["triton.llir"]
    assert ".target sm_90" in texts["triton.ptx"]
    assert trace.kernels[0].producer == "user" and "tl.arange" in trace.kernels[0].source
    assert Trace.from_json(trace.to_json()) == trace


def test_triton_stages_interpreted_function(monkeypatch):
    triton, add_kernel = _add_kernel_source()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    interpreted = triton.jit(add_kernel)
    trace = labkit.triton_stages(interpreted, SIG, {"BLOCK": 256}, target="cuda:80")
    assert ".target sm_80" in trace.stage("triton.ptx")[0].text
    with pytest.raises(ValueError, match="no type for parameter"):
        labkit.triton_stages(interpreted, {"x_ptr": "*fp32"}, {"BLOCK": 256})


def test_inductor_triton_kernel_ir_without_gpu(monkeypatch):
    """The GPU path's fallback (Inductor's Triton source -> IR for sm_90), run on CPU.

    Inductor writes Triton for the CPU device when cpu_backend="triton"; it only asks triton's
    driver for a target, so a stub driver lets codegen run without a GPU (nothing is launched).
    """
    import triton
    from torch._inductor.utils import get_code
    from triton.backends.compiler import GPUTarget

    from labkit.capture import inductor
    from labkit.capture import triton as capture_triton

    class StubDriver:
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    if not hasattr(triton.runtime.driver, "_active"):
        pytest.skip("this triton keeps its active driver elsewhere")
    monkeypatch.setattr(triton.runtime.driver, "_active", StubDriver())
    import torch._inductor.config as inductor_config

    torch.compiler.reset()
    with inductor_config.patch(cpu_backend="triton", force_disable_caches=True):
        code = get_code(torch.compile(sincos), torch.randn(1000))
    code = code[0] if isinstance(code, list) else code
    run = inductor.Run("0/0", output_code=code)
    (kernel,) = inductor.kernels_of(run, "0/0 sincos")
    assert kernel.language == "triton" and "@triton.jit" in kernel.source
    assert kernel.origins == ["sin", "pow_1", "cos", "pow_2", "add"]  # from the wrapper comment
    trace = Trace(fn_name="sincos", backend="inductor", kernels=[kernel])
    capture_triton.build(trace, on_gpu=False)
    ptx = trace.stage("triton.ptx")
    assert [s.status for s in ptx] == ["ok"] and ".target sm_90" in ptx[0].text
    assert "recompiled" in ptx[0].meta["from"]
    assert "tt.load" in trace.stage("triton.ttir")[0].text


def test_gpu_path_reads_the_launched_binary(monkeypatch):
    """On a GPU the IR comes from the kernel Inductor launched; simulated with a stand-in module."""
    from types import ModuleType, SimpleNamespace

    from torch._inductor.codecache import PyCodeCache

    from labkit.capture import triton as capture_triton
    from labkit.trace import Kernel

    def tuner(body: str, ptx: str) -> SimpleNamespace:
        asm = {
            "ttir": "module {}",
            "ttgir": "#blocked",
            "llir": "define void",
            "ptx": ptx,
            "cubin": b"\x7fELF",
        }
        launcher = SimpleNamespace(bin=SimpleNamespace(asm=asm))
        return SimpleNamespace(fn=SimpleNamespace(src=body), launchers=[launcher])

    older, newer = ModuleType("older"), ModuleType("newer")
    name = "triton_poi_fused_mul_0"
    setattr(older, name, tuner(f"def {name}(x):\n    pass", ".target sm_90a // ours"))
    setattr(newer, name, tuner(f"def {name}(y):\n    pass", ".target sm_90a // other graph"))
    monkeypatch.setattr(PyCodeCache, "modules", [older, newer])
    source = f"@triton.jit\ndef {name}(x):\n    pass\n"
    trace = Trace(
        fn_name="f",
        backend="inductor",
        kernels=[Kernel(name, "triton", source, ["mul"], frame="0/0 f")],
    )
    capture_triton.build(trace, on_gpu=True)
    (ptx,) = trace.stage("triton.ptx")
    assert ptx.ok and ptx.text.endswith("// ours") and "launched" in ptx.meta["from"]
    assert [s.ok for s in trace.stages] == [True] * 4
    assert Trace.from_json(trace.to_json()) == trace  # the cubin (bytes) stays out


@pytest.mark.parametrize("n", [1, 1024, 5000])
def test_hand_written_sincos_kernel_matches_eager_and_compiles_for_a_gpu(n):
    """labkit.examples.sincos_kernel: notebook 07 shows it, benchmarks/bench_gpu.py races it."""
    import triton

    from labkit import _torch

    kernel = examples.sincos_kernel()
    assert kernel is examples.sincos_kernel()  # built once
    # compiled on a GPU machine (then it takes CUDA tensors), interpreted without one
    x = torch.randn(n, device="cuda" if torch.cuda.is_available() else "cpu") * 10
    out = torch.full_like(x, float("nan"))
    kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    torch.testing.assert_close(out, examples.sincos(x), atol=1e-5, rtol=1e-5)
    asm = _torch.compile_triton(kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                                {"BLOCK": 1024}, "cuda:90")
    assert "tt.load" in asm["ttir"] and ".target sm_90" in asm["ptx"]

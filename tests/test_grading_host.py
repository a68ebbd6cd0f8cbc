"""Library tasks: a C++ case's kernels run in ``lk_host``, a process of their own with no Python, and an
interpreted Triton kernel's loads and stores stay inside its tensors (issue 29; red team 8's R1 used a
C++ kernel to patch what a later Triton case compiled, in the process they shared).

Real g++, the real host and Triton's interpreter; the screen is switched off where a test needs a
kernel that genscreen would refuse (what a kernel could do if the screen had a hole).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from labkit.grading import host
from labkit.grading import libcheck as lc


@pytest.fixture(autouse=True)
def _interpreted_triton(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))


def _buffers(*tensors) -> list[memoryview]:
    import torch

    return [memoryview(torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy().tobytes())
            for t in tensors]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int32",
                                   "int16", "int8", "uint8", "bool"])
def test_decode_reads_a_view_as_encode_writes_the_tensor(dtype: str) -> None:
    import torch

    base = torch.tensor([[0.5, -0.0, 3.25, 7.0], [float("inf"), float("nan"), -2.5, 1e30],
                         [-1e-3, 2.0, 126.0, 1.0]], dtype=torch.float64)
    if not dtype.startswith(("float", "bfloat")):
        base = base.nan_to_num(0.0, 0.0, 0.0).clamp(-100, 100)
    t = base.to(getattr(torch, dtype))
    view = t[1:, ::2].t()                    # an offset, strides, a transpose
    desc = {"dtype": dtype, "shape": list(view.shape), "stride": list(view.stride()),
            "storage": 0, "offset": view.storage_offset()}
    got, want = host.decode(desc, _buffers(t)), lc._encode(view)
    assert got["dtype"] == want["dtype"] and got["shape"] == want["shape"]
    assert [repr(v) for v in got["values"]] == [repr(v) for v in want["values"]]   # -0.0 and nan too


def test_decode_refuses_a_view_outside_its_buffer() -> None:
    import torch

    t = torch.zeros(4)
    with pytest.raises(ValueError, match="outside its buffer"):
        host.decode({"dtype": "float32", "shape": [2], "stride": [3], "storage": 0, "offset": 1},
                    _buffers(t))
    with pytest.raises(ValueError):
        host.decode({"dtype": "complex64", "shape": [1], "stride": [1], "storage": 0, "offset": 0},
                    _buffers(t))


def _forged(seed: int, source: str, monkeypatch: pytest.MonkeyPatch, target: str = "cpp"):
    """Seed's 5.1 cases with the instructor's evidence, the first ``target`` case's kernel replaced
    by ``source`` (renamed and given the same arguments), screened as the grader screens it."""
    cases, values = lc.draw(seed, ("5.1",))
    evidence = lc.produce(cases)
    case = next(c for c in cases if c["kind"] == "program" and c["target"] == target)
    kernel = evidence[case["id"]]["kernels"][0]
    kernel["source"] = source.replace("KERNEL", kernel["name"])
    return cases, values, evidence, case


STOMP = '''extern "C" void KERNEL(const float* in_ptr0, float* out_ptr0, int nthreads)
{
    volatile char* p = (volatile char*)out_ptr0;
    for (long i = 0; ; i += 64) { p[i] = 0x5a; p[-i] = 0x5a; }
}
'''
CALLS_PYTHON = '''extern "C" int PyRun_SimpleString(const char*);
extern "C" void KERNEL(const float* in_ptr0, float* out_ptr0, int nthreads)
{
    PyRun_SimpleString("import os; os._exit(0)");
}
'''
BAD_INDEX = '''extern "C" void KERNEL(const float* in_ptr0, float* out_ptr0, int64_t* __restrict__ err, int nthreads)
{
    err[0] = 1; err[1] = 9; err[2] = 4;
}
'''


def test_a_cpp_kernel_that_writes_all_memory_it_can_reach_ends_only_its_own_case(monkeypatch) -> None:
    """With the screen off, a C++ kernel that writes over every byte around its output (until the
    first unmapped page) crashes its own host: this process never loaded it, and every other case,
    C++ and Triton, runs and is judged as before."""
    monkeypatch.setattr(lc, "check_cpp", lambda source, name: None)
    cases, values, evidence, case = _forged(0, STOMP, monkeypatch)
    outputs = lc.execute_here(cases, evidence, values)
    assert "error" in outputs[case["id"]] and "exit status" in outputs[case["id"]]["error"], outputs[case["id"]]
    maps = Path("/proc/self/maps").read_text()
    assert "kernels.so" not in maps             # the plan's copy; the build is never loaded here either
    expected = lc.expect(cases, values)
    for other in (c for c in cases if c["kind"] == "program" and c is not case):
        assert lc._compare(outputs[other["id"]]["outputs"], expected[other["id"]], other["rtol"],
                           other["atol"]) == "", other


def test_a_cpp_kernel_that_calls_python_cannot_even_load(monkeypatch) -> None:
    """What the red team's N1 did in the shared process (``PyRun_SimpleString``): the host has no
    Python, so the library does not load (an undefined symbol) and the case fails."""
    monkeypatch.setattr(lc, "check_cpp", lambda source, name: None)
    cases, values, evidence, case = _forged(1, CALLS_PYTHON, monkeypatch)
    got = lc.execute_here(cases, evidence, values)[case["id"]]
    assert got == {"error": "the kernels' process failed (exit status 2)"}, got


def test_a_cpp_kernels_index_report_is_an_index_error(monkeypatch) -> None:
    monkeypatch.setattr(lc, "check_cpp", lambda source, name: None)
    cases, values, evidence, case = _forged(0, BAD_INDEX, monkeypatch)
    assert lc.execute_here(cases, evidence, values)[case["id"]] == {"error": "IndexError"}


@pytest.mark.parametrize("line", [
    "    tmp0 = tl.load(in_ptr0 + (xindex + 65536))",                       # a load past its input
    "    tl.store(out_ptr0 + (xindex - 65536), tl.zeros([BLOCK], tl.float32))",   # a store before its output
])
def test_a_triton_kernel_outside_its_tensors_is_stopped_before_the_access(line: str, monkeypatch) -> None:
    """Screen-clean Triton (genscreen does not bound addresses): the interpreter would read or
    write raw memory of the execute process; the bounds guard raises first, for that case only."""
    from labkit.grading import genscreen

    source = ("@triton.jit\ndef KERNEL(in_ptr0, out_ptr0, BLOCK: tl.constexpr):\n"
              "    xindex = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n" + line + "\n")
    genscreen.check_triton(source.replace("KERNEL", "kernel0"))
    cases, values, evidence, case = _forged(0, source, monkeypatch, target="triton")
    outputs = lc.execute_here(cases, evidence, values)
    assert outputs[case["id"]] == {"error": "TritonKernelError"}, outputs[case["id"]]
    others = [c for c in cases if c["kind"] == "program" and c is not case]
    assert all("outputs" in outputs[c["id"]] for c in others)


def test_the_bounds_guard_passes_masked_tails_and_is_undone() -> None:
    """An honest kernel's masked-off lanes point past the tensor: not an access, so no error; and
    the interpreter is Triton's own again afterwards."""
    import torch
    import triton.runtime.interpreter as ti

    from labkit import _torch
    from labkit.compiler.codegen import triton as tgen

    source = ("@triton.jit\ndef kernel0(in_ptr0, out_ptr0, BLOCK: tl.constexpr):\n"
              "    xindex = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
              "    tmp0 = tl.load(in_ptr0 + (xindex), xindex < 10, other=0)\n"
              "    tl.store(out_ptr0 + (xindex), tmp0 * 2, xindex < 10)\n")
    kernel = tgen.TritonKernel("kernel0", source, type("K", (), {"origins": []})(), torch.device("cpu"),
                               {"grid": 1, "block": 16, "num_warps": 1})
    real = ti._interpreter
    x, out = torch.arange(10.0), torch.empty(10)
    with _torch.triton_bounded_memory():
        kernel(x, out)
    assert ti._interpreter is real
    assert torch.equal(out, x * 2) and math.isclose(float(out.sum()), 90.0)


def test_an_honest_cast_spelling_gets_full_marks_through_the_host(monkeypatch) -> None:
    """Red team 7's Q1, the honest side: a log1p written with a functional decltype cast was
    refused while casts guarded the shared process; now it is screened in, runs and passes."""
    from labkit.compiler.codegen import cpp

    monkeypatch.setattr(cpp.CppOverrides, "log1p", staticmethod(lambda x: f"decltype({x})(std::log1p({x}))"))
    cases, values = lc.draw(3, ("5.1",))
    evidence = lc.produce(cases)
    assert any("decltype(" in k["source"] for e in evidence.values() for k in e["kernels"])
    outputs = lc.execute_here(cases, evidence, values)
    assert lc.judge(cases, evidence, outputs, evidence, lc.expect(cases, values)) == {"5.1": []}

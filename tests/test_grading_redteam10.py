"""Red team 10 (session 27, issue 29): routes past the lk_host redesign of the library tasks, each now
a test that it fails (strict xfails until the fixes landed). Findings: tests/redteam/REPORT10.md.

S1 (+6 on 5.1): the wrapper handed a Triton kernel ``exec`` and ``chr``, which it called. Closed three
ways, each alone enough: a launch names only the wrapper's tensors (``libcheck.check_call``), a
Triton kernel is launched only with tensors (``libcheck._Tensors``), and a kernel calls only tl's
builtins, the header's helpers and a few builtins (``genscreen._callable``). S2: a launch inside a
launch left the bounds guard with the inner launch's ranges; now it is refused, and the guard holds
the storages it allows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "redteam"))

@pytest.fixture(autouse=True)
def _interpreted_triton(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))


def _case(seed: int = 0):
    from labkit.grading import libcheck as lc

    cases, values = lc.draw(seed, ("5.1",))
    case = next(c for c in cases if c["target"] == "triton" and c["program"] == "log1p"
                and c["inputs"][0]["dtype"] == "float32")
    return case, values[case["id"]]


def _wrapper(shape: list[int], extra: str) -> str:
    return ("def call(args):\n    arg0_1, = args\n    args.clear()\n"
            f"    buf0 = empty_strided({tuple(shape)}, ({shape[1]}, 1), device=device, dtype=torch.float32)\n"
            f"    kernel0(arg0_1, buf0, {extra})\n    return [buf0]\n")


# -- S1: 5.1 forged end to end (tests/redteam/e2e_lib.py lib_forge10 0|1|3|7) ----------------------
def test_51_forgery_through_exec_handed_to_a_triton_kernel_fails(monkeypatch) -> None:
    """Seed 0: every 5.1 case (four C++, three Triton) judged from evidence whose C++ kernels
    compute nothing and whose Triton kernels only call ``ex(pay)``: the forgery must not score."""
    import lib_forge10

    from labkit.grading import libcheck as lc

    monkeypatch.setattr(lc, "_run", lc._run)      # the payload replaces both: put them back after
    monkeypatch.setattr(lc, "_plan", lc._plan)
    problems, _outputs, _cases, _evidence = lib_forge10.forged_problems(0)
    assert problems["5.1"], problems


@pytest.mark.parametrize("name", ["exec", "chr", "empty_strided", "kernel1", "args", "torch"])
def test_a_wrapper_launch_passes_only_its_tensors(name: str) -> None:
    """labkit's wrapper launches a kernel with its inputs, buffers and views; a builtin, the
    wrapper's helpers or another kernel as an argument is not a launch it writes."""
    from labkit.grading import libcheck as lc

    case, _data = _case()
    shape = case["inputs"][0]["shape"]
    kernel = "@triton.jit\ndef KERNEL(in_ptr0, out_ptr0, p, BLOCK: tl.constexpr):\n    tmp0 = 0\n"
    evidence = {"kernels": [{"name": k, "source": kernel.replace("KERNEL", k), "args": ["a", "b"],
                             "launch": {"grid": 1, "block": 1, "num_warps": 1}, "origins": []}
                            for k in ("kernel0", "kernel1")],
                "call": _wrapper(shape, name), "fallbacks": []}
    assert lc.screen(case, evidence), f"the wrapper may hand {name} to a kernel"


def test_a_triton_kernel_may_not_call_its_parameters() -> None:
    """A parameter is a pointer or a number in what labkit's generator writes; calling one calls
    whatever the launch passed (``exec``)."""
    from labkit.grading import genscreen as gs

    source = ("@triton.jit\ndef kernel0(in_ptr0, out_ptr0, ex, ch, BLOCK: tl.constexpr):\n"
              "    pay = ch(49) + ch(43) + ch(49)\n    ex(pay)\n")
    try:
        gs.check_triton(source)
    except gs.Refused:
        return
    raise AssertionError("check_triton passes a kernel that calls its parameters")


# -- S2: the bounds guard after a nested launch (screen off: the guard's own claim) -----------------
OUTER = """@triton.jit
def kernel0(in_ptr0, out_ptr0, mk, k1, BLOCK: tl.constexpr):
    t = mk((4096,), (1,))
    k1(t)
    tmp0 = int(t[0]) * 16777216 + int(t[1])
    t = 0
    x0 = tl.arange(0, 16)
    tmp1 = tl.full([16], tmp0, tl.int64).to(in_ptr0.dtype)
    tl.store(tmp1 + x0, 7.0 + 0.0 * x0)
"""
INNER = """@triton.jit
def kernel1(in_ptr0, BLOCK: tl.constexpr):
    tmp0 = in_ptr0.to(tl.int64)
    tl.store(in_ptr0 + 0, (tmp0 // 16777216).to(tl.float32))
    tl.store(in_ptr0 + 1, (tmp0 % 16777216).to(tl.float32))
"""


def test_the_bounds_guard_stops_a_store_into_a_freed_storage_after_a_nested_launch(monkeypatch) -> None:
    """With the screen and the launch's tensor check off (both passed it before S1's fix): kernel0 allocates a tensor, launches kernel1 on it (kernel1 writes its address into it),
    drops its last reference and stores 16 floats at that address: memory none of kernel0's
    tensors own, freed. The guard must stop the store (kernel0's launch was given in/out only)."""
    from labkit.compiler.codegen.triton import TritonKernelError
    from labkit.grading import libcheck as lc

    case, data = _case()
    launch = {"grid": 1, "block": 1, "num_warps": 1}
    evidence = {"kernels": [{"name": "kernel0", "source": OUTER, "args": ["a", "b"], "launch": launch,
                             "origins": []},
                            {"name": "kernel1", "source": INNER, "args": ["a"], "launch": launch,
                             "origins": []}],
                "call": _wrapper(case["inputs"][0]["shape"], "empty_strided, kernel1"), "fallbacks": []}
    monkeypatch.setattr(lc, "screen", lambda case, got: "")   # screen-clean before S1's fix
    monkeypatch.setattr(lc, "_Tensors", lambda kernel, nargs: kernel)   # so is the launch: the guard is tested
    try:
        lc._run(case, evidence, data)
    except TritonKernelError as exc:
        assert "OutOfBounds" in str(exc) or "launched from inside a kernel" in str(exc), exc
        return
    raise AssertionError("a store into a freed storage passed the bounds guard")

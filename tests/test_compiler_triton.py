"""labkit's Triton codegen: in the interpreter on CPU (small sizes: it is slow), compiled on a GPU."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from labkit import _torch
from labkit.compiler import schedule
from labkit.compiler.codegen import triton as tgen
from labkit.compiler.testing import assert_same_as_eager, compile_fn

pytest.importorskip("triton")


_PTR_TYPES = {torch.float32: "*fp32", torch.float64: "*fp64", torch.int64: "*i64",
              torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8",
              torch.bool: "*i1", torch.float16: "*fp16", torch.bfloat16: "*bf16"}


def gpu_asm(kernel: tgen.TritonKernel, arch: int = 90) -> dict[str, str]:
    """Compile a generated kernel for an NVIDIA GPU (no GPU needed): ttir, ttgir, llir, ptx."""
    fn = getattr(tgen.load_module(tgen.HEADER + kernel.source, interpret=False), kernel.name)
    names = [a for a in fn.arg_names if a != "BLOCK"]
    signature = {n: _PTR_TYPES[d] for n, d in zip(names, kernel.arg_dtypes)}
    return _torch.compile_triton(fn, signature, {"BLOCK": kernel.launch["block"]}, f"cuda:{arch}",
                                 {"num_warps": kernel.launch["num_warps"]})


def chain(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = torch.tanh(x * y + 1).sigmoid() - F.gelu(x)
    return h, (x > 0).to(torch.float32) * x.abs().sqrt(), torch.where(x > y, x, y).relu().exp(), x > y


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "sliced", "0-dim", "empty"])
def test_pointwise_matches_eager_in_interpreter(kind: str) -> None:
    base = torch.randn(12, 9)
    x = {"contiguous": base[:5], "transposed": base.t(), "sliced": base[1::3, 2:],
         "0-dim": base[0, 0].clone(), "empty": base[:0]}[kind]
    y = torch.randn(x.shape[-1:] if x.dim() else ())
    assert_same_as_eager(chain, x, y, target="triton")


def reductions(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.softmax(x, -1), F.log_softmax(x, -1), F.layer_norm(x, x.shape[-1:], w, w),
            x.sum(0), x.amax(-1, keepdim=True), x.mean(), x.var(-1), x.amin(0))


@pytest.mark.parametrize("mode,n", [("persistent", 37), ("exact", 32), ("looped", 37)])
def test_reductions_match_eager_in_interpreter(mode: str, n: int, monkeypatch) -> None:
    if mode == "looped":  # rows longer than PERSISTENT_MAX loop over BLOCK-sized chunks
        monkeypatch.setattr(schedule, "PERSISTENT_MAX", 8)  # the online max+sum loop too
        monkeypatch.setattr(schedule, "LOOP_RBLOCK", 8)
    x = torch.randn(6, n)
    p = assert_same_as_eager(reductions, x, torch.randn(n), target="triton", rtol=1e-4, atol=1e-5)
    rows = [k for k in p.schedule.kernels if k.space.rdims and not k.column]  # row reductions
    assert rows and all(("for roffset" in p.kernels[k.name].source) is (mode == "looped") for k in rows)
    assert ("rmask" in p.code.split("def kernel0")[1].split("@triton.jit")[0]) is (mode != "exact")
    columns = [k for k in p.schedule.kernels if k.column]  # x.sum(0), x.amin(0): [rows x columns] tiles
    assert columns and all("[:, None]" in p.kernels[k.name].source for k in columns)


def test_views_and_ints_in_interpreter() -> None:
    x, i = torch.randn(4, 6, 5), torch.randint(-9, 9, (5, 6))
    assert_same_as_eager(lambda x, i: ((x * 2).permute(2, 0, 1) + 1, x.reshape(24, 5)[3:9].cos(),
                                       i * 3 + i.abs(), i.sum(1), (i > 0).sum()), x, i,
                         target="triton")


def test_generated_kernels_compile_for_a_gpu_target() -> None:
    p = compile_fn(reductions, torch.randn(6, 37), torch.randn(37), target="triton")
    p2 = compile_fn(chain, torch.randn(5, 9), torch.randn(9), target="triton")
    a, b = torch.randn(30, 20).bfloat16(), torch.randn(30, 20).half()  # half types, column tiles
    p3 = compile_fn(lambda a, b: ((a * 2 + 1).sum(0), torch.softmax(a, -1), (b + 1) * 3), a, b,
                    target="triton")
    p4 = compile_fn(lambda x, y: (F.log_softmax(x, -1), torch.softmax(y, 0)), torch.randn(3, 17000),
                    torch.randn(40, 24), target="triton")  # online softmax: a looped row, a column tile
    assert [len(k.online) for k in p4.schedule.kernels] == [1, 1]
    for k in [*p.kernels.values(), *p2.kernels.values(), *p3.kernels.values(), *p4.kernels.values()]:
        asm = gpu_asm(k)
        assert "tt.func" in asm["ttir"] and ".target sm_90" in asm["ptx"]


def test_looped_loads_carry_l2_hints() -> None:
    """A looped row or column keeps what a later loop reads again in L2 and lets its last read go."""
    p = compile_fn(lambda x: torch.softmax(x, 0), torch.zeros(4096, 4096), target="triton")
    (k,) = p.kernels.values()  # 4096 columns: 32-wide strips, 128 programs
    assert k.launch == {"grid": 128, "block": 32, "num_warps": 16}
    assert "[512 rows x 32 columns], 16 warps" in p.schedule.kernels[0].why_order
    first, last = k.source.split("for roffset")[1:]  # max+sum, then the write: x read twice
    assert "evict_last" in first and "evict_first" not in first and "evict_first" in last
    (wide,) = compile_fn(lambda x: x.sum(0), torch.zeros(8192, 8192), target="triton").kernels.values()
    assert "evict_first" in wide.source and "evict_last" not in wide.source  # read once
    assert wide.launch == {"grid": 256, "block": 32, "num_warps": 16}  # 8192 columns: 32 wide
    # Fewer than 128 strips of 32: 16 wide, twice the programs; never taller than the reduction
    h100 = schedule.Gpu()  # the defaults: no GPU here
    assert [h100.column_tile(n, 16384) for n in (1024, 4095, 4096)] == [(16, 1024, 16)] * 2 + [(32, 512, 16)]
    assert h100.column_tile(8192, 40) == (32, 64, 16)
    w = torch.zeros(20000)
    ln = compile_fn(lambda x, w: F.layer_norm(x, (20000,), w, w), torch.zeros(3, 20000), w, target="triton")
    (k,) = ln.kernels.values()  # a row over PERSISTENT_MAX: looped, 4096 x 32 warps
    assert (k.launch["block"], k.launch["num_warps"]) == (schedule.LOOP_RBLOCK, schedule.LOOP_WARPS) == (4096, 32)
    assert "hinted evict_last" in ln.schedule.kernels[0].why_order
    hints = [(line.split(" + (")[0].split("(")[-1], line.split("eviction_policy='")[1].split("'")[0])
             for line in k.source.splitlines() if "tl.load" in line]
    # x: kept in L2 until its last loop; the weight, read by every program: always kept
    assert hints == [("in_ptr0", "evict_last")] * 2 + [("in_ptr0", "evict_first"), ("in_ptr1", "evict_last")]


def test_triton_error_carries_source() -> None:
    p = compile_fn(lambda x: x + 1, torch.randn(3), target="triton")
    (k,) = p.kernels.values()
    bad = k.source.replace("tl.store(", "tl.not_a_function(")
    with pytest.raises(tgen.TritonKernelError) as err:
        broken = tgen.TritonKernel(k.name, bad, p.schedule.kernels[0], torch.device("cpu"),
                                   k.launch)
        broken(torch.randn(3), torch.empty(3))
    assert "tl.not_a_function" in str(err.value)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("shape", [(4096, 4096), (16384, 1024), (1024, 16384), (37, 5000)])
def test_gpu_softmax_layer_norm_and_chain(shape: tuple[int, int]) -> None:
    x = torch.randn(shape, device="cuda")
    w = torch.randn(shape[-1], device="cuda")
    assert_same_as_eager(lambda x, w: (torch.softmax(x, -1), F.layer_norm(x, x.shape[-1:], w, w),
                                       chain(x, w)[0]), x, w, target="triton",
                         rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_vocabulary_rows_and_softmax_over_dim0() -> None:
    """The online-softmax loops (a 50257-long row, [rows x columns] tiles) on the GPU."""
    x, y = torch.randn(64, 50257, device="cuda") * 4, torch.randn(4096, 1024, device="cuda")
    x[1, :30000] = float("-inf")
    assert_same_as_eager(lambda x, y: (torch.softmax(x, -1), F.log_softmax(x, -1), torch.softmax(y, 0),
                                       F.log_softmax(y, 0)), x, y, target="triton", rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_training_step() -> None:
    import labkit.compiler as lc

    torch._dynamo.reset()
    lin = torch.nn.Linear(32, 8).cuda()
    f = torch.compile(lambda x: F.layer_norm(lin(x).relu(), (8,)).sum(),
                      backend=lc.make_backend(target="triton"), dynamic=False)
    x = torch.randn(64, 32, device="cuda")
    f(x).backward()
    g = lin.weight.grad.clone()
    lin.weight.grad = None
    F.layer_norm(lin(x).relu(), (8,)).sum().backward()
    torch.testing.assert_close(g, lin.weight.grad, rtol=1e-4, atol=1e-4)


_BAD_TARGET = """
import torch, torch.nn.functional as F
from labkit.compiler import make_backend
f = torch.compile(F.cross_entropy, backend=make_backend(target="triton"), dynamic=False)
x, t = torch.randn(64, 1000, device="cuda"), torch.randint(0, 1000, (64,), device="cuda")
torch.testing.assert_close(f(x, t), F.cross_entropy(x, t))
t[5] = {bad}
print("value", f(x, t).item())
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("bad", [1000, -7])
def test_gpu_gather_out_of_range_fails_the_device_without_a_host_sync(bad: int) -> None:
    """On CUDA the gather's bounds check is a device-side assert (no sync a call); a bad target still
    raises at the next sync (here .item()) and never gives a value. A fresh process: the context dies."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _BAD_TARGET.format(bad=bad)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and "value" not in proc.stdout, proc.stdout
    assert "device-side assert" in proc.stderr and "index is out of bounds" in proc.stderr, proc.stderr[-2000:]


def test_training_step_in_interpreter_matches_eager() -> None:
    import copy

    import labkit.compiler as lc

    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                torch.nn.Linear(16, 4))
    mine = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(mine, backend=lc.make_backend(target="triton"), dynamic=False)
    x = torch.randn(5, 8)
    F.log_softmax(compiled(x), -1).sum().backward()
    F.log_softmax(eager(x), -1).sum().backward()
    for a, b in zip(eager.parameters(), mine.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def _softmax0(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, 0)


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, -1), lambda x: F.log_softmax(x, -1), _softmax0],
                         ids=["softmax", "log_softmax", "softmax_dim0"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_long_rows_and_columns_read_once_for_max_and_sum(fn, dtype: torch.dtype) -> None:
    """Online softmax: max and sum(exp(x - max)) come from one loop; -inf, NaN and inf rows included."""
    x = torch.randn(5, 16500) * 3
    x[1], x[2, 7], x[3, 100], x[4, :9000] = float("-inf"), float("nan"), float("inf"), float("-inf")
    x = (x[:, :40].t().contiguous() if fn is _softmax0 else x).to(dtype)  # dim 0: a column kernel
    tol = {} if dtype == torch.float32 else {"rtol": None, "atol": None}
    p = assert_same_as_eager(fn, x, target="triton", **({"rtol": 1e-5, "atol": 1e-6} | tol))
    (k,) = p.schedule.kernels
    src = p.kernels[k.name].source
    assert len(k.online) == 1 and "online softmax" in k.why_order and k.column is (fn is _softmax0)
    assert src.count("for roffset") == 2 and "_lk_max(_acc0, " in src  # one loop for both, one to write


def test_split_reduction_of_everything_in_interpreter(monkeypatch) -> None:
    """A loss-style reduction of a whole tensor runs in two stages (parts of it, then the partials),
    so a GPU gets many programs instead of one (split on CPU here, as on CUDA)."""
    from labkit.compiler import lower

    monkeypatch.setattr(lower, "SPLIT_DEVICES", ("cpu", "cuda"))
    x = torch.randn(16, 64, 96)
    p = assert_same_as_eager(lambda x: ((x * 2 - 1).pow(2).mean(), x.amax(), x.sum(dim=(0, 1, 2), keepdim=True)),
                             x, target="triton", rtol=1e-4, atol=1e-3)
    spaces = [k.space for k in p.schedule.kernels]
    assert spaces.count(schedule.Space((1024,), (96,))) == 3 and spaces.count(schedule.Space((), (1024,))) == 3


def test_launch_shapes_derive_from_the_device_properties() -> None:
    """Tiles, blocks and column strips come from the card's SM count, shared memory and L2 (a fake
    ``get_device_properties`` here), the H100's figures when there is no GPU; the kernels follow."""
    from types import SimpleNamespace

    def card(name: str, sms: int, smem: int, l2_mib: int) -> schedule.Gpu:
        return schedule.Gpu.of(SimpleNamespace(name=name, multi_processor_count=sms, shared_memory_per_block=48 << 10,
                                               shared_memory_per_block_optin=smem, L2_cache_size=l2_mib << 20))

    h100, t4, small = card("H100", 132, 227 << 10, 50), card("T4", 40, 64 << 10, 4), card("tiny", 16, 0, 1)
    assert h100 == schedule.Gpu(name="H100")
    assert torch.cuda.is_available() or schedule.this_gpu() == schedule.Gpu()  # no GPU: the defaults
    assert small.smem == 48 << 10  # no opt-in figure: the per-block one
    # 2-D tiles: 64x64 where 4 fit shared memory and every SM gets 2 tiles, else 32x32
    assert [g.tile(6000 * 5000) for g in (h100, t4, small)] == [64, 64, 32] and h100.tile(300 * 517) == 32
    # flat blocks: 1024, smaller until every SM gets two programs (never below 128)
    assert [h100.xblock(n) for n in (100, 65536, 300_000, 1 << 24)] == [128, 128, 1024, 1024]
    assert t4.xblock(65536) == 512
    # column strips: 32 wide once every SM gets one; 16384 elements, fewer when 2 an SM overflow L2
    assert [g.column_tile(4096, 4096) for g in (h100, t4, small)] == [(32, 512, 16), (32, 256, 16), (32, 256, 16)]
    assert t4.column_tile(1000, 4096) == (16, 512, 16)
    # few columns (a layer norm's weight gradient over 768): 8 wide, a 32-byte sector a row, 96 programs
    assert [h100.column_tile(n, 8192) for n in (1024, 768)] == [(16, 1024, 16), (8, 2048, 16)]
    p = compile_fn(lambda x, y: x.t() + y, torch.randn(300, 517), torch.randn(517, 300), target="triton")
    (k,) = p.kernels.values()
    assert k.launch["block"] == 32 and "tl.arange(0, 32)[:, None]" in k.source  # too small for 64s
    text = schedule.format_schedule(p.schedule, p.graph)
    gpu = schedule.this_gpu().name      # "H100 (no GPU here)" without CUDA, the card's name with it
    assert re.search(rf"\((\d+)x\1 a GPU program on the {re.escape(gpu)}; in C\+\+ 64x64 blocks", text), text
    writer = tgen.TritonKernelWriter(compile_fn(lambda x: x.sum(0), torch.randn(4096, 1000)).schedule.kernels[0],
                                     {"arg0_1": torch.float32, "buf0": torch.float32}, t4)
    assert (writer.block, writer.rblock, writer.grid) == (16, "512", 63)  # T4: 16 wide, 512 rows
    # many short rows (256..1024, >= 1024 of them): one warp a row, as Inductor; else by row length
    warps = {shape: [k.launch["num_warps"] for k in compile_fn(lambda x: torch.softmax(x, -1), torch.empty(shape),
                                                               target="triton").kernels.values()]
             for shape in ((16384, 1024), (32768, 384), (512, 1024), (16384, 200), (4096, 4096))}
    assert warps == {(16384, 1024): [1], (32768, 384): [1], (512, 1024): [4], (16384, 200): [4], (4096, 4096): [8]}

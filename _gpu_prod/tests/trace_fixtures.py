"""Realistic Traces for the view tests, built without compiling anything (fast, and the same anywhere).

``toy_trace()`` is what ``labkit.explore(toy_example, a, b)`` records: the course's ``toy_example``
with a data-dependent ``if`` (a graph break, so two frames), every stage kind present (a few
unavailable, with the reason, as on a CPU-only machine), two Inductor C++ kernels, a labkit kernel,
and timings. The texts are shortened copies of what torch 2.13 prints; run-dependent names
(``__compiled_fn_1_<uuid>``, addresses, temp paths) are left in on purpose, for the normalisation
tests. ``HOSTILE`` is a source line full of characters that break naive DOT/HTML labels.
"""

from __future__ import annotations

from labkit.trace import STAGE_KINDS, FxNode, GraphBreak, Kernel, Timing, Trace

FILE = "/home/student/labkit/notebooks/toy.py"
HOSTILE = 'x = a / (torch.abs(a) + 1)  # {"a|b": <c>} \\n & \'q\''
F0, F1 = "0/0 toy_example", "1/0 torch_dynamo_resume_in_toy_example_at_5"

ORIGINAL_BYTECODE = """\
  2           0 RESUME                   0

  3           2 LOAD_FAST                0 (a)
              4 LOAD_GLOBAL              1 (NULL + torch)
             16 LOAD_ATTR                1 (abs)
             26 LOAD_FAST                0 (a)
             28 PRECALL                  1
             32 CALL                     1
             42 LOAD_CONST               1 (1)
             44 BINARY_OP                0 (+)
             48 BINARY_OP               11 (/)
             52 STORE_FAST               2 (x)

  4          54 LOAD_FAST                1 (b)
             56 LOAD_METHOD              2 (sum)
             78 PRECALL                  0
             82 CALL                     0
             92 LOAD_CONST               2 (0)
             94 COMPARE_OP               0 (<)
            100 POP_JUMP_FORWARD_IF_FALSE     7 (to 116)

  5         102 LOAD_FAST                1 (b)
            104 LOAD_CONST               3 (-1)
            106 BINARY_OP                5 (*)
            110 STORE_FAST               1 (b)

  6     >>  116 LOAD_FAST                2 (x)
            118 LOAD_FAST                1 (b)
            120 BINARY_OP                5 (*)
            124 RETURN_VALUE
"""

TRANSFORMED_BYTECODE = """\
  2           0 RESUME                   0
              2 LOAD_GLOBAL              1 (NULL + __compiled_fn_1_b832ca95_2e27_4a1c_9d36_1f0e2b3c4d5e)
             14 LOAD_FAST                0 (a)
             16 LOAD_FAST                1 (b)
             18 PRECALL                  2
             22 CALL                     2
             32 STORE_FAST               3 (graph_out_0)
             34 LOAD_FAST                3 (graph_out_0)
             36 LOAD_CONST               1 (0)
             38 BINARY_SUBSCR
             48 STORE_FAST               2 (x)

  4          50 LOAD_FAST                3 (graph_out_0)
             52 LOAD_CONST               2 (1)
             54 BINARY_SUBSCR
             64 POP_JUMP_FORWARD_IF_FALSE    12 (to 90)
             66 LOAD_GLOBAL              3 (NULL + __resume_at_102_2)
             78 LOAD_FAST                0 (a)
             80 LOAD_FAST                1 (b)
             82 LOAD_FAST                2 (x)
             84 PRECALL                  3
             88 CALL                     3
             98 RETURN_VALUE
        >>  100 LOAD_GLOBAL              5 (NULL + __resume_at_116_3)
            112 LOAD_FAST                1 (b)
            114 LOAD_FAST                2 (x)
            116 PRECALL                  2
            120 CALL                     2
            130 RETURN_VALUE
"""

GUARDS = """\
TREE_GUARD_MANAGER:
+- RootGuardManager
| +- GLOBAL_STATE: ___check_global_state()
| +- GuardManager: source=L['a'], accessed_by=FrameLocalsGuardAccessor(key='a', framelocals_idx=0)
| | +- TENSOR_MATCH: check_tensor(L['a'], Tensor, DispatchKeySet(CPU, BackendSelect), torch.float32, device=None, requires_grad=False, size=[10], stride=[1])  # x = a / (torch.abs(a) + 1)  # toy.py:3 in toy_example
| +- GuardManager: source=L['b'], accessed_by=FrameLocalsGuardAccessor(key='b', framelocals_idx=1)
| | +- TENSOR_MATCH: check_tensor(L['b'], Tensor, DispatchKeySet(CPU, BackendSelect), torch.float32, device=None, requires_grad=False, size=[10], stride=[1])  # if b.sum() < 0:  # toy.py:4 in toy_example
| +- GuardManager: source=G['torch'], accessed_by=DictGetItemGuardAccessor('torch')
| | +- ID_MATCH: ___check_obj_id(G['torch'], 0x7f3a2b1c4d50)
"""

DYNAMO_GRAPH_0 = """\
class GraphModule(torch.nn.Module):
    def forward(self, L_a_: "f32[10][1]cpu", L_b_: "f32[10][1]cpu"):
        l_a_ = L_a_
        l_b_ = L_b_

        # File: /home/student/labkit/notebooks/toy.py:3 in toy_example, code: x = a / (torch.abs(a) + 1)
        abs_1: "f32[10][1]cpu" = torch.abs(l_a_)
        add: "f32[10][1]cpu" = abs_1 + 1;  abs_1 = None
        x: "f32[10][1]cpu" = l_a_ / add;  l_a_ = add = None

        # File: /home/student/labkit/notebooks/toy.py:4 in toy_example, code: if b.sum() < 0:
        sum_1: "f32[][]cpu" = l_b_.sum();  l_b_ = None
        lt: "b8[][]cpu" = sum_1 < 0;  sum_1 = None
        return (x, lt)
"""

AOT_0 = """\
class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f32[10][1]cpu", arg1_1: "f32[10][1]cpu"):
         # File: toy.py:3 in toy_example, code: x = a / (torch.abs(a) + 1)
        abs_1: "f32[10][1]cpu" = torch.ops.aten.abs.default(arg0_1)
        add: "f32[10][1]cpu" = torch.ops.aten.add.Tensor(abs_1, 1);  abs_1 = None
        div: "f32[10][1]cpu" = torch.ops.aten.div.Tensor(arg0_1, add);  arg0_1 = add = None

         # File: toy.py:4 in toy_example, code: if b.sum() < 0:
        sum_1: "f32[][]cpu" = torch.ops.aten.sum.default(arg1_1);  arg1_1 = None
        lt: "b8[][]cpu" = torch.ops.aten.lt.Scalar(sum_1, 0);  sum_1 = None
        return (div, lt)
"""

IR_PRE = """\
op0: SchedulerNode(ComputedBuffer)
op0.writes = [MemoryDep('buf0', c0, {c0: 10})]
op0.unmet_dependencies = []
op0.met_dependencies = [MemoryDep('arg0_1', c0, {c0: 10})]
op0.outputs = [
    buf0: ComputedBuffer
    buf0.layout = FixedLayout('cpu', torch.float32, size=[10], stride=[1])
]
op0.group.device = cpu
op0.group.iteration = ((10,), ())
class op0_loop_body:
    var_ranges = {p0: 10}
    index0 = p0
    def body(self, ops):
        get_index = self.get_index('index0')
        load = ops.load('arg0_1', get_index)
        abs_1 = ops.abs(load)
        constant = ops.constant(1.0, torch.float32)
        add = ops.add(abs_1, constant)
        truediv = ops.truediv(load, add)
        store = ops.store('buf0', get_index, truediv, None)
        return store
op1: SchedulerNode(ComputedBuffer)
op1.writes = [MemoryDep('buf1', 0, {})]
op1.met_dependencies = [MemoryDep('arg1_1', c0, {c0: 10})]
op1.group.iteration = ((), (10,))
class op1_loop_body:
    var_ranges = {p0: 10}
    def body(self, ops):
        load = ops.load('arg1_1', get_index)
        reduction = ops.reduction(torch.float32, torch.float32, 'sum', load)
        store_reduction = ops.store_reduction('buf1', get_index_1, reduction)
        return store_reduction
op2: SchedulerNode(ComputedBuffer)
op2.writes = [MemoryDep('buf2', 0, {})]
op2.unmet_dependencies = [MemoryDep('buf1', 0, {})]
class op2_loop_body:
    def body(self, ops):
        load = ops.load('buf1', get_index)
        lt = ops.lt(load, ops.constant(0.0, torch.float32))
        store = ops.store('buf2', get_index, lt, None)
        return store
"""

IR_POST = IR_PRE.replace(
    "op1: SchedulerNode(ComputedBuffer)",
    "op1_op2: FusedSchedulerNode(SchedulerNode,SchedulerNode)\nop1_op2.snodes[0] =\n"
    "op1: SchedulerNode(ComputedBuffer)",
).replace("op2: SchedulerNode(ComputedBuffer)", "op1_op2.snodes[1] =\nop2: SchedulerNode(ComputedBuffer)")

FUSION = """\
===== attempting fusion (1/10): 3 nodes =====
fuse_nodes_once, candidates:
  SchedulerNode(name='op0'), Pointwise(['10'])
  SchedulerNode(name='op1'), Reduction(['', '10'])
  SchedulerNode(name='op2'), Pointwise(['', ''])
cannot fuse op0 with op1: no shared data
fusing op1 with op2
completed fusion round (1/10): fused 3 nodes into 2 nodes
"""

KERNEL0 = """\
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void kernel(const float* in_ptr0, const float* in_ptr1, float* out_ptr0, float* out_ptr1, bool* out_ptr2)
{
    {
        for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(8L); x0+=static_cast<int64_t>(8L))
        {
            auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>(8));
            auto tmp1 = tmp0.abs();
            auto tmp2 = static_cast<float>(1.0);
            auto tmp3 = at::vec::Vectorized<float>(tmp2);
            auto tmp4 = tmp1 + tmp3;
            auto tmp5 = tmp0 / tmp4;
            tmp5.store(out_ptr0 + static_cast<int64_t>(x0));
        }
        for(int64_t x0=static_cast<int64_t>(8L); x0<static_cast<int64_t>(10L); x0+=static_cast<int64_t>(1L))
        {
            auto tmp0 = in_ptr0[static_cast<int64_t>(x0)];
            out_ptr0[static_cast<int64_t>(x0)] = tmp0 / (std::abs(tmp0) + 1.0f);
        }
    }
    {
        float tmp_acc0 = 0;
        for(int64_t r0=static_cast<int64_t>(0L); r0<static_cast<int64_t>(10L); r0+=static_cast<int64_t>(1L))
        {
            tmp_acc0 = tmp_acc0 + in_ptr1[static_cast<int64_t>(r0)];
        }
        out_ptr1[static_cast<int64_t>(0L)] = tmp_acc0;
        out_ptr2[static_cast<int64_t>(0L)] = tmp_acc0 < static_cast<float>(0.0);
    }
}
"""

OUTPUT_CODE = f"""\
# AOT ID: ['0_inference']
from ctypes import c_void_p, c_long, c_int
import torch
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()

# kernel path: /tmp/labkit-run-3x9q/inductor/7f/c7fk2abc.py
cpp_fused_abs_add_div_lt_sum_0 = async_compile.cpp_pybinding(['const float*', 'const float*', 'float*', 'float*', 'bool*'], r'''
{KERNEL0}''')

async_compile.wait(globals())
del async_compile

def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    assert_size_stride(arg0_1, (10, ), (1, ))
    buf0 = empty_strided_cpu((10, ), (1, ), torch.float32)
    buf1 = empty_strided_cpu((), (), torch.float32)
    buf2 = empty_strided_cpu((), (), torch.bool)
    cpp_fused_abs_add_div_lt_sum_0(arg0_1, arg1_1, buf0, buf1, buf2)
    del arg0_1, arg1_1
    return (buf0, buf2, )
"""

TTIR = """\
module {
  tt.func public @triton_poi_fused_mul_0(%in_ptr0: !tt.ptr<f32> loc("in_ptr0"(#loc)), %out_ptr0: !tt.ptr<f32> loc("out_ptr0"(#loc)), %xnumel: i32 loc("xnumel"(#loc))) attributes {noinline = false} {
    %c1024_i32 = arith.constant 1024 : i32 loc(#loc1)
    %pid = tt.get_program_id x : i32 loc(#loc2)
    %xoffset = arith.muli %pid, %c1024_i32 : i32 loc(#loc3)
    %xindex = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32> loc(#loc4)
    %xmask = arith.cmpi slt, %xindex, %xnumel_splat : tensor<1024xi32> loc(#loc5)
    %tmp0 = tt.load %ptrs, %xmask : tensor<1024x!tt.ptr<f32>> loc(#loc6)
    %tmp2 = arith.mulf %tmp0, %cst : tensor<1024xf32> loc(#loc7)
    tt.store %out, %tmp2, %xmask : tensor<1024x!tt.ptr<f32>> loc(#loc8)
    tt.return loc(#loc9)
  } loc(#loc)
} loc(#loc)
#loc1 = loc(unknown)
"""

LLIR = """\
; ModuleID = 'LLVMDialectModule'
define ptx_kernel void @triton_poi_fused_mul_0(ptr addrspace(1) %0, ptr addrspace(1) %1, i32 %2) local_unnamed_addr !dbg !7 {
  %4 = tail call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x(), !dbg !10
  %5 = shl i32 %4, 10, !dbg !11
  %6 = fmul float %5, -1.000000e+00, !dbg !12
  ret void, !dbg !13
}
"""

PTX = """\
//
// Generated by LLVM NVPTX Back-End
//
.version 8.7
.target sm_90a
.address_size 64

.visible .entry triton_poi_fused_mul_0(
	.param .u64 .ptr .global .align 1 triton_poi_fused_mul_0_param_0,
	.param .u32 triton_poi_fused_mul_0_param_2
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<12>;
	mov.u32 	%r1, %ctaid.x;
	shl.b32 	%r5, %r1, 10;
	ld.global.v4.b32 { %r2, %r3, %r4, %r5 }, [ %rd1 + 0 ];
	ret;
}
"""

LOOP_IR = """\
buf0 = Pointwise(size=[10], inner_fn=lambda i: ops.truediv(ops.load('a', i), ops.add(ops.abs(ops.load('a', i)), ops.constant(1.0))))
buf1 = Reduction(size=[], reduction_size=[10], reduction_type='sum', inner_fn=lambda i, r: ops.load('b', r))
buf2 = Pointwise(size=[], inner_fn=lambda i: ops.lt(ops.load('buf1', i), ops.constant(0.0)))
"""

SCHEDULE = """\
kernel 0: buf0            (pointwise, 10)
kernel 1: buf1, buf2      (reduction 10, then pointwise epilogue)
not fused buf0 + buf1: different iteration spaces ([10] vs [] x [10])
"""

LABKIT_CPP = """\
extern "C" void labkit_kernel_0(const float* a, float* buf0) {
    #pragma omp simd
    for (long i = 0; i < 10; ++i) {
        buf0[i] = a[i] / (std::abs(a[i]) + 1.0f);
    }
}
"""


def _n(name, op, target, inputs=(), shape=(10,), dtype="torch.float32", source=None):
    return FxNode(name=name, op=op, target=target, inputs=list(inputs),
                  shape=None if shape is None else list(shape), dtype=dtype, source=source)


def _graph0(prefix: str = "l_", aten: bool = False) -> list[FxNode]:
    a, b = (f"{prefix}a_", f"{prefix}b_") if not aten else ("arg0_1", "arg1_1")
    line3 = f"{FILE.rsplit('/', 1)[-1]}:3  {HOSTILE}"
    line4 = f"{FILE.rsplit('/', 1)[-1]}:4  if b.sum() < 0:"
    t = (lambda s: f"aten.{s}") if aten else (lambda s: s)
    return [
        _n(a, "placeholder", a),
        _n(b, "placeholder", b),
        _n("abs_1", "call_function", t("abs.default") if aten else "torch.abs", [a], source=line3),
        _n("add", "call_function", t("add.Tensor") if aten else "<built-in function add>", ["abs_1"],
           source=line3),
        _n("div" if aten else "x", "call_function", t("div.Tensor") if aten else "<built-in function truediv>",
           [a, "add"], source=line3),
        _n("sum_1", "call_method" if not aten else "call_function", t("sum.default") if aten else "sum",
           [b], shape=(), source=line4),
        _n("lt", "call_function", t("lt.Scalar") if aten else "<built-in function lt>", ["sum_1"],
           shape=(), dtype="torch.bool", source=line4),
        _n("output", "output", "output", ["div" if aten else "x", "lt"], shape=None, dtype=None),
    ]


def _graph1() -> list[FxNode]:
    line6 = "toy.py:6  return x * b"
    return [
        _n("l_b_", "placeholder", "l_b_"),
        _n("l_x_", "placeholder", "l_x_"),
        _n("mul", "call_function", "<built-in function mul>", ["l_x_", "l_b_"], source=line6),
        _n("output", "output", "output", ["mul"], shape=None, dtype=None),
    ]


def toy_trace() -> Trace:
    """A Trace like ``labkit.explore(toy_example, a, b)`` makes on a CPU-only machine."""
    t = Trace(fn_name="toy_example", backend="inductor",
              env={"device": "cpu (x86_64)", "torch": "2.13.0+cpu", "python": "3.11.7",
                   "date": "2026-11-23", "triton": "3.9.0"})
    t.add("bytecode.original", "Original bytecode", ORIGINAL_BYTECODE, frame=F0,
          meta={"decompiled": "def toy_example(a, b):\n    x = a / (torch.abs(a) + 1)\n"
                              "    if b.sum() < 0:\n        b = b * -1\n    return x * b\n"})
    t.add("bytecode.transformed", "Transformed bytecode", TRANSFORMED_BYTECODE, frame=F0,
          meta={"decompiled": "def toy_example(a, b):\n"
                              "    graph_out_0 = __compiled_fn_1_b832ca95_2e27_4a1c_9d36_1f0e2b3c4d5e(a, b)\n"
                              "    x = graph_out_0[0]\n    if graph_out_0[1]:\n"
                              "        return __resume_at_102_2(a, b, x)\n"
                              "    return __resume_at_116_3(b, x)\n"})
    t.add("dynamo.guards", "Guards", GUARDS, frame=F0)
    t.add("dynamo.graph", "Dynamo FX graph", DYNAMO_GRAPH_0, frame=F0, nodes=_graph0())
    t.missing("aot.joint", "AOT joint graph", "no input requires grad: AOTAutograd made an inference "
              "graph only (call with requires_grad=True inputs to see joint/forward/backward)", frame=F0)
    t.missing("aot.forward", "AOT forward graph", "inference only (no input requires grad)", frame=F0)
    t.missing("aot.backward", "AOT backward graph", "inference only (no input requires grad)", frame=F0)
    t.add("aot.inference", "AOT inference graph (ATen)", AOT_0, frame=F0, nodes=_graph0(aten=True))
    t.add("inductor.input", "Inductor input graph", AOT_0, frame=F0, nodes=_graph0(aten=True))
    t.add("inductor.ir_pre_fusion", "Inductor IR before fusion", IR_PRE, frame=F0)
    t.add("inductor.ir_post_fusion", "Inductor IR after fusion", IR_POST, frame=F0)
    t.add("inductor.fusion", "Fusion decisions", FUSION, frame=F0)
    t.add("inductor.output_code", "Inductor output code", OUTPUT_CODE, frame=F0)
    # the resume function after the break: a second frame with its own small graph
    t.add("dynamo.graph", "Dynamo FX graph", "class GraphModule(torch.nn.Module):\n"
          "    def forward(self, L_b_, L_x_):\n        mul = l_x_ * l_b_\n        return (mul,)\n",
          frame=F1, nodes=_graph1())
    t.add("inductor.output_code", "Inductor output code",
          "def call(args):\n    buf0 = empty_strided_cpu((10, ), (1, ), torch.float32)\n"
          "    cpp_fused_mul_0(arg1_1, arg0_1, buf0)\n    return (buf0, )\n", frame=F1)
    t.add("triton.ttir", "TTIR", TTIR, meta={"kernel": "triton_poi_fused_mul_0", "target": "cuda:90"})
    t.add("triton.ttgir", "TTGIR", TTIR.replace("module {", '#blocked = #ttg.blocked<{sizePerThread = '
          '[4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>\nmodule attributes '
          '{"ttg.num-warps" = 4 : i32, ttg.target = "cuda:90"} {'))
    t.add("triton.llir", "LLVM IR", LLIR)
    t.add("triton.ptx", "PTX", PTX)
    t.add("labkit.loop_ir", "labkit loop IR", LOOP_IR, frame=F0)
    t.add("labkit.schedule", "labkit schedule", SCHEDULE, frame=F0)
    t.add("labkit.cpp", "labkit C++", LABKIT_CPP, frame=F0)
    t.missing("labkit.triton", "labkit Triton", "labkit's Triton codegen did not run: no GPU here "
              "(use TRITON_INTERPRET=1 to run it in the interpreter)", frame=F0)
    t.graph_breaks.append(GraphBreak(
        reason="Data-dependent branching: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`)",
        filename=FILE, lineno=4, code="if b.sum() < 0:", frame=F0))
    t.kernels += [
        Kernel("cpp_fused_abs_add_div_lt_sum_0", "cpp", KERNEL0,
               origins=["abs_1", "add", "div", "sum_1", "lt"], frame=F0),
        Kernel("cpp_fused_mul_0", "cpp", 'extern "C" void kernel(const float* in_ptr0, '
               "const float* in_ptr1, float* out_ptr0) { /* x * b */ }\n", origins=["mul"], frame=F1),
        Kernel("labkit_kernel_0", "cpp", LABKIT_CPP, origins=["abs_1", "add", "div"], frame=F0,
               producer="labkit"),
    ]
    nbytes = 3 * 4 * 10
    t.timings += [
        Timing("eager", 9.1e-6, 0.6e-6, "cpu", {"bytes": nbytes, "threads": 1}),
        Timing("inductor", 4.2e-6, 0.3e-6, "cpu", {"bytes": nbytes, "threads": 1}),
        Timing("labkit", 5.0e-6, 0.4e-6, "cpu", {"bytes": nbytes, "threads": 1}),
        Timing("compile: dynamo", 0.21, 0.0, "cpu", {"stage": "dynamo", "backend": "inductor"}, kind="compile"),
        Timing("compile: aot", 0.12, 0.0, "cpu", {"stage": "aot", "backend": "inductor"}, kind="compile"),
        Timing("compile: inductor", 0.64, 0.0, "cpu", {"stage": "inductor", "backend": "inductor"}, kind="compile"),
        Timing("compile: dynamo", 0.2, 0.0, "cpu", {"stage": "dynamo", "backend": "labkit"}, kind="compile"),
        Timing("compile: labkit", 0.31, 0.0, "cpu", {"stage": "labkit", "backend": "labkit"}, kind="compile"),
        Timing("copy", 4.0e-3, 0.2e-3, "cpu", {"bytes": 2 * 32 * 2**20}, kind="copy"),
    ]
    assert {s.kind for s in t.stages} == set(STAGE_KINDS)
    return t

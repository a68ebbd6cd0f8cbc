"""Triton kernels Inductor generated on a GPU (from figures/recordings/softmax, mlp, toy_example),
kept here so that exercise 7.2 and its grading run without the recordings; :func:`variant` makes
resized, renamed copies of them (the hidden kernels exercise 7.2 is graded on)."""

from __future__ import annotations

import random
import re

KERNELS: dict[str, str] = {
    'triton_per_fused__softmax_exp_prepare_softmax_online_sub_0': 'import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.persistent_reduction(\n    size_hints={\'x\': 256, \'r0_\': 512},\n    reduction_hint=ReductionHint.INNER,\n    filename=__file__,\n    triton_meta={\'signature\': {\'in_ptr0\': \'*fp32\', \'out_ptr2\': \'*fp32\', \'xnumel\': \'i32\', \'r0_numel\': \'i32\', \'XBLOCK\': \'constexpr\'}, \'device\': DeviceProperties(type=\'cuda\', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), \'constants\': {}, \'native_matmul\': False, \'enable_fp_fusion\': True, \'launch_pdl\': False, \'disable_ftz\': False, \'configs\': [{(0,): [[\'tt.divisibility\', 16]], (1,): [[\'tt.divisibility\', 16]], (2,): [[\'tt.divisibility\', 16]], (3,): [[\'tt.divisibility\', 16]]}]},\n    inductor_meta={\'grid_type\': \'Grid1D\', \'autotune_hints\': set(), \'kernel_name\': \'triton_per_fused__softmax_exp_prepare_softmax_online_sub_0\', \'mutated_arg_names\': [], \'optimize_mem\': True, \'no_x_dim\': None, \'atomic_add_found\': False, \'num_load\': 1, \'num_store\': 1, \'num_reduction\': 4, \'backend_hash\': \'91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336\', \'assert_indirect_indexing\': True, \'autotune_local_cache\': True, \'autotune_pointwise\': True, \'autotune_remote_cache\': None, \'force_disable_caches\': True, \'dynamic_scale_rblock\': True, \'max_autotune\': False, \'max_autotune_pointwise\': False, \'min_split_scan_rblock\': 256, \'spill_threshold\': 16, \'store_cubin\': False, \'deterministic\': False, \'force_filter_reduction_configs\': False, \'mix_order_reduction_allow_multi_stages\': False, \'are_deterministic_algorithms_enabled\': False, \'tiling_scores\': {\'x\': 0, \'r0_\': 1572864}}\n)\n@triton.jit\ndef triton_per_fused__softmax_exp_prepare_softmax_online_sub_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):\n    xnumel = 256\n    r0_numel = 512\n    R0_BLOCK: tl.constexpr = 512\n    rnumel = r0_numel\n    RBLOCK: tl.constexpr = R0_BLOCK\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]\n    xmask = xindex < xnumel\n    r0_index = tl.arange(0, R0_BLOCK)[None, :]\n    r0_offset = 0\n    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]\n    roffset = r0_offset\n    rindex = r0_index\n    r0_1 = r0_index\n    x0 = xindex\n    tmp0 = tl.load(in_ptr0 + (r0_1 + 512*x0), xmask, other=0.0)\n    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])\n    tmp3 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])\n    tmp5 = tl.where(xmask, tmp3, float("-inf"))\n    tmp6 = triton_helpers.max2(tmp5, 1)[:, None].to(tl.float32)\n    tmp7 = tmp1 - tmp6\n    tmp8 = libdevice.exp(tmp7)\n    tmp9 = tl.broadcast_to(tmp8, [XBLOCK, R0_BLOCK])\n    tmp11 = tl.where(xmask, tmp9, 0)\n    tmp12 = tl.sum(tmp11, 1)[:, None].to(tl.float32)\n    tmp13 = tmp0 - tmp6\n    tmp14 = libdevice.exp(tmp13)\n    tmp15 = (tmp14 / tmp12)\n    tl.store(out_ptr2 + (r0_1 + 512*x0), tmp15, xmask)',
    'triton_per_fused_lt_sum_0': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.persistent_reduction(\n    size_hints={'x': 1, 'r0_': 1024},\n    reduction_hint=ReductionHint.INNER,\n    filename=__file__,\n    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr1': '*i1', 'xnumel': 'constexpr', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {'xnumel': 1}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused_lt_sum_0', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 1, 'num_store': 1, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'r0_': 4096}}\n)\n@triton.jit\ndef triton_per_fused_lt_sum_0(in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr):\n    xnumel = 1\n    r0_numel = 1024\n    R0_BLOCK: tl.constexpr = 1024\n    rnumel = r0_numel\n    RBLOCK: tl.constexpr = R0_BLOCK\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]\n    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]\n    r0_index = tl.arange(0, R0_BLOCK)[None, :]\n    r0_offset = 0\n    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]\n    roffset = r0_offset\n    rindex = r0_index\n    r0_0 = r0_index\n    tmp0 = tl.load(in_ptr0 + (r0_0), None)\n    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])\n    tmp3 = tl.sum(tmp1, 1)[:, None].to(tl.float32)\n    tmp4 = tl.full([1, 1], 0.0, tl.float32)\n    tmp5 = tmp3 < tmp4\n    tl.store(out_ptr1 + (tl.full([1, 1], 0, tl.int32).broadcast_to(XBLOCK, 1)), tmp5, None)",
    'triton_per_fused_sum_0': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.persistent_reduction(\n    size_hints={'x': 16, 'r0_': 32},\n    reduction_hint=ReductionHint.DEFAULT,\n    filename=__file__,\n    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused_sum_0', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 1, 'num_store': 1, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 1360, 'r0_': 0}}\n)\n@triton.jit\ndef triton_per_fused_sum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):\n    xnumel = 10\n    r0_numel = 32\n    R0_BLOCK: tl.constexpr = 32\n    rnumel = r0_numel\n    RBLOCK: tl.constexpr = R0_BLOCK\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]\n    xmask = xindex < xnumel\n    r0_index = tl.arange(0, R0_BLOCK)[None, :]\n    r0_offset = 0\n    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]\n    roffset = r0_offset\n    rindex = r0_index\n    r0_1 = r0_index\n    x0 = xindex\n    tmp0 = tl.load(in_ptr0 + (x0 + 10*r0_1), xmask, other=0.0)\n    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])\n    tmp3 = tl.where(xmask, tmp1, 0)\n    tmp4 = tl.sum(tmp3, 1)[:, None].to(tl.float32)\n    tl.store(out_ptr0 + (x0), tmp4, xmask)",
    'triton_per_fused_sum_threshold_backward_1': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.persistent_reduction(\n    size_hints={'x': 128, 'r0_': 32},\n    reduction_hint=ReductionHint.DEFAULT,\n    filename=__file__,\n    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused_sum_threshold_backward_1', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 2, 'num_store': 2, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 66560, 'r0_': 0}}\n)\n@triton.jit\ndef triton_per_fused_sum_threshold_backward_1(in_out_ptr0, in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):\n    xnumel = 128\n    r0_numel = 32\n    R0_BLOCK: tl.constexpr = 32\n    rnumel = r0_numel\n    RBLOCK: tl.constexpr = R0_BLOCK\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]\n    xmask = xindex < xnumel\n    r0_index = tl.arange(0, R0_BLOCK)[None, :]\n    r0_offset = 0\n    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]\n    roffset = r0_offset\n    rindex = r0_index\n    r0_1 = r0_index\n    x0 = xindex\n    tmp0 = tl.load(in_out_ptr0 + (x0 + 128*r0_1), xmask, other=0.0)\n    tmp3 = tl.load(in_ptr0 + (x0 + 128*r0_1), xmask, other=0.0)\n    tmp1 = tl.full([1, 1], 0.0, tl.float32)\n    tmp2 = tmp0 <= tmp1\n    tmp4 = tl.where(tmp2, tmp1, tmp3)\n    tmp5 = tl.broadcast_to(tmp4, [XBLOCK, R0_BLOCK])\n    tmp7 = tl.where(xmask, tmp5, 0)\n    tmp8 = tl.sum(tmp7, 1)[:, None].to(tl.float32)\n    tl.store(in_out_ptr0 + (x0 + 128*r0_1), tmp4, xmask)\n    tl.store(out_ptr0 + (x0), tmp8, xmask)",
    'triton_per_fused_sum_threshold_backward_2': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.persistent_reduction(\n    size_hints={'x': 128, 'r0_': 32},\n    reduction_hint=ReductionHint.DEFAULT,\n    filename=__file__,\n    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused_sum_threshold_backward_2', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 2, 'num_store': 2, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 66560, 'r0_': 0}}\n)\n@triton.jit\ndef triton_per_fused_sum_threshold_backward_2(in_out_ptr0, in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):\n    xnumel = 128\n    r0_numel = 32\n    R0_BLOCK: tl.constexpr = 32\n    rnumel = r0_numel\n    RBLOCK: tl.constexpr = R0_BLOCK\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]\n    xmask = xindex < xnumel\n    r0_index = tl.arange(0, R0_BLOCK)[None, :]\n    r0_offset = 0\n    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]\n    roffset = r0_offset\n    rindex = r0_index\n    r0_1 = r0_index\n    x0 = xindex\n    tmp0 = tl.load(in_ptr0 + (x0 + 128*r0_1), xmask, other=0.0)\n    tmp3 = tl.load(in_out_ptr0 + (x0 + 128*r0_1), xmask, other=0.0)\n    tmp1 = tl.full([1, 1], 0.0, tl.float32)\n    tmp2 = tmp0 <= tmp1\n    tmp4 = tl.where(tmp2, tmp1, tmp3)\n    tmp5 = tl.broadcast_to(tmp4, [XBLOCK, R0_BLOCK])\n    tmp7 = tl.where(xmask, tmp5, 0)\n    tmp8 = tl.sum(tmp7, 1)[:, None].to(tl.float32)\n    tl.store(in_out_ptr0 + (x0 + 128*r0_1), tmp4, xmask)\n    tl.store(out_ptr0 + (x0), tmp8, xmask)",
    'triton_poi_fused_abs_add_div_1': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.pointwise(\n    size_hints={'x': 1024}, \n    filename=__file__,\n    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused_abs_add_div_1', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 1, 'num_store': 1, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 12288}},\n    min_elem_per_thread=0\n)\n@triton.jit\ndef triton_poi_fused_abs_add_div_1(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    xnumel = 1024\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:]\n    xmask = xindex < xnumel\n    x0 = xindex\n    tmp0 = tl.load(in_ptr0 + (x0), xmask)\n    tmp1 = tl_math.abs(tmp0)\n    tmp2 = tl.full([1], 1.0, tl.float32)\n    tmp3 = tmp1 + tmp2\n    tmp4 = (tmp0 / tmp3)\n    tl.store(out_ptr0 + (x0), tmp4, xmask)",
    'triton_poi_fused_add_relu_0': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.pointwise(\n    size_hints={'x': 4096}, \n    filename=__file__,\n    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused_add_relu_0', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 2, 'num_store': 1, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 49664}},\n    min_elem_per_thread=0\n)\n@triton.jit\ndef triton_poi_fused_add_relu_0(in_out_ptr0, in_ptr0, xnumel, XBLOCK : tl.constexpr):\n    xnumel = 4096\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:]\n    xmask = tl.full([XBLOCK], True, tl.int1)[:]\n    x2 = xindex\n    x0 = (xindex % 128)\n    tmp0 = tl.load(in_out_ptr0 + (x2), None)\n    tmp1 = tl.load(in_ptr0 + (x0), None, eviction_policy='evict_last')\n    tmp2 = tmp0 + tmp1\n    tmp3 = tl.full([1], 0, tl.int32)\n    tmp4 = triton_helpers.maximum(tmp3, tmp2)\n    tl.store(in_out_ptr0 + (x2), tmp4, None)",
    'triton_poi_fused_mul_0': "import triton\nimport triton.language as tl\n\nfrom torch._inductor.runtime import triton_helpers, triton_heuristics\nfrom torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\nfrom torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties\ntriton_helpers.set_driver_to_gpu()\n\n@triton_heuristics.pointwise(\n    size_hints={'x': 1024}, \n    filename=__file__,\n    triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]]}]},\n    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused_mul_0', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 2, 'num_store': 1, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 16384}},\n    min_elem_per_thread=0\n)\n@triton.jit\ndef triton_poi_fused_mul_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    xnumel = 1024\n    xoffset = tl.program_id(0) * XBLOCK\n    xindex = xoffset + tl.arange(0, XBLOCK)[:]\n    xmask = xindex < xnumel\n    x0 = xindex\n    tmp0 = tl.load(in_ptr0 + (x0), xmask)\n    tmp1 = tl.load(in_ptr1 + (x0), xmask)\n    tmp2 = tl.full([1], -1.0, tl.float32)\n    tmp3 = tmp1 * tmp2\n    tmp4 = tmp0 * tmp3\n    tl.store(out_ptr0 + (x0), tmp4, xmask)",
}


# Sizes a variant may take per kernel: x extent, reduction length (a power of two: these persistent
# reductions hold a whole row in one block), and for the broadcast bias its width.
_POW2 = [8, 16, 32, 64, 128, 256, 512, 1024]
NUMBER = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def variant(name: str, rng: random.Random) -> tuple[str, str, int, int]:
    """A copy of ``KERNELS[name]`` with new sizes and a new name, as Inductor would emit it.

    Returns (new name, source, x elements, reduction length); every literal that stands for a size
    (extents, block sizes, strides, the bias width, size hints) follows the new sizes.
    """
    source = KERNELS[name]
    head, body = source.split("@triton.jit", 1)
    xnumel = int(re.search(r"^\s*xnumel = (\d+)", body, re.M)[1])
    rmatch = re.search(r"^\s*r0_numel = (\d+)", body, re.M)
    sizes: dict[int, int] = {}
    new_x, new_r = xnumel, 0
    if rmatch:
        new_r = rng.choice([v for v in _POW2 if v != int(rmatch[1])])
        sizes[int(rmatch[1])] = new_r
    if "xindex % " in body:                       # a bias broadcast over rows of this width
        width = int(re.search(r"xindex % (\d+)", body)[1])
        new_width = rng.choice([v for v in _POW2 if v not in (width, 8)])
        new_x = new_width * rng.choice([4, 8, 16, 32])
        sizes[width] = new_width
    elif xnumel > 1:
        new_x = rng.choice([v for v in range(3, 3000) if v not in _POW2 and v != new_r])
    if xnumel > 1:
        sizes[xnumel] = new_x
    body = NUMBER.sub(lambda m: str(sizes.get(int(m[1]), m[1])), body)
    hints = f"size_hints={{'x': {_pow2_at_least(new_x)}" + (f", 'r0_': {new_r}}}" if rmatch else "}")
    head = re.sub(r"size_hints=\{[^}]*\}", hints, head)
    new_name = f"{name.rsplit('_', 1)[0]}_{rng.randrange(10)}"
    text = (head + "@triton.jit" + body).replace(name, new_name)
    return new_name, text, new_x, new_r


# -- kernels composed from the templates' pieces ------------------------------------------------------
# A variant keeps its template's structure, so a table keyed on it (the fused ops in the name) would
# answer every field but the sizes. composed() builds kernels none of the 8 templates is: the same
# lines (loads, pointwise ops, masked reductions, stores, in Inductor 2.13's spelling) in new numbers
# and orders, with the answers known from how the kernel was built.
_UNARY = {"abs": "tl_math.abs({a})", "exp": "libdevice.exp({a})",
          "relu": "triton_helpers.maximum({zero}, {a})"}
_BINARY = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "({a} / {b})"}


class _Body:
    """The lines of a kernel body, with fresh ``tmpN`` names; what is not used yet comes first
    when an operand is picked (Inductor computes nothing it does not use)."""

    def __init__(self, rng: random.Random) -> None:
        self.lines: list[str] = []
        self.n = 0
        self.rng = rng
        self.unused: list[str] = []
        self.rows: set[str] = set()           # values with one entry per x (a reduction's results)

    def let(self, expr: str, row: bool = False, constant: bool = False) -> str:
        name = f"tmp{self.n}"
        self.n += 1 + (self.rng.random() < 0.3)       # Inductor's numbering skips removed temps
        self.lines.append(f"    {name} = {expr}")
        if not constant:
            self.unused.append(name)
        if row:
            self.rows.add(name)
        return name

    def pick(self, full: bool = False) -> str:
        pool = [v for v in self.unused if not (full and v in self.rows)]
        if not pool:
            pool = [v for v in self.values() if not (full and v in self.rows)]
        value = self.rng.choice(pool)
        if value in self.unused:
            self.unused.remove(value)
        return value

    def values(self) -> list[str]:
        return [line.split(" = ", 1)[0].strip() for line in self.lines
                if not any(f in line for f in ("tl.full(", "tl.broadcast_to(", "tl.where("))]


def composed(rng: random.Random) -> tuple[str, str, dict[str, object]]:
    """A new Inductor-style Triton kernel: (name, source, the right reading of it).

    Pointwise or a persistent reduction; 1-4 input buffers (at times an ``in_out_ptr`` that is read
    and written back, at times a per-row input), pointwise ops, 1-3 reductions (sum or max, in any
    order) on a reduction, 1-3 output buffers; every value computed is used or stored.
    """
    reduction = rng.random() < 0.6
    rlen = rng.choice(_POW2) if reduction else 0
    x = rng.choice([v for v in range(3, 3000) if v not in _POW2 and v != rlen])
    body, ops = _Body(rng), set()
    zero_dim = "[1, 1]" if reduction else "[1]"
    in_out = rng.random() < 0.3
    n_in = rng.randrange(1, 4) - in_out
    loads = (["in_out_ptr0"] if in_out else []) + [f"in_ptr{i}" for i in range(n_in)]
    if reduction:
        index = rng.choice([f"(r0_1 + {rlen}*x0)", f"(x0 + {x}*r0_1)"])
        mask = "xmask, other=0.0"
    else:
        index, mask = "(x0)", "xmask"
    for p in loads:
        body.let(f"tl.load({p} + {index}, {mask})")
    if reduction and rng.random() < 0.3:      # a per-row input, broadcast along the reduction
        loads.append(f"in_ptr{n_in}")
        body.let(f"tl.load(in_ptr{n_in} + (x0), xmask, eviction_policy='evict_last')", row=True)
    zero: list[str] = []

    def pointwise(binary: bool | None = None) -> None:
        if binary is None:
            binary = rng.random() < 0.5
        if not binary:
            op = rng.choice(sorted(_UNARY))
            if op == "relu" and not zero:
                zero.append(body.let(f"tl.full({zero_dim}, 0, tl.int32)", constant=True))
            a = body.pick(full=True) if reduction else body.pick()
            body.let(_UNARY[op].format(a=a, zero=zero[0] if zero else ""), row=a in body.rows)
        else:
            op = rng.choice(sorted(_BINARY))
            a, b = body.pick(), body.pick()
            body.let(_BINARY[op].format(a=a, b=b), row=a in body.rows and b in body.rows)
        ops.add(op)

    reductions: list[str] = []
    for _ in range(rng.randrange(1, 4) if reduction else 0):
        for _ in range(rng.randrange(0, 3)):
            pointwise()
        kind = rng.choice(["sum", "max"])
        wide = body.let(f"tl.broadcast_to({body.pick(full=True)}, [XBLOCK, R0_BLOCK])")
        body.unused.remove(wide)
        neutral = "0" if kind == "sum" else 'float("-inf")'
        masked = body.let(f"tl.where(xmask, {wide}, {neutral})")
        body.unused.remove(masked)
        call = "tl.sum" if kind == "sum" else "triton_helpers.max2"
        body.let(f"{call}({masked}, 1)[:, None].to(tl.float32)", row=True)
        reductions.append(kind)
        ops.add("sum" if kind == "sum" else "amax")
    for _ in range(rng.randrange(0 if reduction else 1, 3)):
        pointwise()
    while len(body.unused) > 3 or (in_out and not any(v not in body.rows for v in body.unused)):
        pointwise(binary=len(body.unused) > 1)
    # every value not used is written: an in_out_ptr takes a full one back, out_ptrs the others
    stores, outs = [], []
    first_out = rng.randrange(0, 3)
    left = list(body.unused)
    if in_out:
        back = next(v for v in reversed(left) if v not in body.rows)
        left.remove(back)
        stores.append(f"    tl.store(in_out_ptr0 + {index}, {back}, xmask)")
        outs.append("in_out_ptr0")
    for k, value in enumerate(left):
        outs.append(f"out_ptr{first_out + k}")
        where = "(x0)" if value in body.rows else index
        stores.append(f"    tl.store({outs[-1]} + {where}, {value}, xmask)")
    name = (f"triton_{'per' if reduction else 'poi'}_fused_{'_'.join(sorted(ops))}"
            f"_{rng.randrange(10)}")
    params = [*dict.fromkeys(["in_out_ptr0"] * in_out + loads[in_out:] + outs[in_out:])]
    head = [f"    xnumel = {x}"]
    if reduction:
        head += [f"    r0_numel = {rlen}", f"    R0_BLOCK: tl.constexpr = {rlen}",
                 "    rnumel = r0_numel", "    RBLOCK: tl.constexpr = R0_BLOCK",
                 "    xoffset = tl.program_id(0) * XBLOCK",
                 "    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "    xmask = xindex < xnumel",
                 "    r0_index = tl.arange(0, R0_BLOCK)[None, :]", "    r0_offset = 0",
                 "    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]",
                 "    roffset = r0_offset", "    rindex = r0_index", "    r0_1 = r0_index",
                 "    x0 = xindex"]
        args = ", ".join(params + ["xnumel", "r0_numel", "XBLOCK : tl.constexpr"])
    else:
        head += ["    xoffset = tl.program_id(0) * XBLOCK",
                 "    xindex = xoffset + tl.arange(0, XBLOCK)[:]", "    xmask = xindex < xnumel",
                 "    x0 = xindex"]
        args = ", ".join(params + ["xnumel", "XBLOCK : tl.constexpr"])
    template = KERNELS["triton_per_fused_sum_0" if reduction else "triton_poi_fused_mul_0"]
    decorator = template.split("@triton.jit", 1)[0]
    signature = ", ".join([f"'{p}': '*fp32'" for p in params] + ["'xnumel': 'i32'"]
                          + (["'r0_numel': 'i32'"] if reduction else []) + ["'XBLOCK': 'constexpr'"])
    decorator = re.sub(r"'signature': \{[^}]*\}", lambda _: f"'signature': {{{signature}}}", decorator)
    decorator = re.sub(r"'kernel_name': '\w+'", f"'kernel_name': '{name}'", decorator)
    decorator = re.sub(r"'mutated_arg_names': \[[^]]*\]",
                       f"'mutated_arg_names': {['in_out_ptr0'] if in_out else []}", decorator)
    decorator = re.sub(r"'num_load': \d+", f"'num_load': {len(loads)}", decorator)
    decorator = re.sub(r"'num_store': \d+", f"'num_store': {len(stores)}", decorator)
    decorator = re.sub(r"'num_reduction': \d+", f"'num_reduction': {len(reductions)}", decorator)
    hints = f"size_hints={{'x': {_pow2_at_least(x)}" + (f", 'r0_': {rlen}}}" if reduction else "}")
    decorator = re.sub(r"size_hints=\{[^}]*\}", hints, decorator)
    source = "\n".join([decorator + f"@triton.jit\ndef {name}({args}):", *head, *body.lines,
                        *stores])
    reading = {"kind": "reduction" if reduction else "pointwise", "elements": x,
               "reduction_length": rlen, "reductions": reductions,
               "inputs": len(set(loads)), "outputs": len(set(outs))}
    return name, source, reading

#!/usr/bin/env bash
# Run the GPU half of the course on a CUDA machine: record the GPU traces, benchmark, run GPU tests.
# Usage (repo root, torch + triton already installed):  bash tools/gpu_check.sh OUTDIR
# Writes OUTDIR/recordings/*.json, OUTDIR/bench_compiler_gpu.{json,png}, OUTDIR/gpu_tests.log.
# Most valuable first: a run cut short by a time limit still leaves the recordings.
set -uo pipefail
out=${1:?give an output directory}
mkdir -p "$out/recordings"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"
timeout 200 python3 tools/record_gpu.py --out "$out/recordings" 2>&1 | grep -v "^  \[" | tail -8
timeout 150 python3 benchmarks/bench_compiler.py --gpu 2>&1 | tail -25
cp figures/bench_compiler_gpu.* "$out/" 2>/dev/null
python3 -m pytest -q -p no:cacheprovider -o addopts="" -m "gpu or not gpu" --timeout 120 -x \
    tests/test_capture_gpu.py tests/test_compiler_triton.py tests/test_trace.py 2>&1 \
    | tee "$out/gpu_tests.log" | tail -15

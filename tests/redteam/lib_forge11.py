"""Red team 11, D1: one screen-clean C++ case makes the *grader* decode the same big buffer tens
of thousands of times. ``check_call`` accepts ``return [b, b, b, ...]`` (any number of outputs,
each a name the wrapper bound to a tensor); ``_plan`` writes one view per element; ``host.finish``
decodes every view in the grader's own process (``host.decode``: Python floats, one per element, up
to ``MAX_NUMEL`` per view, no bound on the number of views, no time limit), before ``judge``
compares the number of outputs with eager's. Nothing of it is a grade: it stops grading for all.
    python tests/redteam/lib_forge11.py K NUMEL          (in-process: screen, plan, host, decode)
    python tests/redteam/e2e_lib.py lib_forge11 0        (graded as make grade does, sandboxed)
"""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

K, NUMEL = 12, 1 << 22     # the e2e demonstration: 12 views of 4 Mi elements (the screen allows ~80000)

KERNEL = ('extern "C" void kernel0(const float* __restrict__ in_ptr0, float* __restrict__ out_ptr0, '
          'int nthreads)\n{\n    for (int64_t x0 = 0; x0 < 1; ++x0)\n    {\n        auto tmp0 = in_ptr0[x0];\n'
          '        out_ptr0[x0] = tmp0;\n    }\n}')


def flood(case: dict, k: int, numel: int) -> dict:
    """Screen-clean evidence for a C++ case: one launch, then ``b`` returned ``k`` times."""
    shape = case["inputs"][0]["shape"]
    stride = tuple(int(eval("*".join(map(str, shape[i + 1:])) or "1")) for i in range(len(shape)))
    names = ", ".join(f"arg{i}_1" for i in range(len(case["inputs"])))
    call = ("def call(args):\n"
            f"    {names}, = args\n    args.clear()\n"
            f"    buf0 = empty_strided({tuple(shape)}, {stride}, device=device, dtype=torch.float32)\n"
            "    kernel0(arg0_1, buf0)\n"
            f"    b = empty_strided(({numel},), (1,), device=device, dtype=torch.uint8)\n"
            "    return [" + ", ".join(["b"] * k) + "]\n")
    return {"kernels": [{"name": "kernel0", "source": KERNEL, "args": ["arg0_1", "buf0"], "launch": {},
                         "origins": ["log1p"]}], "call": call, "fallbacks": []}


def forged_case(case: dict) -> dict:
    """The first float32 C++ log1p case of a 5.1 draw floods; the others are left as errors."""
    if case["target"] == "cpp" and case["program"] == "log1p" and case["inputs"][0]["dtype"] == "float32":
        return flood(case, K, NUMEL)
    return {"error": "RuntimeError"}


if __name__ == "__main__":
    import resource
    import tempfile
    import time
    from pathlib import Path

    sys.path.insert(0, os.getcwd())
    from labkit.grading import host
    from labkit.grading import libcheck as lc

    k, numel = int(sys.argv[1]), int(sys.argv[2])
    cases, values = lc.draw(0, ("5.1",))
    case = next(c for c in cases if forged_case(c).get("call"))
    ev = flood(case, k, numel)
    print("screen:", repr(lc.screen(case, ev)), "wrapper chars:", len(ev["call"]))
    with tempfile.TemporaryDirectory() as tmp:
        out = lc.execute([case], {case["id"]: ev}, values, Path(tmp), "cpp")
        t = time.monotonic()
        done = host.run_here([case], out, Path(tmp))
    got = done[case["id"]].get("outputs", [])
    print(f"grader decoded {len(got)} outputs, {sum(len(o['values']) for o in got)} values in "
          f"{time.monotonic() - t:.1f} s; grader max RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print("judge:", lc.judge([case], {case["id"]: ev}, done, {}, lc.expect([case], values)))

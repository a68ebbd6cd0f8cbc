"""The C++ cases of the library tasks, run where no Python lives: one ``lk_host`` process per case.

Invariants: a C++ case's kernels run only in ``lk_host`` (C, ``lk_host.c``), started by the grader
once per case in a sandbox of its own that holds nothing but the host, the case's compiled kernels,
its plan and its input bytes. Nothing checks a C++ kernel's addresses, so a kernel can write any
memory of the process it runs in: here, only this case's buffers (red team 8's R1 patched the
source that a later case's Triton kernel compiled, in the process they shared). What comes back is
raw bytes, and this module (stdlib only, in the grader) decodes each output through the view the
plan describes, bounds-checked; the execute step that wrote the plan never sees the kernels run.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Callable
from itertools import product
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("lk_host.c")
FILES = {"kernels.so": 64 << 20, "plan.txt": 1 << 20, "in.bin": 64 << 20}   # name -> most bytes read
MAX_OUT = 256 << 20                # bytes of one case's storages the grader reads back
MAX_OUTPUTS = 16                   # outputs of one case (the programs return one or two)
MAX_DECODED = 1 << 20              # elements of all of one case's outputs the grader decodes
# struct formats of the dtypes a case may return; bfloat16 is read as the top half of a float32
FORMATS = {"float32": "f", "float64": "d", "int64": "q", "int32": "i", "int16": "h", "int8": "b",
           "uint8": "B", "bool": "?", "float16": "e", "bfloat16": "H"}
INDEX_ERROR = 3                    # lk_host's exit status when a kernel reported a bad index

# (folder of the case's files, command) -> (exit status, timed out): a sandbox, or a plain process
Runner = Callable[[Path, list[str]], tuple[int, bool]]


def folder(case_id: str) -> str:
    """The folder of one case's host files (in the execute step's scratch, and the grader's)."""
    return "host-" + re.sub(r"[^0-9A-Za-z]", "_", case_id)


def build(dest: Path) -> Path:
    """Compile ``lk_host`` into ``dest`` (once per grading run; the grader's own compiler)."""
    dest.mkdir(parents=True, exist_ok=True)
    binary = dest / "lk_host"
    # a C compiler, or the C++ one the C++ backend needs anyway (the source is both C11 and C++)
    cc = next(([path, "-std=c11"] for name in ("cc", "gcc", "clang") if (path := shutil.which(name))),
              None) or ([path, "-x", "c++"] if (path := shutil.which(os.environ.get("CXX", "g++"))) else None)
    if cc is None:
        raise RuntimeError("no C or C++ compiler (cc, gcc, clang or $CXX) to build lk_host, which "
                           "runs the library tasks' C++ kernels: install gcc")
    proc = subprocess.run([*cc, "-O2", "-o", str(binary), str(SOURCE), "-ldl"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building lk_host failed:\n{proc.stderr}")
    os.chmod(binary, 0o755)
    return binary


def finish(cases: list[dict[str, Any]], outputs: Any, scratch: Path, work: Path, binary: Path,
           run: Runner) -> Any:
    """``outputs`` of the execute step with every C++ case's plan run by its own host and decoded;
    a C++ case the execute step reports outputs for itself (not a plan) counts as an error."""
    if not isinstance(outputs, dict):
        return outputs
    done = dict(outputs)
    for case in cases:
        if case["kind"] != "program" or case["target"] != "cpp":
            continue
        entry = outputs.get(case["id"])
        if isinstance(entry, dict) and ("refused" in entry or "error" in entry):
            continue
        try:
            done[case["id"]] = run_case(entry, scratch / folder(case["id"]),
                                        work / folder(case["id"]), binary, run)
        except (ValueError, TypeError, KeyError, OSError, struct.error) as exc:
            done[case["id"]] = {"error": f"the kernels' outputs could not be read ({type(exc).__name__})"}
    return done


def run_case(entry: Any, source: Path, work: Path, binary: Path, run: Runner) -> dict[str, Any]:
    """One case: its files copied out of the execute step's scratch, the host run, outputs decoded."""
    if not isinstance(entry, dict) or not isinstance(entry.get("host"), dict):
        raise ValueError("no plan for a C++ case")
    plan = entry["host"]
    sizes, views = plan["storages"], plan["outputs"]
    if not (isinstance(sizes, list) and all(type(s) is int and s >= 0 for s in sizes)
            and sum(sizes) <= MAX_OUT and isinstance(views, list)):
        raise ValueError("storage sizes")
    # counted before anything is decoded (red team 11's D1: one big buffer returned 87,000 times)
    if len(views) > MAX_OUTPUTS or sum(_numel(v) for v in views) > MAX_DECODED:
        return {"error": "more outputs than these programs return"}
    code = work / "code"
    code.mkdir(parents=True)
    folder_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)   # no link, anywhere
    try:
        for name, most in FILES.items():
            (code / name).write_bytes(_read(name, most, folder_fd))
    finally:
        os.close(folder_fd)
    shutil.copyfile(binary, code / "lk_host")
    os.chmod(code / "lk_host", 0o755)
    for path in (work, code):
        os.chmod(path, 0o755)
    out = work / "scratch" / "out.bin"
    rc, timed_out = run(work, [str(code / "lk_host"), *(str(code / n) for n in FILES), str(out)])
    if timed_out:
        return {"error": "the kernels timed out"}
    if rc == INDEX_ERROR:
        return {"error": "IndexError"}
    if rc != 0:
        return {"error": f"the kernels' process failed (exit status {rc})"}
    data = _read(str(out), sum(sizes))
    if len(data) != sum(sizes):
        raise ValueError("short outputs")
    buffers, at = [], 0
    for size in sizes:
        buffers.append(memoryview(data)[at:at + size])
        at += size
    return {"outputs": [decode(v, buffers) for v in views]}


def decode(view: dict[str, Any], buffers: list[memoryview]) -> dict[str, Any]:
    """An output as ``libcheck._encode`` writes a tensor: the plan's view read from its storage."""
    if "values" in view:                   # not a tensor: encoded by the execute step, no values
        return {"dtype": str(view["dtype"]), "shape": [], "values": []}
    dtype, shape, stride = view["dtype"], view["shape"], view["stride"]
    offset, buffer = view["offset"], buffers[view["storage"]]
    if dtype not in FORMATS or not all(type(x) is int for x in [*shape, *stride, offset]) or \
            len(shape) != len(stride) or _numel(view) > MAX_DECODED:
        raise ValueError("an output view this decoder does not read")
    fmt = "=" + FORMATS[dtype]
    size = struct.calcsize(fmt)
    values: list[Any] = []
    for index in product(*map(range, shape)):
        at = offset + sum(i * s for i, s in zip(index, stride))
        if at < 0 or (at + 1) * size > len(buffer):
            raise ValueError("an output view reaches outside its buffer")
        v = struct.unpack_from(fmt, buffer, at * size)[0]
        if dtype == "bfloat16":
            v = struct.unpack("=f", struct.pack("=I", v << 16))[0]
        v = float(v)
        values.append(v if math.isfinite(v) else repr(v))
    return {"dtype": dtype, "shape": list(shape), "values": values}


def _numel(view: Any) -> int:
    """How many elements decoding ``view`` reads (a view not of plain sizes: more than any cap)."""
    shape = view.get("shape") if isinstance(view, dict) else None
    if "values" in view or not isinstance(shape, list):
        return 0 if isinstance(view, dict) and "values" in view else MAX_DECODED + 1
    if len(shape) > 8 or not all(type(x) is int and 0 <= x <= MAX_DECODED for x in shape):
        return MAX_DECODED + 1
    return math.prod(shape)


def _read(path: str, most: int, dir_fd: int | None = None) -> bytes:
    """A file a sandbox wrote (``path`` in ``dir_fd``): capped, no link followed, a regular file
    (else ValueError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{Path(path).name} is not a file")
        data = fh.read(most + 1)
    if len(data) > most:
        raise ValueError(f"{Path(path).name} is larger than a case needs")
    return data


def run_plain(timeout_s: float) -> Runner:
    """A runner without a sandbox (tests, and ``make check`` where bwrap is missing)."""
    def run(work: Path, cmd: list[str]) -> tuple[int, bool]:
        (work / "scratch").mkdir(exist_ok=True)
        try:
            proc = subprocess.run(cmd, cwd=work / "scratch", capture_output=True, timeout=timeout_s,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except subprocess.TimeoutExpired:
            return 0, True
        return proc.returncode, False
    return run


def run_here(cases: list[dict[str, Any]], outputs: Any, scratch: Path, timeout_s: float = 60) -> Any:
    """:func:`finish` with plain processes and a host built in a temporary folder (tests)."""
    with tempfile.TemporaryDirectory(prefix="lk-host-") as tmp:
        binary = build(Path(tmp) / "bin")
        return finish(cases, outputs, scratch, Path(tmp) / "work", binary, run_plain(timeout_s))

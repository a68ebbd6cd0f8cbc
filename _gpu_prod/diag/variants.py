import concurrent.futures as cf, os, subprocess, sys, tempfile, time, zipfile, glob, shutil
OUT = os.environ["OUT"]; W = tempfile.mkdtemp(); D = os.path.dirname(os.path.abspath(__file__))
py = sys.executable
def sh(name, cmd, timeout=90, env=None):
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
        rc, o, e = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as ex:
        rc, o, e = "timeout", str(ex.stdout), str(ex.stderr)
    return f"== {name}: rc {rc} in {time.time()-t:.1f}s\n-- stdout\n{o[-2500:]}\n-- stderr\n{e[-5000:]}\n"
print(sh("env", ["bash", "-c", "gcc --version | head -1; which gdb; nproc; grep -o -w -E 'amx_tile|amx_bf16|avx512f|avx512_vnni' /proc/cpuinfo | sort | uniq -c; uptime"]), flush=True)
with cf.ThreadPoolExecutor(2) as ex:
    jobs = [ex.submit(sh, f"compile {k}", [py, f"{D}/mk.py", f"{W}/{k}.pt2", k], 90,
                      {"TORCHINDUCTOR_CACHE_DIR": f"{W}/ind_{k}"}) for k in ("O0", "default")]
    for j in jobs: print(j.result(), flush=True)
for k in ("O0", "default"):
    p = f"{W}/{k}.pt2"
    if not os.path.exists(p): continue
    x = f"{W}/x_{k}"; zipfile.ZipFile(p).extractall(x)
    so = glob.glob(f"{x}/**/*.so", recursive=True)
    print(sh(f"ldd {k}", ["bash", "-c", f"ldd {so[0]}; readelf -d {so[0]} | grep -E 'NEEDED|RUNPATH|RPATH'; cat {x}/*/data/aotinductor/model/*metadata.json"]), flush=True)
    os.makedirs(f"{OUT}/pkg_{k}", exist_ok=True)
    for f in glob.glob(f"{x}/**/*.cpp", recursive=True) + glob.glob(f"{x}/**/*.json", recursive=True):
        shutil.copy(f, f"{OUT}/pkg_{k}/")
runs = [("O0", m) for m in ("plain", "cudainit", "single", "idx0")] + [("default", "plain")]
with cf.ThreadPoolExecutor(5) as ex:
    res = [ex.submit(sh, f"load {k} {m}", [py, "-X", "faulthandler", f"{D}/load.py", f"{W}/{k}.pt2", f"{W}/{k}.pt2.io.pt", m], 40) for k, m in runs]
    for r in res: print(r.result(), flush=True)
if shutil.which("gdb"):
    print(sh("gdb O0", ["gdb", "-batch", "-ex", "run", "-ex", "bt 40", "--args", py, f"{D}/load.py", f"{W}/O0.pt2", f"{W}/O0.pt2.io.pt"], 45), flush=True)

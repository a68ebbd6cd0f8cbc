import os, subprocess, sys, tempfile, threading, time, shutil
OUT = os.environ["OUT"]; W = tempfile.mkdtemp(); D = os.path.dirname(os.path.abspath(__file__))
t0 = time.time()
def say(m): print(f"[{time.time()-t0:5.1f}s] {m}", flush=True)
# the DDP/Triton cells of 14 (AOTI cells skipped) alongside, for their times
cells = subprocess.Popen([sys.executable, f"{D}/cells.py", "tools/nbsrc/14_production.py", "aoti_"],
                         stdout=open(f"{OUT}/cells14_noaoti.log", "w"), stderr=subprocess.STDOUT,
                         env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{W}/ind_cells"})
import torch
from torch import nn
torch.set_num_threads(1)
say(f"torch {torch.__version__}")
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))
torch.manual_seed(0)
model = MLP().eval(); x = torch.randn(8, 16)
ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
pkg = torch._inductor.aoti_compile_and_package(ep, package_path=f"{W}/m.pt2",
        inductor_configs={"aot_inductor.compile_wrapper_opt_level": "O0"})
say("compiled")
torch.save({"x": x, "eager": model(x).detach(), "x3": torch.randn(3, 16)}, f"{W}/io.pt")
shutil.copy(pkg, f"{OUT}/m.pt2")
env = {k: v for k, v in os.environ.items()}
procs = {}
for mode, extra in (("plain", {"OMP_NUM_THREADS": "1"}), ("noomp", {}), ("cudainit", {"OMP_NUM_THREADS": "1"})):
    e = {**env, **extra}
    if mode == "noomp": e.pop("OMP_NUM_THREADS", None)
    procs[mode] = subprocess.Popen([sys.executable, "-X", "faulthandler", f"{D}/load2.py", pkg, f"{W}/io.pt", mode],
                                   stdout=open(f"{OUT}/load_{mode}.out", "w"), stderr=open(f"{OUT}/load_{mode}.err", "w"), env=e)
def sample():
    for i in range(8):
        time.sleep(5)
        for mode, p in procs.items():
            if p.poll() is None:
                kids = subprocess.run(["ps", "-o", "pid,stat,etime,args", "--ppid", str(p.pid)], capture_output=True, text=True).stdout
                try: wchan = open(f"/proc/{p.pid}/wchan").read(); st = [l for l in open(f"/proc/{p.pid}/status") if l.startswith(("State", "Threads"))]
                except OSError: wchan, st = "?", []
                say(f"{mode} pid {p.pid} alive wchan={wchan} {''.join(st).strip()} children:\n{kids}")
                if i in (3, 6) and shutil.which("py-spy"):
                    r = subprocess.run(["py-spy", "dump", "--native", "--pid", str(p.pid)], capture_output=True, text=True, timeout=20)
                    say(f"py-spy {mode}:\n{r.stdout[-4000:]}{r.stderr[-1000:]}")
            else:
                say(f"{mode} exited {p.returncode}")
threading.Thread(target=sample, daemon=True).start()
t = time.time()
runner = torch._inductor.aoti_load_package(pkg)
say(f"in-process load {time.time()-t:.1f}s; matches: {torch.allclose(runner(x), model(x), atol=1e-6)}")
for mode, p in procs.items():
    try: p.wait(timeout=max(1, 48 - (time.time() - t)))
    except subprocess.TimeoutExpired: p.kill(); say(f"{mode} killed (timeout)")
    say(f"{mode} rc {p.returncode}")
try: cells.wait(timeout=max(1, 150 - (time.time() - t0)))
except subprocess.TimeoutExpired: cells.kill()

import faulthandler, sys, time
t0 = time.time()
faulthandler.dump_traceback_later(10, repeat=True)
def say(m): print(f"[{time.time()-t0:5.1f}s] {m}", file=sys.stderr, flush=True)
say("start")
import json, torch
say(f"torch imported, {torch.__version__}")
mode = sys.argv[3]
torch.set_num_threads(1)
if mode == "cudainit":
    torch.cuda.init(); say("cuda init")
runner = torch._inductor.aoti_load_package(sys.argv[1])
say("loaded")
io = torch.load(sys.argv[2])
y = runner(io["x"])
say("ran")
print(json.dumps({"matches eager": torch.allclose(y, io["eager"], atol=1e-6),
                  "batch 3 shape": list(runner(io["x3"]).shape)}))
say("done")

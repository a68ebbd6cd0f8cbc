import sys, json, torch
mode = sys.argv[3] if len(sys.argv) > 3 else "plain"
torch.set_num_threads(1)
if mode == "cudainit":
    torch.cuda.init()
print("before load", flush=True)
kw = {"run_single_threaded": True} if mode == "single" else {}
if mode == "idx0":
    kw = {"device_index": 0}
runner = torch._inductor.aoti_load_package(sys.argv[1], **kw)
print("loaded", flush=True)
io = torch.load(sys.argv[2])
y = runner(io["x"])
print("ran", flush=True)
print(json.dumps({"matches eager": torch.allclose(y, io["eager"], atol=1e-6),
                  "batch 3 shape": list(runner(io["x3"]).shape)}))

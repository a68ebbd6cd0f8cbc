import sys, time, torch, zipfile, os
from torch import nn
torch.set_num_threads(1)
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))
torch.manual_seed(0)
model = MLP().eval(); x = torch.randn(8, 16)
ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
out = sys.argv[1]; opts = {"aot_inductor.compile_wrapper_opt_level": "O0"} if sys.argv[2] == "O0" else {}
t = time.perf_counter()
p = torch._inductor.aoti_compile_and_package(ep, package_path=out, inductor_configs=opts)
print("compile", round(time.perf_counter() - t, 1), "s", flush=True)
torch.save({"x": x, "eager": model(x).detach(), "x3": torch.randn(3, 16)}, out + ".io.pt")
for n in zipfile.ZipFile(p).namelist(): print(n)

"""Regenerate figures/ from code: the pipeline map and dispatcher path (graphviz), and timing plots
from benchmark JSON (figures/bench_gpu.json from benchmarks/bench_gpu.py -> figures/bench_gpu.svg).

Nothing in figures/ is drawn by hand, so every picture can be rebuilt when torch changes.
"""

from __future__ import annotations

import io
from pathlib import Path

import graphviz

FIGURES = Path(__file__).resolve().parent.parent / "figures"

# (node id, label, notebook) in pipeline order; the edges follow this order.
PIPELINE = [
    ("py", "Python function\n(bytecode)", "01, 02"),
    ("dynamo", "Dynamo\nframe evaluation hook\nsymbolic execution", "02, 03"),
    ("fx", "FX graph\n(torch IR) + guards", "02, 03, 10"),
    ("aot", "AOTAutograd\njoint graph, partition\ncore-ATen decomposition", "04, 11"),
    ("inductor", "Inductor\nloop IR (inner_fn)\nscheduling + fusion", "05"),
    ("cpp", "C++ / SIMD\n+ OpenMP (CPU)", "06"),
    ("triton", "Triton\nTTIR > TTGIR > LLIR > PTX", "07"),
    ("run", "kernels run\n(timing, bandwidth)", "08"),
]
# The rows the map is drawn in, top to bottom: two boxes at most side by side, so that the labels
# stay readable where a notebook is as narrow as a laptop's screen (one row of nine boxes, left to
# right, was scaled to about a third of its size).
ROWS = [("py", "dynamo"), ("inductor", "labkit"), ("cpp", "triton"), ("run", "dispatch")]
# Notebooks that look at the whole pipeline rather than one stage of it.
ACROSS = [("10", "dynamic shapes"), ("11", "training, performance modes"), ("12", "debugging a model"),
          ("13", "controlling compiles"), ("14", "export, production"), ("15", "crashes, accuracy")]


def pipeline_map() -> graphviz.Digraph:
    """The course map: each stage of torch.compile and the notebooks that open it (00-15)."""
    g = graphviz.Digraph("pipeline", graph_attr={"rankdir": "TB", "bgcolor": "white", "fontname": "Helvetica",
                                                 "nodesep": "0.35", "ranksep": "0.45"})
    g.attr("node", shape="box", style="rounded,filled", fillcolor="#eef4fb", fontname="Helvetica", fontsize="14")
    g.attr("edge", fontname="Helvetica", fontsize="12")
    for node, label, nb in PIPELINE:
        g.node(node, f"{label}\n[nb {nb}]")
    g.node("labkit", "labkit.compiler\n(your own Inductor\nin miniature) [nb 05-07]", fillcolor="#fdf1dc")
    g.node("dispatch", "dispatcher: each ATen op\nto its kernel, your own op\n[nb 09]")
    for row in ROWS:
        with g.subgraph() as r:
            r.attr(rank="same")
            for node in row:
                r.node(node)
    g.edge("py", "dynamo")
    g.edge("dynamo", "fx")
    g.edge("dynamo", "py", label="graph break:\nrun in Python,\nresume fn", style="dashed", constraint="false")
    g.edge("fx", "aot")
    g.edge("aot", "inductor")
    g.edge("inductor", "cpp", label="CPU")
    g.edge("inductor", "triton", label="GPU")
    g.edge("cpp", "run")
    g.edge("triton", "run")
    g.edge("aot", "labkit", style="dotted")
    g.edge("labkit", "cpp", style="dotted")
    g.edge("labkit", "triton", style="dotted")
    g.edge("run", "dispatch", style="dotted", label="ATen calls")
    across = "\\l".join(" · ".join(f"{nb} {what}" for nb, what in ACROSS[i:i + 3]) for i in (0, 3))
    g.node("across", f"the whole pipeline, in practice:\\l{across}\\l", shape="note", fillcolor="#f4f4f4",
           fontsize="13")
    g.edge("run", "across", style="invis")
    g.node("start", "00 this overview\\l01 graphs before Dynamo (jit.trace, jit.script)\\l", shape="note",
           fillcolor="#f4f4f4", fontsize="13")
    g.edge("start", "py", style="invis")
    return g


def dispatch_path() -> graphviz.Digraph:
    """Notebook 09: the keys one ``torch.add`` on CPU tensors passes through, in priority order."""
    g = graphviz.Digraph("dispatch", graph_attr={"rankdir": "TB", "bgcolor": "white", "fontname": "Helvetica"})
    g.attr("node", shape="box", style="rounded,filled", fillcolor="#eef4fb", fontname="Helvetica", fontsize="11")
    steps = [
        ("py", "torch.add(x, y)\nPython binding (generated)"),
        ("ops", "at::add -> at::_ops::add_Tensor::call\nschema + cached operator handle"),
        ("keys", "dispatcher: key set =\n(keys of x | keys of y | TLS include) - TLS exclude"),
        ("autocast", "AutocastCPU\nfallthrough unless torch.autocast is on"),
        ("autograd", "AutogradCPU  (VariableType)\nrecord AddBackward0 if grad is needed,\nthen redispatch below autograd"),
        ("view", "ADInplaceOrView\nfallthrough for functional ops"),
        ("cpu", "CPU kernel  (RegisterCPU.cpp)\nat::native::add -> add_stub -> vectorised loop"),
    ]
    for node, label in steps:
        g.node(node, label, fillcolor="#fdf1dc" if node == "cpu" else "#eef4fb")
    for (a, _), (b, _) in zip(steps, steps[1:]):
        g.edge(a, b)
    g.node("python", "Python key\n(FakeTensor, TorchDispatchMode,\nmake_fx: the compiler's tracers)", style="rounded,dashed")
    g.edge("keys", "python", style="dashed", label="if a tensor or mode\ncarries it")
    return g


def gpu_race_svg(path: Path) -> str | None:
    """Notebook 08: the GPU race from ``benchmarks/bench_gpu.py`` (figures/bench_gpu.json), two panels:
    wall time per call (launch overhead on the left, bandwidth on the right) and achieved bandwidth
    from GPU time against the measured copy bandwidth. None when the JSON is missing."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    env = doc["env"]
    labels = list(dict.fromkeys(r["label"] for r in doc["results"]))
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "labkit"})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label in labels:
        rows = sorted((r for r in doc["results"] if r["label"] == label), key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        left.loglog(ns, [r["wall_per_call_s"] * 1e6 for r in rows], marker="o", label=label)
        right.semilogx(ns, [r["bytes"] / r["median_s"] / 1e9 for r in rows], marker="o", label=label)
    copy_gbs = doc["copy"]["bytes"] / doc["copy"]["median_s"] / 1e9
    right.axhline(copy_gbs, color="black", linestyle="--", linewidth=1)
    right.text(right.get_xlim()[0] * 1.3, copy_gbs * 0.93, f"copy bandwidth {copy_gbs:.0f} GB/s", fontsize=8, va="top")
    left.set_title("wall time per call (200 back-to-back calls)", fontsize=10)
    left.set_xlabel("elements"), left.set_ylabel("µs per call")
    right.set_title("achieved bandwidth (GPU time)", fontsize=10)
    right.set_xlabel("elements"), right.set_ylabel("GB/s (read x + write result)")
    right.legend(fontsize=7, loc="center left")
    fig.suptitle(f"sin² + cos² on {env.get('device')} · torch {env.get('torch')} · triton {env.get('triton')} · "
                 f"{env.get('date')}  (benchmarks/bench_gpu.py)", fontsize=9)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return buf.getvalue()


FIGURES_TO_WRITE = {
    "pipeline.svg": pipeline_map,
    "dispatch_path.svg": dispatch_path,
}


def main() -> None:
    """Write every generated figure into figures/."""
    FIGURES.mkdir(exist_ok=True)
    for name, make in FIGURES_TO_WRITE.items():
        svg = make().pipe(format="svg").decode()
        (FIGURES / name).write_text(svg)
        print(f"wrote {FIGURES / name}")
    svg = gpu_race_svg(FIGURES / "bench_gpu.json")
    if svg is None:
        print("skipped bench_gpu.svg: no figures/bench_gpu.json (run benchmarks/bench_gpu.py on a GPU)")
    else:
        (FIGURES / "bench_gpu.svg").write_text(svg)
        print(f"wrote {FIGURES / 'bench_gpu.svg'}")


if __name__ == "__main__":
    main()

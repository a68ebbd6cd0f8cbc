"""A model-sized FX graph on the page: folded by module, signature collapsed, budget kept."""

from __future__ import annotations

import re

import pytest
import torch

import labkit
from labkit.widgets import graph
from labkit.widgets.fold import collapse_signature, folded_html
from labkit.widgets.render import PAGE_BUDGET, Renderer
from labkit.widgets.view import find_lines


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return x + self.norm(self.lin(x)).relu()


@pytest.fixture(scope="module")
def deep_trace():
    """30 blocks: ~240 graph nodes (over the node diagram's limit) and a 122-input signature."""
    model = torch.nn.Sequential(*[Block() for _ in range(30)])
    return labkit.explore(model, torch.randn(2, 4), backend="eager", timing=False, progress=None)


def test_graph_folds_by_module(deep_trace):
    st = deep_trace.stage("dynamo.graph")[0]
    assert {n.module_type for n in st.nodes if n.module} >= {"Linear", "LayerNorm"}
    page = folded_html(st)
    assert page is not None
    blocks = re.findall(r"<summary><code>(\d+)</code> \(Block\) — (\d+) nodes</summary>", page)
    assert [b for b, _ in blocks] == [str(i) for i in range(30)]
    assert all(int(n) >= 4 for _, n in blocks)  # linear, layer_norm, relu, add
    assert "signature: 122 parameters" in page and "more parameters, listed above" in page


def test_static_page_keeps_outline_and_budget(deep_trace):
    st = deep_trace.stage("dynamo.graph")[0]
    cut = folded_html(st, max_chars=2_000)
    assert "lines left out on this page" in cut and cut.count("(Block)") == 30
    page = labkit.show(deep_trace, live=False).html
    assert len(page) <= PAGE_BUDGET
    assert len(st.nodes) > graph.MAX_NODES
    if graph.dot_available():
        assert "drawn by module" in page  # too many nodes for a node diagram: one box per module
    else:  # e.g. the GPU machine: the page says what to install, not "too many nodes"
        assert NO_DOT in page and "diagrams stop at" not in page


NO_DOT = "`dot` is not installed"  # (html.escape changes the quote before it)


@pytest.mark.parametrize("dot", [True, False], ids=["dot", "no dot"])
def test_module_diagram_groups_at_a_depth_that_fits(deep_trace, dot, monkeypatch):
    if dot and not graph.dot_available():
        pytest.skip("graphviz `dot` not installed")
    if not dot:
        monkeypatch.setattr(graph, "dot_available", lambda: False)
    st = deep_trace.stage("dynamo.graph")[0]
    groups, types = graph.module_groups(st)
    assert len(set(groups)) <= graph.MAX_MODULE_BOXES and "Block" in types.values()
    drawn = Renderer(deep_trace).diagram_html(st)
    assert drawn.count("<svg") == (1 if dot else 0)
    assert ("drawn by module" in drawn) == dot and (NO_DOT in drawn) == (not dot)


def test_long_signature_collapses_without_modules():
    text = "def forward(self, " + ", ".join(f'a{i}: "f32[4]"' for i in range(40)) + "):\n    return a0"
    short, params = collapse_signature(text)
    assert len(params) == 41 and "40 more parameters" in short and len(short) < 120


def test_find_lines_numbers_matches():
    out = find_lines(["a = relu(x)", "b = sin(a)", "c = relu(b)"], "RELU")
    assert "2 line(s)" in out and "     1  a = relu(x)" in out and "sin" not in out


def test_live_widget_finds_and_expands_long_texts(deep_trace):
    import ipywidgets as w

    root = labkit.show(deep_trace).widget()

    def walk(x):
        yield x
        for c in getattr(x, "children", ()):
            yield from walk(c)

    boxes = [x for x in walk(root) if isinstance(x, w.Text) and "find in" in x.placeholder]
    assert boxes
    box = boxes[0]
    box.value = "layer_norm"
    hits = next(x for x in walk(root) if isinstance(x, w.HTML) and "line(s) contain" in x.value)
    assert "layer_norm" in hits.value

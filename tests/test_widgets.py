"""labkit.show and its parts: every stage renders, lexers fit, diagrams survive hostile labels,
the static page is complete, deterministic and small. No compiling: Traces come from fixtures/JSON."""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from trace_fixtures import HOSTILE, toy_trace  # noqa: E402

import labkit  # noqa: E402
from labkit.trace import STAGE_KINDS, FxNode, Kernel, Stage, Timing, Trace  # noqa: E402
from labkit.widgets import code, diff, graph, plots, render  # noqa: E402

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` not installed")


@pytest.fixture(scope="module")
def trace() -> Trace:
    return toy_trace()


@pytest.fixture(scope="module")
def page(trace) -> str:
    return labkit.show(trace).html


# -- highlighting ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "language, lexer",
    [("python", "PythonLexer"), ("triton", "PythonLexer"), ("cpp", "CppLexer"),
     ("mlir", "MlirLexer"), ("llvm", "LlvmLexer"), ("ptx", "PtxLexer"), ("pycon", "DisLexer"),
     ("text", "TextLexer"), ("no-such-language", "TextLexer")],
)
def test_highlighting_picks_the_right_lexer(language, lexer):
    assert type(code.lexer_for(language)).__name__ == lexer


def test_every_stage_language_has_a_lexer():
    from labkit.trace import STAGE_LANGUAGE

    for kind, lang in STAGE_LANGUAGE.items():
        assert lang in code.LANGUAGE_LEXER, kind


def test_pycon_console_text_keeps_the_console_lexer():
    assert type(code.lexer_for("pycon", ">>> 1 + 1\n2\n")).__name__ == "PythonConsoleLexer"


def test_own_lexers_colour_the_tokens_that_matter():
    mlir = "".join(code.highlight_lines("%x = tt.load %p : tensor<4x!tt.ptr<f32>> loc(#loc1)", "mlir"))
    assert '<span class="nv">%x</span>' in mlir and '<span class="nb">tt.load</span>' in mlir
    assert '<span class="kt">!tt.ptr</span>' in mlir
    dis_ = "".join(code.highlight_lines("  3           2 LOAD_FAST                0 (a)", "pycon"))
    assert '<span class="k">LOAD_FAST</span>' in dis_


def test_highlighting_keeps_every_line_and_escapes_html():
    text = 'a = "<b>" & 1\n\nif a < 2:\n    pass\n'
    lines = code.highlight_lines(text, "python")
    assert len(lines) == 4
    joined = "".join(lines)
    assert "<b>" not in joined and "&lt;b&gt;" in joined and "&amp;" in joined
    assert re.sub(r"<[^>]+>", "", joined).replace("&lt;", "<").replace("&gt;", ">").replace(
        "&amp;", "&") == text.replace("\n", "")


def test_code_view_has_line_numbers_and_a_plain_copy_view():
    html_ = code.code_html("x = 1\ny = 2\n", "python")
    assert '<td class="lk-ln"><pre>1\n2</pre></td>' in html_  # numbers in their own cell
    plain = code.code_html("x = 1\ny = <2>\n", "python", plain=True)
    assert '<pre class="lk-plain">x = 1\ny = &lt;2&gt;\n</pre>' in plain


def test_long_texts_are_cut_with_a_note():
    text = "\n".join(f"line {i}" for i in range(1000))
    html_ = code.code_html(text, "text", max_lines=50)
    assert "line 49" in html_ and "line 50" not in html_
    assert "950 more lines not shown (1000 in all)" in html_
    short, note = code.truncate("x" * 10, max_chars=100)
    assert (short, note) == ("x" * 10, "")


def test_normalize_removes_run_dependent_names():
    s = ("graph_out_0 = __compiled_fn_2_b832ca95_2e27_4a1c_9d36_1f0e2b3c4d5e(a) at 0x7f3a2b1c4d50 "
         "# kernel path: /tmp/labkit-run-3x9q/inductor/7f/c7fk2abc.py "
         "id 123e4567-e89b-12d3-a456-426614174000")
    assert code.normalize(s) == "graph_out_0 = __compiled_fn_2(a) at 0x… # kernel path: …/c7fk2abc.py id <uuid>"


# -- diff ---------------------------------------------------------------------------------------------
def test_bytecode_diff_ignores_shifted_offsets():
    a = ["  3           2 LOAD_FAST                0 (a)", "              4 RETURN_VALUE"]
    b = ["  3           2 NOP", "              4 LOAD_FAST                1 (a)",
         "              6 RETURN_VALUE"]
    rows = diff.diff_rows(a, b, diff.bytecode_key)
    assert [r.tag for r in rows] == ["add", "same", "same"]


def test_side_by_side_marks_changes(trace):
    html_ = diff.side_by_side_html("a\nb\nc\n", "a\nB\nc\nd\n", "text", titles=("old", "new"))
    assert html_.count("<tr class=lk-chg>") == 1 and html_.count("<tr class=lk-add>") == 1
    assert "1 changed, 1 added, 0 removed" in html_ and ">old<" in html_ and ">new<" in html_


def test_comparisons_cover_bytecode_fusion_and_labkit(trace):
    titles = {c.title for c in render.Renderer(trace).comparisons()}
    assert titles == {"bytecode: original vs transformed", "IR: before vs after fusion",
                      "ATen graph vs labkit loop IR"}


# -- diagrams --------------------------------------------------------------------------------------
HOSTILE_NAMES = ['<b>', '{x|y}', 'say "hi"', "back\\slash", "new\nline", "<html>", "a & b"]


def _hostile_stage() -> Stage:
    nodes = [FxNode(name="x", op="placeholder", target="x", shape=[4], dtype="torch.float32")]
    for i, h in enumerate(HOSTILE_NAMES):
        nodes.append(FxNode(name=f"n{i}", op="call_function", target=h, inputs=[nodes[-1].name],
                            shape=["s0", 4], dtype="torch.float32", source=f"f.py:{i}  {HOSTILE}"))
    nodes.append(FxNode(name=HOSTILE, op="call_function", target=HOSTILE, inputs=["n0"]))
    return Stage("dynamo.graph", "hostile", "", nodes=nodes)


def test_dot_quote_escapes_what_dot_treats_as_syntax():
    assert graph.dot_quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert graph.dot_quote("<x>") == '"<x>"'  # quoted, so never an HTML-like label


@needs_dot
def test_diagrams_survive_hostile_labels():
    stage = _hostile_stage()
    svg = graph.fx_svg(stage, [Kernel("k0", "cpp", "", origins=["n1", "n2"])], highlight=0)
    root = ET.fromstring(svg)  # well-formed XML, whatever the labels held
    texts = "\n".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for h in ["<b>", "{x|y}", 'say "hi"', "back\\slash", "<html>", "a & b"]:
        assert h in texts, h
    assert "line" in texts and "s0, 4" in texts and "f32" in texts


@needs_dot
def test_nodes_of_one_kernel_share_a_colour(trace):
    stage = trace.stage("aot.inference")[0]
    dot = graph.fx_dot(stage, trace.kernels)
    fill = graph.kernel_colors(trace.kernels)[0]
    for i, n in enumerate(stage.nodes):
        in_kernel = n.name in trace.kernels[0].origins
        assert (f'fillcolor="{fill}"' in re.search(rf"  n{i} \[.*\];", dot).group(0)) == in_kernel


def test_provenance_through_source_lines(trace):
    dyn = trace.stage("dynamo.graph")[0]
    r = render.Renderer(trace)
    owner = graph.kernel_of_nodes(dyn, trace.kernels, r.graphs())
    assert owner["x"] == 0  # Dynamo's `x` is ATen's `div`: matched through the user line
    assert owner["sum_1"] == 0 and "l_a_" not in owner
    k0 = trace.kernels[0]
    assert graph.source_lines(k0, r.graphs()) == [f"toy.py:3  {HOSTILE}", "toy.py:4  if b.sum() < 0:"]
    assert [k.name for k in graph.kernels_of_node("mul", trace.stage("dynamo.graph")[1],
                                                    trace.kernels)] == ["cpp_fused_mul_0"]
    assert r.graph_for(k0).kind == "inductor.input"


# -- plots ------------------------------------------------------------------------------------------
def test_timing_plot_is_small_deterministic_svg(trace):
    a, b = plots.timing_svg(trace.timings), plots.timing_svg(trace.timings)
    assert a == b and a.startswith("<svg") and len(a) < 120_000
    ET.fromstring(a)  # compacted (no metadata, coordinates to 0.1), still well-formed
    assert "<metadata" not in a and not re.search(r'="[^"]*\d\.\d\d', a)
    for word in ("eager", "inductor", "labkit", "copy", "compile time by stage"):
        assert word in a
    assert plots.timing_svg([]) is None
    only_run = plots.timing_svg([Timing("eager", 1e-3, 1e-4, "cpu")])
    assert only_run and "bandwidth" not in only_run


def test_fmt_seconds():
    assert [plots.fmt_seconds(x) for x in (2.5, 1.5e-3, 4.2e-6, 3e-9)] == ["2.5 s", "1.5 ms", "4.2 µs", "3 ns"]


# -- the whole view ---------------------------------------------------------------------------------
def test_every_stage_kind_renders(trace):
    r = render.Renderer(trace)
    for kind in STAGE_KINDS:
        for st in trace.stage(kind):
            out = r.stage_html(st)
            assert out
            if st.ok:
                assert "lk-code" in out
            else:
                assert "not captured" in out and code.normalize(st.text)[:20] in out.replace("&#x27;", "'")


def test_static_html_has_every_stage_title_and_part(page, trace):
    for st in trace.stages:
        assert st.title in page
    for k in trace.kernels:
        assert k.name in page
    for step, _ in render.STEPS:
        assert f"<summary>{step} (" in page
    assert page.count("<details") >= len(trace.stages)
    assert "graph break" in page and "if b.sum() &lt; 0:" in page
    assert 'src="data:image/svg+xml;base64,' in page  # the timing plot
    if shutil.which("dot"):
        assert page.count("<svg") >= 4


def test_static_output_is_deterministic_and_free_of_run_names(trace):
    a, b = labkit.show(trace), labkit.show(toy_trace())
    assert a.html == b.html and a.text == b.text
    for out in (a.html, a.text):
        assert "b832ca95" not in out and "0x7f3a" not in out and "labkit-run-" not in out
        assert "2026-11-23" not in out  # no dates in what a notebook stores


def test_mimebundle_outside_a_kernel_is_static(trace):
    bundle = labkit.show(trace)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"].startswith("Trace of toy_example")
    assert len(bundle["text/plain"].splitlines()) < 20


def test_size_bounds(trace):
    html_ = labkit.show(trace).html
    assert len(html_) < 400_000  # a notebook with a few show() outputs stays well under 2 MB
    big = toy_trace()
    big.stages[0].text = "\n".join(f"  {i}    LOAD_FAST   0 (x)" for i in range(50_000))
    big_html = labkit.show(big).html
    assert len(big_html) < len(html_) + 200_000
    assert "more lines not shown" in big_html


def test_big_gpu_like_traces_stay_within_the_page_budget(trace):
    big = Trace.from_dict(trace.to_dict())
    ptx = trace.stage("triton.ptx")[0].text
    for k in range(12):  # a dozen kernels, each with 1,500 lines of PTX and of LLVM IR
        big.add("triton.ptx", f"PTX of kernel {k}", ptx * 75, meta={"kernel": f"k{k}"})
        big.add("triton.llir", f"LLIR of kernel {k}", ptx * 75, meta={"kernel": f"k{k}"})
    page = labkit.show(big).html
    assert len(page) <= render.PAGE_BUDGET * render.PAGE_AIM  # the fitter's aim, by measurement
    assert "long texts are cut to" in page
    for st in big.stages:  # nothing dropped, only cut
        assert st.title in page


RECORDINGS = sorted((Path(__file__).parent.parent / "figures" / "recordings").glob("*.json"))


@pytest.mark.skipif(not RECORDINGS, reason="no GPU recordings in figures/recordings/ yet")
@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_gpu_recordings_render_on_this_machine(path):
    loaded = Trace.from_json(path)
    view = labkit.show(loaded)
    page = view.html
    assert len(page) <= render.PAGE_BUDGET
    for st in loaded.stages:
        assert st.title in page or code.normalize(st.title) in page
    assert view.text.startswith(f"Trace of {loaded.fn_name}")


def test_a_trace_from_json_renders_without_torch_compiling(tmp_path, trace, page):
    path = tmp_path / "toy.json"
    trace.to_json(path)
    loaded = Trace.from_json(path)
    view = labkit.show(loaded)
    assert view.html == page
    assert "kernel cpp_fused_abs_add_div_lt_sum_0 (cpp): 5 nodes" in repr(view)


def test_trace_with_nothing_captured_still_renders():
    t = Trace(fn_name="f", backend="inductor")
    t.missing("dynamo.graph", "Dynamo FX graph", "fn raised before Dynamo ran")
    t.error = "RuntimeError: boom at 0x7f00deadbeef"
    view = labkit.show(t)
    assert "fn raised before Dynamo ran" in view.html and "nothing recorded for this step" in view.html
    assert "0x7f00deadbeef" not in view.html


def test_show_rejects_what_is_not_a_trace():
    with pytest.raises(TypeError, match="labkit.Trace"):
        labkit.show({"stages": []})


def test_widget_builds_with_tabs_per_step_and_provenance(trace):
    pytest.importorskip("ipywidgets")
    from labkit.widgets.view import _TraceWidget

    w = _TraceWidget(render.Renderer(trace))
    assert w.tabs.titles == tuple(step for step, _ in render.STEPS)
    dynamo = w.tabs.children[0]
    assert "original bytecode" in dynamo.titles and "bytecode diff" in dynamo.titles
    assert w.frame_pick.options and w.frame_pick.layout.display == ""
    # picking a kernel: its nodes drawn bold, its source lines listed; picking a node: its kernel
    w.kernel_pick.value = 0
    assert "from your code" in w.kernel_view.value and "toy.py:3" in w.kernel_view.value
    w.node_pick.value = "lt"
    assert "cpp_fused_abs_add_div_lt_sum_0" in w.node_view.value and "toy.py:4" in w.node_view.value
    # another frame: the resume function's graph and kernel
    w.frame_pick.value = trace.frames()[1]
    assert [o[0] for o in w.kernel_pick.options] == ["cpp_fused_mul_0"]
    w.plain_box.value = True
    assert "lk-plain" in w.tabs.children[0].children[0].value


def test_progress_bar_is_silent_outside_a_notebook(capsys):
    from labkit.widgets import progress_bar

    p = progress_bar()
    for step in ("dynamo.graph", "aot.inference", "inductor.output_code", "done"):
        p(step)
    assert capsys.readouterr().out == ""
    assert p.messages == ["dynamo.graph", "aot.inference", "inductor.output_code", "done"]


def test_progress_messages_map_to_pipeline_steps():
    from labkit.widgets.progress import step_of

    assert step_of("bytecode.original") == (1, "Dynamo") == step_of("dynamo.guards")
    assert step_of("aot.backward") == (2, "AOTAutograd")
    assert step_of("inductor.fusion")[1] == "Inductor" and step_of("triton.ttir")[1] == "Triton IR"
    assert step_of("building stages")[1] == "building the trace"
    assert step_of("done")[0] == 8 and step_of("something else") is None


def test_mimebundle_in_a_kernel_adds_the_widget(trace, monkeypatch):
    pytest.importorskip("ipywidgets")
    from labkit.widgets import view

    monkeypatch.setattr(view, "in_kernel", lambda: True)
    bundle = labkit.show(trace)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", view.WIDGET_MIME}
    assert bundle[view.WIDGET_MIME]["model_id"]
    assert bundle["text/html"] == labkit.show(trace).html  # nbconvert/GitHub fall back to this
    assert view.WIDGET_MIME not in labkit.show(trace, live=False)._repr_mimebundle_()


# -- bench: bandwidth and compare -----------------------------------------------------------------
def test_copy_bandwidth_is_measured_and_cached():
    from labkit import bench

    t = bench.copy_bandwidth("cpu", nbytes=8 * 2**20)
    assert t.kind == "copy" and t.meta["bytes"] == 16 * 2**20 and t.median_s > 0
    gbs = bench.achieved_bandwidth(t) / 1e9
    assert 0.05 < gbs < 2000, gbs
    assert bench.copy_bandwidth("cpu", nbytes=8 * 2**20) is t
    assert bench.achieved_bandwidth(Timing("k", 2.0, 0.0, "cpu"), bytes=10) == 5.0
    with pytest.raises(ValueError, match="bytes"):
        bench.achieved_bandwidth(Timing("k", 1.0, 0.0, "cpu"))


def test_compare_reports_missing_backends_instead_of_failing(monkeypatch):
    import torch

    from labkit import bench

    monkeypatch.setitem(sys.modules, "labkit.compiler", None)  # as if labkit's compiler were absent

    def f(x):
        return x * 2 + 1

    r = labkit.compare(f, torch.ones(1024), backends=("eager", "labkit", "no_such_backend"),
                       min_run_time=0.02, bandwidth=False, reset=False)
    assert isinstance(r, bench.CompareResult)
    assert [t.label for t in r.runs()] == ["eager"]
    assert set(r.unavailable) == {"labkit", "no_such_backend"}
    assert "import of labkit.compiler halted" in r.unavailable["labkit"]  # said, not raised
    assert "InvalidBackend" in r.unavailable["no_such_backend"]
    table = r.table()
    assert table.splitlines()[0].split()[:3] == ["backend", "median", "IQR"]
    assert "unavailable" in table and "f on cpu" in table
    assert r.timing("eager").meta["bytes"] == 2 * 1024 * 4
    bundle = r._repr_mimebundle_()
    assert bundle["text/plain"] == table and "<img" in bundle["text/html"]
    with pytest.raises(KeyError, match="labkit"):
        r.timing("labkit")


def test_timings_named_as_explore_names_them():
    ts = [Timing("compile + first call", 7.1, 0.0, "cpu", {"runs": 1}, kind="compile"),
          Timing("compile: dynamo", 0.2, 0.0, "cpu", {"source": "torch compilation_metrics"},
                 kind="compile"),
          Timing("compile: inductor", 6.4, 0.0, "cpu", {}, kind="compile"),
          Timing("eager", 2.7e-5, 7e-6, "cpu", {"threads": 1}),
          Timing("compiled", 8.1e-5, 2e-5, "cpu", {"backend": "inductor"})]
    # a trace saved before Timing had a kind loads with the kind labkit's names gave it
    old = [{k: v for k, v in dataclasses.asdict(t).items() if k != "kind"} for t in ts]
    assert [Timing.from_dict(d) for d in old] == ts
    with pytest.raises(ValueError, match="kind"):
        Timing("x", 1.0, 0.0, "cpu", kind="compiled")
    assert plots.run_label(ts[4]) == "compiled (inductor)"
    assert [plots.compile_row(t) for t in ts[:3]] == ["first call (total)", "by stage", "by stage"]
    assert plots.compile_stage(ts[2]) == "inductor"
    svg = plots.timing_svg(ts)
    assert "compiled (inductor)" in svg and "first call (total)" in svg and "µs" in svg


def test_titles_do_not_repeat_their_frame():
    assert render.titled("FX graph 0 (0/0 f)", "0/0 f") == "FX graph 0 (0/0 f)"
    assert render.titled("FX graph", "0/0 f") == "FX graph — frame 0/0 f"


def test_triton_ir_tab_picks_one_kernel_at_a_time(trace):
    pytest.importorskip("ipywidgets")
    from labkit.widgets.view import _TraceWidget

    t = Trace.from_dict(trace.to_dict())
    t.add("triton.ttir", "TTIR of second", "module { tt.func public @second() { tt.return } }",
          meta={"kernel": "second"})
    t.kernels.append(Kernel("second", "triton", "@triton.jit\ndef second(): pass\n", origins=["lt"]))
    w = _TraceWidget(render.Renderer(t))
    page = w.tabs.children[[s for s, _ in render.STEPS].index("Triton IR")]
    pick, tabs = page.children
    assert list(pick.options) == ["triton_poi_fused_mul_0", "second"]
    assert "triton_poi_fused_mul_0" in tabs.children[0].value
    pick.value = "second"
    assert "@second" in page.children[1].children[0].value
    assert "triton_poi_fused_mul_0" not in page.children[1].children[0].value
    pick.value = "triton_poi_fused_mul_0"
    w.kernel_pick.value = len(t.kernels) - 1  # picking a kernel in the Kernels tab shows its IR
    assert pick.value == "second"


def test_plot_of_a_trace_that_compiled_nothing_warns_nothing():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels" would fail here
        svg = plots.timing_svg([Timing("compile + first call", 1e-3, 0.0, "cpu", {"runs": 1},
                                       kind="compile")])
    assert svg and "first call (total)" in svg


@needs_dot
def test_compact_diagrams_collapse_chains_and_stay_well_formed(trace):
    stage = trace.stage("aot.inference")[0]
    full = graph.fx_svg(stage, trace.kernels)
    small = graph.fx_svg(stage, trace.kernels, collapse=True)
    ET.fromstring(small)
    heads = graph.chains(stage, graph.kernel_of_nodes(stage, trace.kernels))
    assert len(set(heads)) < len(stage.nodes)  # the toy's pointwise run is one chain
    assert small.count("<text") < full.count("<text") and len(small) < len(full)
    assert "ops:" in small and "font-family" not in small.split(">", 1)[1]  # fonts on the root only


@needs_dot
def test_static_page_plans_diagrams_within_their_share(trace):
    big = Trace.from_dict(trace.to_dict())
    r = render.Renderer(big)
    sizes = {id(s): len(r.svg(s) or "") for s in r.graphs()}
    skipped = render.plan_diagrams(big, r, budget=min(sizes.values()) + 10)  # room for one only
    drawn = [s for s in r.graphs() if id(s) not in skipped and r.svg(s)]
    assert len(drawn) >= 1 and skipped
    assert all("no diagram on this static page" in why for why in skipped.values())
    page = render.trace_html(big)
    assert len(page) <= render.PAGE_BUDGET


def test_progress_bar_closes_every_widget_it_made():
    """A live box left behind that names closed children breaks the frontend's restore of all
    widgets after a page refresh (every show output then stays on "Loading widget...")."""
    from labkit.widgets.progress import ProgressBar

    p = ProgressBar(live=True)
    p("dynamo.graph")
    box = p._box
    made = [box, *box.children]
    assert box.comm is not None and all(w.comm is not None for w in made)
    p("done")
    assert [w.comm for w in made] == [None] * len(made)

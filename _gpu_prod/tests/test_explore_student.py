"""labkit.explore on a student's own code: no repeated side effects, errors that name the student's
line, breaks placed in the student's code, clear messages, and static pages that fit.

Real modules, real optimizers, real torch.compile (backend="eager" where the point is Dynamo or
explore itself, not Inductor's code: it compiles in a fraction of the time).
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import labkit
from labkit.orchestrate import explore
from labkit.trace import Trace
from labkit.widgets import render

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _line(marker: str) -> int:
    """Line number (in this file) of the line that holds ``marker``."""
    with open(__file__) as f:
        return next(i for i, ln in enumerate(f, 1) if marker in ln and "_line(" not in ln)


# -- timing never repeats the student's side effects ---------------------------------------------------
def test_adam_inside_fn_steps_once_and_timing_is_skipped():
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    w0 = model.weight.detach().clone()

    def train_step(x):
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss.detach()

    trace = explore(train_step, torch.randn(8, 4), backend="eager", timing=True)
    assert trace.error is None, trace.error
    calls = trace.meta["calls"]["recorded"]
    assert calls == 1 and "timing" not in trace.meta["calls"]
    assert int(opt.state[model.weight]["step"]) == calls  # exactly the calls explore says it made
    assert not torch.equal(model.weight, w0)  # that one step did happen
    skipped = trace.meta["timing_skipped"]
    assert "labkit.compare" in skipped and "variable opt (Adam) stepped" in skipped
    assert not [t for t in trace.timings if t.label in ("eager", "compiled")]
    view = labkit.show(trace, live=False)
    assert "not timed: one call of train_step changed state you can see" in view.text
    assert "<b>not timed:</b>" in view.html and "labkit.compare" in view.html


def test_in_place_input_is_bumped_once_per_recorded_call():
    x = torch.zeros(3)

    def bump(x):
        x.add_(1)
        return x * 2

    trace = explore(bump, x, backend="eager", extra_inputs=[(x,)])
    assert trace.meta["calls"]["recorded"] == 2  # the first call and one extra input
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert trace.meta["side_effects"] == ["input 0 (Tensor) was changed in place"]
    assert "timing_skipped" in trace.meta


class Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_module_call_counter_counts_one_call():
    m = Counted()
    trace = explore(m, torch.randn(2, 3), backend="eager")
    assert m.calls == trace.meta["calls"]["recorded"] == 1
    assert "the module (Counted) changed: attribute calls of Counted" in trace.meta["side_effects"]


def test_global_counter_and_batchnorm_running_stats_are_side_effects():
    bn = nn.BatchNorm1d(4)  # training mode: every call updates running_mean/var

    trace = explore(lambda x: bn(x).relu(), torch.randn(8, 4), backend="eager")
    assert int(bn.num_batches_tracked) == 1
    assert any("buffer num_batches_tracked" in s for s in trace.meta["side_effects"])
    bn.eval()  # eval mode reads the statistics only: nothing changes, so it is timed
    trace = explore(lambda x: bn(x).relu(), torch.randn(8, 4), backend="eager")
    assert "side_effects" not in trace.meta and int(bn.num_batches_tracked) == 1
    assert {"eager", "compiled"} <= {t.label for t in trace.timings}


def test_print_appears_once_and_timing_still_runs():
    def noisy(x):
        print("hello from noisy")
        return x.sin() + 1

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        trace = explore(noisy, torch.randn(16), backend="eager")
    assert out.getvalue().count("hello from noisy") == 1
    assert {"eager", "compiled"} <= {t.label for t in trace.timings}
    assert trace.meta["calls"]["timing"] > 10 and "hidden while timing" in trace.meta["timing_note"]


def test_pure_module_keeps_no_grad_and_the_random_state():
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    x = torch.randn(4, 8)
    torch.manual_seed(1)
    trace = explore(m, x, backend="eager")
    after_explore = torch.get_rng_state()
    torch.manual_seed(1)
    m(x)  # one call, as the recorded one
    assert torch.equal(after_explore, torch.get_rng_state())
    assert m[0].weight.grad is None  # explore's own backward leaves no gradient behind
    assert trace.stage("dynamo.graph") and "side_effects" not in trace.meta
    assert trace.meta["calls"]["timing"] > 10


def test_meta_tensors_are_compiled_but_not_timed():
    trace = explore(lambda x: x.sin() + 1, torch.randn(3, device="meta"), backend="eager")
    assert trace.error is None and trace.stage("dynamo.graph")[0].ok
    assert "meta device" in trace.meta["timing_skipped"]
    assert not [t for t in trace.timings if t.label in ("eager", "compiled")]


# -- errors a student can act on ------------------------------------------------------------------------
def wrong_shapes(a, b):
    return a @ b  # MATMUL-LINE


def test_shape_mismatch_headline_names_the_values_and_the_line():
    trace = explore(wrong_shapes, torch.randn(3, 4), torch.randn(5, 6), backend="eager")
    assert trace.error == "RuntimeError: a and b must have same reduction dim, but got [3, 4] X [5, 6]."
    at = trace.meta["error_at"]
    assert (at["filename"], at["lineno"]) == (__file__, _line("MATMUL-LINE"))
    assert at["code"].startswith("return a @ b")
    (failed,) = [s for s in trace.stages if s.status == "error"]
    assert "RuntimeError when making fake tensor call" in failed.text  # the full chain stays
    assert "error at test_explore_student.py:" in labkit.show(trace).text


def test_missing_fake_kernel_headline():
    @torch.library.custom_op("labkit_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def uses_op(x):
        return twice(x).sin()  # CUSTOM-OP-LINE

    trace = explore(uses_op, torch.randn(4), backend="eager")
    assert trace.error.startswith("RuntimeError: There was no fake impl registered")
    assert "register_fake" in trace.error
    assert trace.meta["error_at"]["lineno"] == _line("CUSTOM-OP-LINE")


def test_bare_lstm_break_is_placed_at_the_users_call():
    lstm = nn.LSTM(4, 8)
    trace = explore(lstm, torch.randn(5, 2, 4), backend="eager")  # LSTM-CALL
    (gb,) = trace.graph_breaks
    assert "Dynamo does not support RNN, GRU, or LSTM" in gb.reason
    assert (gb.filename, gb.lineno) == (__file__, _line("# LSTM-CALL"))
    assert gb.detail.startswith("Dynamo stopped inside torch")


def test_lstm_called_from_fn_breaks_at_that_line():
    lstm = nn.LSTM(4, 8)

    def encode(x):
        y, _ = lstm(x)  # LSTM-IN-FN
        return y.relu()

    trace = explore(encode, torch.randn(5, 2, 4), backend="eager")
    (gb,) = trace.graph_breaks
    assert gb.lineno == _line("LSTM-IN-FN") and gb.code.startswith("y, _ = lstm(x)")
    assert "Dynamo does not support RNN, GRU, or LSTM" in gb.reason  # 2.13 and 2.15 word it apart


def test_notebook_cells_are_labelled_as_ipython_does():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("import torch, labkit", store_history=True)
        cell = ("def brk(a):\n    x = a.sin()\n    if x.sum() > 0:\n        return x + 1\n"
                "    return x - 1\n")
        shell.run_cell(cell, store_history=True)
        n = shell.execution_count - 1
        res = shell.run_cell("t = labkit.explore(brk, torch.ones(4), backend='eager', timing=False)",
                             store_history=True)
        assert res.success, res.error_in_exec
        trace = shell.user_ns["t"]
        (gb,) = trace.graph_breaks
        assert gb.lineno == 3 and gb.code == "if x.sum() > 0:"
        assert trace.meta["source_labels"][gb.filename] == f"cell In[{n}]"
        page, text = labkit.show(trace).html, labkit.show(trace).text
        assert f"cell In[{n}], line 3" in page and f"cell In[{n}], line 3" in text
        sin = next(nd for nd in trace.stage("dynamo.graph")[0].nodes if nd.target == "torch.sin"
                   or nd.target.endswith("sin"))
        assert sin.source == f"cell In[{n}], line 2  x = a.sin()"
    finally:
        InteractiveShell.clear_instance()


# -- clear messages, and saying what a reset discards ---------------------------------------------------
def test_keywords_meant_for_fn_suggest_partial():
    def scale(x, factor=2.0):
        return x * factor

    with pytest.raises(TypeError, match=r"'factor' is a parameter of scale.*functools.partial\(scale"):
        explore(scale, torch.randn(3), factor=3.0)
    trace = explore(functools.partial(scale, factor=3.0), torch.randn(3), backend="eager",
                    timing=False)
    assert trace.error is None


def test_generator_function_is_refused_with_the_reason():
    def gen(x):
        yield x + 1

    with pytest.raises(TypeError, match="generator function.*nothing to compile"):
        explore(gen, torch.randn(3))


def test_reset_says_which_compiled_functions_it_discards():
    def other(x):
        return x.cos()

    def mine(x):
        return x.sin()

    torch.compiler.reset()
    torch.compile(other, backend="eager")(torch.randn(3))
    with pytest.warns(UserWarning, match=r"1 other function\(s\) \(other\)"):
        trace = explore(mine, torch.randn(3), backend="eager", timing=False)
    assert "other" in trace.meta["dynamo_reset"]
    assert "reset Dynamo" in labkit.show(trace).html
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exploring again discards only explore's own code
        again = explore(mine, torch.randn(3), backend="eager", timing=False)
    assert "dynamo_reset" not in again.meta


# -- static pages of real training traces fit, with readable texts --------------------------------------
def _cnn_step():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return train_step, (torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))


class GPTBlock(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def _transformer_step():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    opt = torch.optim.Adam(layer.parameters())

    def train_step(x):
        opt.zero_grad()
        loss = layer(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return train_step, (torch.randn(2, 10, 32),)


def _page_fits(trace: Trace) -> str:
    page = labkit.show(trace, live=False).html
    assert len(page) <= render.PAGE_BUDGET
    assert "lines each" not in page  # never the line-count last resort
    # texts keep at least 2 KB each (about 30 lines), never 8 lines
    assert re.search(r"cut to about [2-9] KB|cut to about \d\d+ KB", page) or "cut to" not in page
    kept = [len(m) for m in re.findall(r"<pre>([^<]*)</pre></td></tr>", page)]
    assert max(kept) > 1_500
    for st in trace.stages:
        assert st.title in page or render.titled(st.title, st.frame) in page
    for k in trace.kernels:
        assert k.name in page
    assert page.count("<svg") >= 1
    assert Trace.from_json(trace.to_json()) == trace
    return page


@pytest.mark.slow
def test_cnn_training_step_page_fits():
    fn, inputs = _cnn_step()
    trace = explore(fn, *inputs, timing=False)
    assert trace.error is None and trace.kernels
    page = _page_fits(trace)
    assert page.count("<svg") >= 3  # the Dynamo graphs and at least one Inductor input graph


@pytest.mark.slow
def test_gpt_block_page_fits():
    trace = explore(GPTBlock(), torch.randn(2, 16, 32), timing=False)
    assert trace.error is None and trace.stage("aot.backward")
    _page_fits(trace)


@pytest.mark.slow
def test_transformer_training_step_page_fits():
    fn, inputs = _transformer_step()
    trace = explore(fn, *inputs, timing=False)
    assert trace.error is None
    _page_fits(trace)

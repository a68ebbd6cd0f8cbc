"""The chapter's known-wrong sentences (issue 12) stay gone from the notebook sources.

A cheap guard, not the real check (that is reading): each entry is a phrase that was once in
``tools/nbsrc`` and was false for the installed torch, or pointed students at material they do not have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "tools" / "nbsrc"
CHAPTER = sorted(p for p in SRC.glob("0[0-9]_*.py"))

# (regex, why it is wrong)
WRONG = [
    (r"\bthe seeds\b|\bseeds'", "students do not have the seed material; say what they have"),
    (r"deprecated since 2\.9", "the installed docstrings say TorchScript is deprecated since 2.5"),
    (r"arbitrary Python \| runs, not recorded \| compile error \| graph break", "02 compiles NumPy in one graph"),
    (r"\(`torch\.mm`, `self\.fc1\(x\)`, `\+`\)", "Dynamo inlines modules: the graph holds linear, not self.fc1"),
    (r"Prims are a\s*(#\s*)?few dozen", "torch._prims.__all__ has over a hundred names; a probe cell counts them"),
    (r"about 180 ops", "core ATen size is counted by a probe cell, not hard-coded"),
    (r"wrapped in `#pragma omp parallel num_threads\(2\)`", "Inductor omits num_threads when it equals the CPU count"),
    (r"each thread takes a chunk of rows", "the pointwise loop is flattened; threads split one loop"),
    (r"4096 elements by default", "config.cpp.min_chunk_size is 512, per thread"),
    (r"Each new size also\s*(#\s*)?triggered one recompile", "five sizes give 2 compiles under automatic dynamic shapes"),
    (r"## 2\. Bytes, not FLOPs", "on the CPU the sin/cos kernel is compute-bound"),
    (r"with \{\[len\(ops\) for ops in seen\]\} ops", "the backend's count missed call_method nodes"),
    (r"loads with `eviction_policy`, `libdevice` math", "the printed Inductor kernel has neither"),
    (r"Explore `lambda x: x\.add_\(1\)\.mul\(2\)`", "functionalization is answered with a before/after example"),
    (r"print\(guards\[:\d+\]\)|\.text\[:\d{3,}\]\)|source\[:\d{3,}\]\)|\.text\[-\d+:\]\)",
     "dumps cut at a character count end mid-word or mid-node"),
    (r'stage\("bytecode\.transformed"\)\[0\]\.meta\["dis"\]\)', "the 181-line dis wall of 03: print the readable frame"),
]


@pytest.mark.parametrize("path", CHAPTER, ids=[p.stem for p in CHAPTER])
def test_known_wrong_sentences_are_gone(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    found = [f"{pattern!r}: {why}" for pattern, why in WRONG if re.search(pattern, text, re.M)]
    assert not found, f"{path.name} still has:\n" + "\n".join(found)


def test_the_chapter_is_there() -> None:
    assert len(CHAPTER) == 10, [p.name for p in CHAPTER]


# Notebooks 13-15 (issue 25), from the independent review: (notebook, wrong phrase that must stay
# gone, right phrase that must be there, why). Regexes allow the "# " of a wrapped markdown line.
_W = r"\s*(?:#\s*)?"
REVIEWED = [
    ("13_controlling_compilation", r"some of them empty of ops", r"each with ops of its own",
     "all four graphs without nested_graph_breaks hold ops (the printed output)"),
    ("13_controlling_compilation", r"recorded as a `flat_apply` call", r"`flat_apply_capture` call",
     "Dynamo records the helper as flat_apply_capture (torch/_dynamo/variables/torch.py)"),
    ("13_controlling_compilation", r"so Inductor can still fuse" + _W + "across them",
     r"nothing fuses across a block" + _W + "boundary",
     "Inductor lowers invoke_subgraph to InvokeSubgraph, an ExternKernel: no fusion across it"),
    ("13_controlling_compilation", r"much cheaper cold starts, little lost",
     r"the whole cold start shrinks less",
     "the notebook's own regional/whole cold ratio on a CPU is about 0.9"),
    ("14_production", r"runs the same" + _W + r"Dynamo front end as `torch\.compile`",
     r"By default \(`strict=False` in torch" + _W + r"2\.13\) it does \*\*not\*\* use Dynamo",
     "torch.export.export defaults to strict=False: non-strict tracing, not Dynamo"),
    ("14_production", r"`torch\.export` is Dynamo with no escape", r"by default it traces non-strictly",
     "torch.export.export defaults to strict=False"),
    ("14_production", r"Where `torch\.compile` would break the graph, export stops",
     r"a branch on a tensor's \*value\*",
     "non-strict export runs prints and C calls; only data-dependent branches error"),
    ("14_production", r"\| graph breaks \| fine", r"\| data-dependent branches \| a graph break",
     "non-strict export does not turn every graph break into an error"),
    ("14_production", r"a graph break is an error here\)", r"a data-dependent branch is an error",
     "non-strict export does not turn every graph break into an error"),
    ("14_production", r"DDP's first" + _W + r"bucket is special: it is capped at 1 MiB",
     r"DDPOptimizer always assumes DDP's default first bucket of 1 MiB",
     "DDP caps its first bucket at 1 MiB only with the default bucket_cap_mb; the DDPOptimizer asserts"),
    ("15_crash_accuracy", r"found the one whose fallback fixes it: `tanh`",
     r"printed by its \*name\* \(`repr\(n\)`",
     "the bisector's debug_info is repr of the FX node (its name), not the op"),
]


@pytest.mark.parametrize("stem,wrong,right,why", REVIEWED, ids=[f"{r[0][:2]}-{i}" for i, r in enumerate(REVIEWED)])
def test_reviewed_phrases(stem: str, wrong: str, right: str, why: str) -> None:
    text = (SRC / f"{stem}.py").read_text(encoding="utf-8")
    assert not re.search(wrong, text), f"{stem}: wrong phrase back ({why})"
    assert re.search(right, text), f"{stem}: corrected phrase missing ({why})"

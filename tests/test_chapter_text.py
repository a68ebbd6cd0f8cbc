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

"""The library's layering, read from its source: private torch/Triton APIs live in one module.

``labkit/_torch/`` (a package) is the only place that may touch ``torch._*``, private attributes Dynamo sets
(``_torchdynamo_*``), ``torch.fx.experimental`` or Triton's compiler and runtime internals. The
check reads the syntax tree (not the text), so docstrings and recorded kernel sources that *mention*
``torch._inductor`` are fine, while an import, an attribute chain, a ``getattr`` name or a logger
name is not. The notebooks' and exercises' sources (``tools/nbsrc``, ``tools/exsrc``) are out of
scope on purpose: they teach ``torch._dynamo`` and ``torch._inductor.config`` to students.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "labkit" / "_torch"   # a package: its submodules group the functions by user
# the restricted-Python policy of graded answers names private modules as data, to refuse them
POLICY = ROOT / "labkit" / "grading" / "restrict.py"
CHECKED = sorted([*(ROOT / "labkit").rglob("*.py"), *(ROOT / "tools").glob("*.py"),
                  *(ROOT / "benchmarks").glob("*.py")])

PRIVATE_MODULE = re.compile(r"^(torch|triton)(\.\w+)*\._[a-zA-Z]|^triton\.(compiler|runtime|backends)\b"
                            r"|^torch\.fx\.experimental\b")
PRIVATE_NAME = re.compile(r"^_(torchdynamo|dynamo|inductor)")
PRIVATE_STRING = re.compile(r"^(torch\._[a-zA-Z]|_torchdynamo)")
TRITON_INTERNALS = {"ASTSource", "GPUTarget", "JITFunction", "InterpretedFunction", "make_fx"}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            out.add(id(body[0].value))
    return out


def private_uses(source: str, strings: bool = True) -> list[tuple[int, str]]:
    """(line, what) for every use of a private torch/Triton API in one module's source.

    ``strings``: count string constants that name one (a policy file names them to refuse them).
    """
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if PRIVATE_MODULE.search(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [a.name for a in node.names]
            if PRIVATE_MODULE.search(node.module) or (
                    node.module.split(".")[0] in ("torch", "triton")
                    and any(n.startswith("_") or n in TRITON_INTERNALS for n in names)):
                found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted and PRIVATE_MODULE.search(dotted):
                found.append((node.lineno, dotted))
            elif PRIVATE_NAME.match(node.attr):
                found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in TRITON_INTERNALS:
            found.append((node.lineno, node.id))
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            if PRIVATE_STRING.match(node.value) or PRIVATE_NAME.match(node.value):
                found.append((node.lineno, repr(node.value)))
    return sorted(set(found))


@pytest.mark.parametrize("source,expected", [
    ("import torch._dynamo", ["import torch._dynamo"]),
    ("from torch._inductor.utils import run_and_get_code", ["from torch._inductor.utils"]),
    ("from torch import _dynamo", ["from torch import _dynamo"]),
    ("import torch\ntorch._dynamo.reset()", ["torch._dynamo"]),
    ("f = getattr(g, '_torchdynamo_orig_callable', g)", ["'_torchdynamo_orig_callable'"]),
    ("g._torchdynamo_orig_callable", ["._torchdynamo_orig_callable"]),
    ("import logging\nlogging.getLogger('torch._inductor')", ["'torch._inductor'"]),
    ("from triton.runtime.jit import JITFunction", ["from triton.runtime.jit"]),
    ("import triton\ntriton.runtime.driver.active", ["triton.runtime"]),
    ("from torch.fx.experimental.proxy_tensor import make_fx", ["torch.fx.experimental"]),
])
def test_the_check_finds_private_uses(source: str, expected: list[str]) -> None:
    found = " | ".join(what for _, what in private_uses(source))
    assert all(e in found for e in expected), found


def test_the_check_allows_public_apis_and_mentions() -> None:
    source = ('"""Reads torch._inductor.config, as a docstring may say."""\n'
              "import torch\nimport torch.fx\nimport triton\nimport triton.language as tl\n"
              "torch.compile(f, backend='inductor')\ntorch.library.custom_op\n"
              "KERNEL = 'from torch._inductor.runtime import triton_helpers'\n"
              "x._parameters\nself._private = 1\n")
    assert private_uses(source) == []


def test_no_private_torch_or_triton_api_outside_labkit_torch() -> None:
    assert HOME.is_dir() and len(CHECKED) > 40
    offenders = [f"{path.relative_to(ROOT)}:{line}: {what}"
                 for path in CHECKED if HOME not in path.parents
                 for line, what in private_uses(path.read_text(encoding="utf-8"),
                                                strings=path != POLICY)]
    assert not offenders, "private APIs belong in labkit/_torch/:\n" + "\n".join(offenders)


def test_labkit_torch_is_where_they_are() -> None:
    """The home itself holds them (so the check above is not vacuous)."""
    text = " ".join(what for path in sorted(HOME.glob("*.py"))
                    for _, what in private_uses(path.read_text(encoding="utf-8")))
    for name in ("torch._dynamo", "torch._inductor", "GPUTarget", "ASTSource", "JITFunction",
                 "'_torchdynamo_orig_callable'"):
        assert name in text, name


# -- the import graph: data flows one way, capture -> Trace -> view ------------------------------
PACKAGE = ROOT / "labkit"
# part of labkit -> parts it must never import, at module level or inside a function
FORBIDDEN = {
    "labkit.trace": {"labkit"},  # the ground floor: plain data, nothing of labkit above it
    "labkit._torch": {"labkit"},  # anything of labkit: the private-API home depends on nothing
    "labkit.capture": {"labkit.widgets", "labkit.compiler", "labkit.orchestrate", "labkit.bench",
                       "labkit.backends", "labkit.notebook"},
    "labkit.compiler": {"labkit.capture", "labkit.widgets", "labkit.orchestrate", "labkit.bench",
                        "labkit.backends", "labkit.notebook"},
    "labkit.widgets": {"labkit.capture", "labkit.compiler", "labkit.orchestrate", "labkit.bench",
                       "labkit.backends", "labkit.perf", "labkit._torch", "labkit.notebook"},
    "labkit.debugger": {"labkit.widgets", "labkit.compiler", "labkit.notebook", "labkit.orchestrate"},
    # backends resolves "labkit"; the notebook layer sits above it (it hands in the progress bar)
    "labkit.orchestrate": {"labkit.widgets", "labkit.compiler", "labkit.notebook"},
    "labkit.bench": {"labkit.widgets", "labkit.compiler", "labkit.capture", "labkit.orchestrate",
                     "labkit.notebook"},
    "labkit.backends": {"labkit.widgets", "labkit.capture", "labkit.orchestrate", "labkit.notebook"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def labkit_imports(source: str) -> set[str]:
    """Every labkit module a source imports, anywhere in it (``from labkit import _torch`` counts
    as ``labkit._torch``)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "labkit"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "labkit":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                is_module = (ROOT / sub.replace(".", "/")).with_suffix(".py").exists() or \
                    (ROOT / sub.replace(".", "/")).is_dir()
                out.add(sub if is_module else node.module)
    return out


def _part(module: str, rules: dict[str, set[str]]) -> str | None:
    return max((p for p in rules if module == p or module.startswith(p + ".")), key=len, default=None)


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every edge of a module -> imports graph that FORBIDDEN rules out."""
    out = []
    for module, imported in sorted(graph.items()):
        part = _part(module, FORBIDDEN)
        if part is None:
            continue
        for target in sorted(imported):
            banned = FORBIDDEN[part]
            if any(target == b or target.startswith(b + ".") for b in banned) and \
                    _part(target, {part: set()}) != part and target != module:  # itself: fine
                out.append(f"{module} imports {target}")
    return out


def test_the_import_check_finds_a_view_imported_by_capture() -> None:
    src = "def f():\n    from labkit.widgets.progress import progress_bar\n    import labkit.compiler\n"
    assert labkit_imports(src) == {"labkit.widgets.progress", "labkit.compiler"}
    assert labkit_imports("from labkit import _torch, trace") == {"labkit._torch", "labkit.trace"}
    graph = {"labkit.capture.aot": labkit_imports(src), "labkit.widgets.view": {"labkit.widgets.code"}}
    assert layering_violations(graph) == ["labkit.capture.aot imports labkit.compiler",
                                          "labkit.capture.aot imports labkit.widgets.progress"]


def test_data_flows_one_way() -> None:
    graph = {module_name(p): labkit_imports(p.read_text(encoding="utf-8"))
             for p in PACKAGE.rglob("*.py")}
    assert {"labkit.capture.aot", "labkit.widgets.view", "labkit.orchestrate", "labkit.bench"} <= set(graph)
    assert not layering_violations(graph), "\n".join(layering_violations(graph))
    # explore and compare reach labkit's compiler and torch's backends in one place
    assert "labkit.backends" in graph["labkit.orchestrate"] and "labkit.backends" in graph["labkit.bench"]


def test_a_moved_private_api_says_which_and_on_which_torch() -> None:
    import torch

    from labkit import _torch

    with pytest.raises(_torch.TorchAPIError, match=r"torch\._dynamo\.no_such_api.*torch " +
                       re.escape(torch.__version__)):
        _torch._api("torch._dynamo", "no_such_api")
    assert _torch._api("torch._dynamo", "reset") is torch._dynamo.reset


def test_the_ground_floor_imports_nothing_of_labkit() -> None:
    """trace.py reads logs through a registered reader, never by importing capture."""
    assert labkit_imports((PACKAGE / "trace.py").read_text(encoding="utf-8")) == set()
    assert layering_violations({"labkit.trace": {"labkit.capture.torch_trace"}}) == \
        ["labkit.trace imports labkit.capture.torch_trace"]


def test_no_module_shadows_a_public_function() -> None:
    """A submodule named like a function of the labkit namespace would rebind that name on import."""
    import labkit

    modules = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    functions = {n for n in labkit.__all__ if labkit._LAZY.get(n) != f"labkit.{n}"} - {"versions"}
    assert "explore" in functions and "orchestrate" in modules
    assert not modules & functions, modules & functions
    import labkit.orchestrate  # noqa: F401  (binds labkit.orchestrate, not labkit.explore)

    assert callable(labkit.explore) and type(labkit.explore).__name__ == "function"

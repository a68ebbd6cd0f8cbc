"""Fix-type tasks: a trusted harness loads the student's answer under a restricted policy and
reports what it measures of it as plain data; the verdict is :func:`evidence.compare`'s, outside.

Per task (``TASKS``): ``params`` draws the hidden inputs from the grader's random stream (trusted
side only: pass 1, or the notebook's own check); ``rules`` computes, from the lesson's original
code (never from an answer), the reference values and the rules a fix must meet; ``measure`` runs
the student's code on those inputs and returns evidence (graph counts, breaks, how often the
compiled graphs ran, outputs, gradients, saved bytes, opcheck results). At grading time a judge
notebook runs, in the submission's sandbox: the notebook's trusted cells, then
:func:`load_answer` (the answer's source, checked by :mod:`labkit.grading.restrict` and run in
a namespace of its own), then :func:`emit_evidence`. The spec (rules and reference values) stays
with nbval, outside. :func:`check` is the same protocol inside a notebook's check cell.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import FunctionCtx

from labkit import _torch
from labkit.grading import evidence as ev
from labkit.grading import nbcheck as nc
from labkit.grading.guards import OpWatch, Seal, guards
from labkit.grading.restrict import (
    MODULES,
    Refused,
    allowed_context,
    check_source,
    module_allowed,
)


# -- what the harness measures with ---------------------------------------------------------------
def gen(seed: int, *shape: int) -> torch.Tensor:
    """A normal tensor from a seed the trusted side drew (the hidden inputs, passed in as numbers)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tensor(t: Any) -> dict[str, Any] | None:
    """A plain tensor's shape and values (float64), or None for anything that is not one."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return None
    flat = torch.Tensor.tolist(t.detach().to(torch.float64).reshape(-1))
    return {"shape": list(t.shape), "values": flat}


def from_dynamo(gm: Any) -> None:
    """Refuse a graph a backend was not handed by Dynamo itself, compiling a frame right now: called
    by hand with an object holding .graph.nodes and .forward, the recorder counted a "graph" and
    recorded eager runs (the fourth red team's G4); called from a backend of the answer's, it was
    handed Dynamo's graph of a trivial function with ``forward`` replaced by eager code, and its
    ``run`` was returned to the answer to call by hand (REPORT5 J4). Called by Dynamo directly,
    the graph is the one Dynamo traced and ``run`` goes to Dynamo's compiled code only."""
    if not (isinstance(gm, torch.fx.GraphModule) and _torch.dynamo_compiling()):
        raise RuntimeError("the backend was called by something other than torch.compile: "
                           "hand it to torch.compile(..., backend=backend)")
    if not _torch.called_by_dynamo(1):          # (who called the backend that called this)
        raise Refused("the check's backend was called by code of yours, not by torch.compile: "
                      "pass it to torch.compile(..., backend=backend) itself")
    shadowed = sorted(k for k in vars(gm) if callable(inspect.getattr_static(type(gm), k, None)))
    if shadowed:                                # (an instance's forward hides the traced code)
        raise Refused(f"the graph's '{shadowed[0]}' was replaced: the check runs the graph "
                      "Dynamo traced")


def recorder(calls: list[tuple[Any, ...]] | None = None
             ) -> tuple[Callable[..., Any], list[int], list[int]]:
    """A Dynamo backend as a plain function (no state a caller can reach), the op counts of the
    graphs it was given, and a list that grows each time one of them runs; with ``calls``, each
    run's graph, a copy of its inputs and its outputs are kept there (for :func:`replayed`)."""
    graphs: list[int] = []
    runs: list[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        from_dynamo(gm)
        graphs.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method")))
        forward = gm.forward

        def run(*args: Any) -> Any:
            runs.append(1)
            if calls is not None:
                calls.append((forward, tuple(a.detach().clone() if type(a) is torch.Tensor else a
                                             for a in args)))
            return forward(*args)
        return run
    return backend, graphs, runs


def _outputs(out: Any) -> list[torch.Tensor]:
    items = out if isinstance(out, tuple | list) else [out]
    return [t for t in items if type(t) is torch.Tensor]


def replayed(calls: list[tuple[Any, ...]], feeds: list[torch.Tensor],
             expect: Callable[[int, torch.Tensor], list[torch.Tensor]]) -> int:
    """How many of the trusted inputs ``feeds`` the compiled graphs did the work on: a graph run
    that took ``feeds[k]`` is run again with another input in its place (``swap(k)``), and must
    give one of ``expect(k, other)`` (a graph that only passes on values computed outside it,
    the dummy compile next to eager work, gives the old value)."""
    done = set()
    for forward, args in calls:
        for i, a in enumerate(args):
            ks = [k for k, f in enumerate(feeds) if k not in done and type(a) is torch.Tensor
                  and a.shape == f.shape and a.dtype == f.dtype and torch.equal(a, f)]
            for k in ks[:1]:
                other = gen(7919 * k + 17, *feeds[k].shape).to(feeds[k].dtype)
                again = [a.clone() if type(a) is torch.Tensor else a for a in args]
                again[i] = other
                with torch.no_grad():      # (an update made in place shows in the inputs)
                    outs = _outputs(forward(*again)) + _outputs(again)
                if any(o.shape == e.shape and torch.allclose(o, e, rtol=1e-4, atol=1e-5)
                       for o in outs for e in expect(k, other)):
                    done.add(k)
    return len(done)


def compiled_stats(graphs: list[int], runs: list[int]) -> dict[str, int]:
    """Graphs (the recorder's and Dynamo's count, the larger), breaks, runs of the compiled graphs."""
    stats = nc.graph_stats()
    return {"graphs": max(len(graphs), stats["graphs"]), "breaks": stats["breaks"],
            "runs": len(runs)}


def close_rule(field: str, want: Any, tol: float, say: str, finite: str | None = None
               ) -> dict[str, Any]:
    """A rule: evidence ``field`` (a tensor entry) equals ``want`` within ``tol``."""
    rule = {"field": field, "rule": "close", "want": tensor(want), "tol": tol, "say": say}
    if finite:
        rule["finite"] = finite
    return rule


def compile_rules(runs: int, most: int = 2, exactly_one: bool = False) -> list[dict[str, Any]]:
    """Graphs compiled (at least one; at most ``most``), no break, the graphs ran ``runs`` times."""
    rules: list[dict[str, Any]] = [
        {"field": "graphs", "rule": "at_least", "value": 1,
         "say": "nothing was compiled with the backend the check passed in"},
        {"field": "breaks", "rule": "eq", "value": 0, "say": "graph breaks"}]
    if exactly_one:
        rules.append({"field": "graphs", "rule": "at_most", "value": 1,
                      "say": "{got} graphs compiled (one graph expected)"})
    else:
        rules.append({"field": "graphs", "rule": "at_most", "value": most,
                      "say": "{got} graphs compiled (at most {limit})"})
    rules.append({"field": "runs", "rule": "at_least", "value": runs,
                  "say": "the compiled graphs did not do the work (they ran {got} times)"})
    return rules


@contextlib.contextmanager
def quiet() -> Any:
    """The student's and the lesson's prints go nowhere (only the evidence line is output)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


# -- the tasks ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fix:
    """One fix-type task: its hidden inputs, its trusted rules, its measurement of an answer."""

    answer: tuple[str, ...]                                         # names the answer defines
    params: Callable[[Any], dict[str, Any]]
    rules: Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]]
    measure: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], dict[str, Any]]
    modules: tuple[str, ...] = ()      # modules the answer may use beyond restrict.MODULES
    source: str = ""                   # a library file: its ``answer`` definitions and what they read
    denied: tuple[str, ...] = ()       # names (imported, called or read) this task's answer may not use
    vet: Callable[[str], None] | None = None   # the task's own check of the source (Refused), first


def _p22(r: Any) -> dict[str, Any]:
    steps, size = r.randrange(9, 16), r.randrange(3, 40)
    return {"size": size, "w": r.randrange(2**31), "g": [r.randrange(2**31) for _ in range(steps)],
            "lrs": [r.uniform(0.01, 0.5) for _ in range(steps)]}


def _in22(p: dict[str, Any]) -> tuple[torch.Tensor, list[torch.Tensor], list[float]]:
    return gen(p["w"], p["size"]), [gen(s, p["size"]) for s in p["g"]], list(p["lrs"])


def _r22(p: dict[str, Any], ctx: dict[str, Any]) -> list[dict[str, Any]]:
    with torch.compiler.set_stance("force_eager"), quiet():
        want_w, want_norms = ctx["train_storm"](*_in22(p))
    # one graph run per step, or one run of a graph that holds the whole loop (REPORT3 H1): the
    # replay below proves either did the update
    return compile_rules(1) + [
        {"field": "work", "rule": "at_least", "value": len(p["g"]) - 1, "after": True,
         "say": "the compiled graphs do not compute the update (run again on other gradients, "
                "they give the old values): the work is done outside them"},
        close_rule("w", want_w, 1e-5, "final w differs from train_storm's"),
        {"field": "norms_floats", "rule": "true", "say": "norms must be a list of Python floats"},
        close_rule("norms", torch.tensor(want_norms, dtype=torch.float64), 1e-5,
                   "norms differ from train_storm's")]


def _m22(p: dict[str, Any], ns: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    calls: list[tuple[Any, ...]] = []
    backend, graphs, runs = recorder(calls)
    nc.fresh()
    # the answer gets copies: what the replay expects is worked out from the harness's own (an
    # answer that zeroed the gradients it was handed made any pass-through graph "do the work")
    got_w, got_norms = ns["train_fixed"](*_in22(p), backend=backend)
    w, grads, lrs = _in22(p)
    floats = isinstance(got_norms, list) and all(type(n) is float for n in got_norms)
    ws, vs = [w], [torch.zeros_like(w)]          # train_storm's states before each step
    for g, lr in zip(grads, lrs):
        vs.append(0.9 * vs[-1] + g)
        ws.append(ws[-1] - lr * vs[-1])

    def expect(k: int, other: torch.Tensor) -> list[torch.Tensor]:
        v = 0.9 * vs[k] + other
        final, u = w, torch.zeros_like(w)     # the whole schedule with gradient k swapped
        for i, (g, lr) in enumerate(zip(grads, lrs)):
            u = 0.9 * u + (other if i == k else g)
            final = final - lr * u
        return [v, ws[k] - lrs[k] * v, final]

    # step 0 starts from v = 0, where passing the gradient on looks like the update: not counted
    work = replayed(calls, grads[1:], lambda k, other: expect(k + 1, other))
    return {**compiled_stats(graphs, runs), "work": work, "w": tensor(got_w),
            "norms_floats": floats,
            "norms": tensor(torch.tensor(got_norms, dtype=torch.float64)) if floats else None}


# 3.3/4.1, 7.1/9.x, 14.1, and 10.2/11.2/12.x, live in modules of their own (they import this one's
# helpers; by now they are defined); the names stay reachable here (tests read harness._kept,
# harness._m102, harness._r41)
from labkit.grading import harness_export as _export  # noqa: E402
from labkit.grading.harness_lessons import _m33, _m41, _p33, _p41, _r33, _r41  # noqa: E402
from labkit.grading.harness_ops import (  # noqa: E402
    _m71,
    _m91,
    _m93,
    _p71,
    _p91,
    _p93,
    _r71,
    _r91,
    _r93,
    _triton_names_kept,  # noqa: F401
    file_shape71,
    launch,  # noqa: F401
)
from labkit.grading.harness_training import (  # noqa: E402
    METHODS12,
    _kept,  # noqa: F401
    _m12,
    _m102,
    _m112,
    _p12,
    _p102,
    _p112,
    _r12,
    _r102,
    _r112,
)

TASKS: dict[str, Fix] = {
    "2.2": Fix(("train_fixed",), _p22, _r22, _m22),
    "3.3": Fix(("ScorerFixed",), _p33, _r33, _m33),
    "4.1": Fix(("softplus",), _p41, _r41, _m41),
    # custom operators are what 9.1 and 9.3 teach; elsewhere torch.library is refused (opaque to
    # Dynamo and to what the checks measure: the red team of session 24)
    "9.1": Fix((), _p91, _r91, _m91, modules=("torch.library",)),
    "9.3": Fix(("clip2_",), _p93, _r93, _m93, modules=("torch.library",)),
    "7.1": Fix(("softmax_kernel",), _p71, _r71, _m71, modules=("triton", "triton.language"),
               source="labkit/exercises/triton_softmax.py", vet=file_shape71),
    "10.2": Fix(("pooled_fixed", "prepare"), _p102, _r102, _m102),
    # 11.2 measures memory through torch's dispatcher and storages: memory kept outside it (numpy
    # copies, Python lists, CPU offload, a saved-tensor hook or an autograd.Function of its own that
    # saves what it likes) would not be counted
    "11.2": Fix(("block_lean",), _p112, _r112, _m112,
                denied=("numpy", "from_numpy", "tolist", "item", "saved_tensors_hooks", "save_on_cpu",
                        "graph", "Function", "register_hook", "register_multi_grad_hook",
                        "array", "frombuffer", "as_strided", "set_", "storage", "untyped_storage",
                        "cpu", "pin_memory")),
    **{t: Fix((name,), _p12, _r12(t), _m12(t)) for t, (name, _) in METHODS12.items()},
    "14.1": Fix(("GateFixed", "DYNAMIC_SHAPES"), _export.params, _export.rules, _export.measure,
                modules=("torch.export",)),
}


# -- the protocol -----------------------------------------------------------------------------------
def spec(task: str, params: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """The trusted spec of a fix-type task at these inputs (the lesson's code only)."""
    return {"kind": "fix", "task": task, "params": params,
            "rules": ev.canonical(TASKS[task].rules(params, ctx))}


def library_answer(task: str, text: str) -> str:
    """From a student's library file, only the definitions the task's answer is and the file's
    definitions and assignments they read (see :func:`judge.library_source`): nothing else of the
    file runs, its imports neither."""
    from labkit.grading.judge import library_source  # (judge needs nbformat: only when used)

    return library_source(text, TASKS[task].answer)


def _deny(source: str, denied: tuple[str, ...]) -> None:
    """Refuse a source that names (as a name, an attribute or an import) one of ``denied``."""
    import ast

    if not denied:
        return
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return                        # check_source reports it
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [part for a in node.names for part in a.name.split(".")]
            names += (node.module or "").split(".") if isinstance(node, ast.ImportFrom) else []
        for name in names:
            if name in denied:
                raise Refused(f"line {node.lineno}: '{name}' is not allowed in this task's answer "
                              "(its memory would escape the measurement)")


def load_answer(task: str, source: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """Run the student's answer source, checked by the restricted policy, in a namespace of its
    own (the notebook's allowed names copied in); a refusal or an error is kept for the evidence."""
    import linecache
    import sys

    name = f"labkit_answer_{task.replace('.', '_')}"
    filename = f"<{name}>"
    extra = TASKS[task].modules
    try:
        _deny(source, TASKS[task].denied)
        if TASKS[task].vet is not None:
            TASKS[task].vet(source)
        code = check_source(source, filename, extra)
    except Refused as exc:
        return {"__refused__": str(exc)}
    # the source where inspect finds it (triton.jit reads its function's source)
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name)      # a real module: Dynamo and classes find their globals
    module.__dict__.update(allowed_context(ctx, extra))
    module.__dict__.update(guards(name, str(ctx.get("__name__", "__main__")),
                                  writable=(FunctionCtx,), held=(torch.nn.Module,),
                                  modules=MODULES | frozenset(extra)))
    module.__file__ = filename
    sys.modules[name] = module
    _torch.install_dynamo_patches()      # Dynamo's own first-compile patches, done now
    seal = Seal(_sealed(), _torch.counters)   # what the harness measures with, as it was
    module.__dict__["__opwatch__"] = OpWatch()  # the operators' kernels, as they were
    try:
        with quiet():
            exec(code, module.__dict__)
    except Refused as exc:               # a guard refused a store or a read at run time
        module.__dict__["__refused__"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - the student's code raised: evidence says so
        module.__dict__["__error__"] = f"your answer raised {type(exc).__name__}"
    stray = sorted(k for k, v in module.__dict__.items() if isinstance(v, types.ModuleType)
                   and not module_allowed(v, MODULES | frozenset(extra)))
    if stray and "__refused__" not in module.__dict__:   # (a route around the import check)
        module.__dict__["__refused__"] = f"your answer holds a module it may not use ({stray[0]})"
    module.__dict__["__seal__"] = seal
    return module.__dict__


def _sealed() -> list[tuple[str, Any]]:
    """What the harness measures with: torch's entry points, its own modules, the judge's."""
    import builtins
    import sys

    from labkit.grading import restrict

    spaces = [("torch", torch), ("torch.library", torch.library), ("torch.autograd",
              torch.autograd), ("torch.autograd.graph", torch.autograd.graph),
              ("torch.compiler", torch.compiler), ("torch.nn", torch.nn),
              ("torch.nn.functional", torch.nn.functional), ("torch.Tensor", torch.Tensor),
              ("torch.nn.Module", torch.nn.Module), ("the harness", sys.modules[__name__]),
              ("nbcheck", nc), ("evidence", ev), ("restrict", restrict),
              ("labkit._torch", _torch), ("json", json), ("builtins", builtins),
              ("contextlib", contextlib), ("io", io), ("the harness's tasks", TASKS)]
    # every labkit.grading module loaded (harness_ops was outside the seal: REPORT5 J1 replaced
    # its launch and kernel check), with its functions' code and its classes (Seal.parts), and
    # labkit._torch's submodules: the package only re-exports, the functions are theirs (Seal.parts
    # takes a module's own functions), and they call one another through their own globals
    held = {id(space) for _, space in spaces}
    spaces += [(m, sys.modules[m]) for m in sorted(sys.modules)
               if m.startswith(("labkit.grading.", "labkit._torch.")) and id(sys.modules[m]) not in held]
    return spaces + [(f"torch's {m}", sys.modules[m]) for m in _torch.DYNAMO_MODULES
                     if m in sys.modules]


def measure(task: str, ns: dict[str, Any], params: dict[str, Any], ctx: dict[str, Any]
            ) -> dict[str, Any]:
    """The evidence of the loaded answer ``ns`` on the trusted ``params`` (plain data); nothing
    but that it changed them, if the answer changed what the harness measures with."""
    seal = ns.get("__seal__")
    found = _measure(task, ns, params, ctx)
    changed = seal.broken() if isinstance(seal, Seal) else []
    changed += _ops_changed(ns)
    if changed and "refused" not in found:
        return {"error": f"your answer changed {', '.join(changed[:3])}, which the check uses"}
    return found


def _ops_changed(ns: dict[str, Any]) -> list[str]:
    """The operator registrations the answer made that the policy forbids (see OpWatch)."""
    watch = ns.get("__opwatch__")
    return watch.broken() if isinstance(watch, OpWatch) else []


def _measure(task: str, ns: dict[str, Any], params: dict[str, Any], ctx: dict[str, Any]
             ) -> dict[str, Any]:
    if "__refused__" in ns:
        return {"refused": ns["__refused__"]}
    if "__error__" in ns:
        return {"error": ns["__error__"]}
    missing = [n for n in TASKS[task].answer if n not in ns]
    if missing:
        return {"error": f"{', '.join(missing)} is not defined"}
    seal = ns.get("__seal__")
    if (isinstance(seal, Seal) and seal.broken()) or _ops_changed(ns):
        return {}                        # (measure says what changed)
    try:
        with quiet():
            found = TASKS[task].measure(params, ns, ctx)
    except Refused as exc:
        return {"refused": str(exc)}
    except NotImplementedError:
        return {"error": f"{', '.join(TASKS[task].answer) or 'the answer'} is not implemented yet"}
    except Exception as exc:  # noqa: BLE001 - reported by name only
        refused = _refusal(exc)
        if refused is not None:      # a recorder's refusal, wrapped by Dynamo (BackendCompilerFailed)
            return {"refused": refused}
        if "NotImplementedError" in str(exc):          # a stub, wrapped by Triton's interpreter
            return {"error": f"{', '.join(TASKS[task].answer)} is not implemented yet"}
        return {"error": f"the check raised {type(exc).__name__} running your answer"}
    return found


def _refusal(exc: BaseException) -> str | None:
    """The text of a :class:`Refused` that ``exc`` was raised from (or while handling), if any."""
    found: BaseException | None = exc
    for _ in range(8):
        if found is None or isinstance(found, Refused):
            break
        found = found.__cause__ or found.__context__
    return str(found) if isinstance(found, Refused) else None


def emit_evidence(task: str, ns: dict[str, Any], params_json: str, ctx: dict[str, Any]) -> None:
    """A judge notebook's graded cell: print the evidence line, nothing else."""
    found = measure(task, ns, json.loads(params_json), ctx)
    try:
        ev.emit(found)
    except (TypeError, ValueError):
        ev.emit({"error": "the evidence was not plain data"})


def answer_cell(task: str, ctx: dict[str, Any]) -> str | None:
    """The source of the last cell the notebook ran (IPython's ``In``) that defines every name of
    the task's answer at top level; None outside IPython (then the check measures ``ctx`` as is)."""
    import ast

    cells = ctx.get("In")
    if not isinstance(cells, list):
        return None
    for source in reversed(cells):
        if not isinstance(source, str):
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        if TASKS[task].answer and set(TASKS[task].answer) <= defined:
            return source
    return None


def _top_names(source: str) -> set[str]:
    """The names a cell binds at top level (definitions, assignments, imports)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = {a.asname or a.name.partition(".")[0] for n in tree.body
             if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    return names | {n.id for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)
                    for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                    } | {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def _without_other_answers(ctx: dict[str, Any], source: str) -> dict[str, Any]:
    """The notebook's names less those only *other* answer cells bind: a judge notebook holds the
    lesson and this one answer, so the check says what grading will (REPORT3 H7: a helper from
    12.1's cell passed 12.2's check in the notebook and failed grading with a NameError)."""
    cells = [c for c in ctx.get("In", []) if isinstance(c, str) and c != source]
    answers = [c for c in cells if c.lstrip().startswith("# your answer")]
    lesson = set().union(*(_top_names(c) for c in cells if c not in answers))
    only = set().union(*(_top_names(c) for c in answers)) - lesson - _top_names(source)
    return {k: v for k, v in ctx.items() if k not in only}


def check(task: str, ctx: dict[str, Any]) -> None:
    """A notebook's check cell: the same protocol in the student's own kernel (``make check`` and
    grading run it as a judge notebook instead). In pass 1 it only records the trusted spec."""
    if not nc.selected(task):
        return
    params = TASKS[task].params(nc.rng(task))
    trusted = spec(task, ev.canonical(params), ctx)
    if nc.measuring():
        nc.record(trusted)
        print(f"Task {task}: measured")
        return
    ns = dict(ctx)
    if TASKS[task].source:       # the library answer as grading loads it (judge.library_source)
        import importlib

        path = importlib.import_module("labkit").__path__[0] + "/../" + TASKS[task].source
        with open(path) as fh:
            ns = load_answer(task, library_answer(task, fh.read()), ctx)
    else:                        # the answer cell as grading loads it: restricted, in its own module
        source = answer_cell(task, ctx)
        if source is not None:
            from labkit.grading.judge import outside_names

            outside = outside_names(task, source, ctx)
            if outside:          # grading would raise NameError: say so here, not PASS (H7)
                it = "it" if len(outside) == 1 else "them"
                nc.verdict(task, [f"your answer uses {', '.join(outside)}, defined outside this "
                                  f"task's answer cell; grading runs the lesson's cells and this "
                                  f"answer cell only: define {it} in the answer cell"])
                return
            ns = load_answer(task, source, _without_other_answers(ctx, source))
    found = ev.canonical(measure(task, ns, trusted["params"], ctx))
    nc.verdict(task, ev.compare(trusted, found, echo=True))



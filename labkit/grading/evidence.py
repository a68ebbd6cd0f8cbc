"""Evidence as plain data, and the one comparison that judges it (imports nothing but the stdlib).

A student's process only *prints* evidence: one line ``EVIDENCE {json}`` per graded cell (its
predictions for the grader's cases, or what the harness measured of its code on the grader's
inputs). The trusted side holds the matching spec, ``EVIDENCE-SPEC {json}``: the measured answers
of the cases (predictions) or the rules a fix must meet with the reference values (fix-type
tasks). :func:`compare` judges one against the other and says what was wrong in words that never
state an expected value. At grading time it runs inside the trusted nbval process (the runner
plugin's output comparison), never in a sandbox; in a notebook's own check cell the same function
prints the student's PASS/FAIL line.

This module must import without torch: the predictions' judge notebooks load it by path in a kernel
where torch is absent.
"""

from __future__ import annotations

import builtins
import json
import math
import re
from typing import Any

MARK = "EVIDENCE "
SPEC = "EVIDENCE-SPEC "
MAX_LINE = 8 << 20                      # characters of one evidence line the judge reads


def plain(value: Any) -> Any:
    """``value`` rebuilt from the base types (None, bool, int, float, str, lists, dicts); tuples
    become lists, numpy scalar numbers the Python numbers they hold; anything else (an object whose
    ``==`` says yes to everything) is a :class:`NotPlain` (a TypeError)."""
    if value is None or type(value) is bool:
        return value
    for base, exact in ((int, int.__int__), (float, float.__float__), (str, str.__str__)):
        if isinstance(value, base):
            return exact(value)  # the base type's own conversion: a subclass's overrides don't run
    if _numpy_scalar(value):
        # np.prod and friends return numpy integers (the third red team's H9): .item() gives the
        # exact Python number; only a genuine int, float or bool is taken from it
        item = value.item()
        if type(item) in (bool, int, float):
            return item
        raise NotPlain(f"evidence is plain data (numbers, strings, lists), not {kind(value)}")
    for seq in (tuple, list):
        if isinstance(value, seq):
            return [plain(v) for v in seq.__iter__(value)]
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in dict.items(value)}
    raise NotPlain(f"evidence is plain data (numbers, strings, lists), not {kind(value)}")


class NotPlain(TypeError):
    """A value that is not plain data (raised by :func:`plain`, never by a student's function)."""


def _numpy_scalar(value: Any) -> bool:
    """Whether ``value`` is a numpy scalar (numpy.generic), found without importing numpy."""
    return any(c.__module__ == "numpy" and c.__name__ == "generic" for c in type(value).__mro__)


NUMPY_KINDS = {"bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "longdouble", "complex64", "complex128",
               "clongdouble", "str_", "bytes_", "void", "datetime64", "timedelta64", "object_"}


def kind(value: Any) -> str:
    """A value's type as feedback may name it: a builtin's or numpy's own type, else a fixed phrase
    (a class of the student's could carry what it saw in its name)."""
    import sys

    cls = type(value)
    if getattr(builtins, cls.__name__, None) is cls:
        return cls.__name__
    numpy = sys.modules.get("numpy")
    if numpy is not None and cls.__name__ in NUMPY_KINDS and getattr(numpy, cls.__name__, None) is cls:
        return f"numpy.{cls.__name__}"
    return "an object of a class of its own"


NOT_PLAIN = "not plain data: "      # a prediction's entry when it returned a value plain refuses


def _known_kind(text: str) -> str:
    """A kind read back from evidence (a student's process wrote it): one :func:`kind` can give,
    else the fixed phrase (feedback repeats no other text of theirs)."""
    if text.startswith("numpy."):
        known = text[len("numpy."):] in NUMPY_KINDS
    else:
        known = isinstance(getattr(builtins, text, None), type)
    return text if known else "an object of a class of its own"


def converted(value: Any) -> Any:
    """A returned prediction as canonical plain data, or ``NOT_PLAIN`` + its kind (it did not
    raise: it returned something that is not a number, string, list or dict)."""
    try:
        return canonical(value)
    except NotPlain:
        return NOT_PLAIN + _outer_kind(value)


def _outer_kind(value: Any) -> str:
    """The kind of the first value ``plain`` refuses inside ``value`` (lists, tuples, dicts)."""
    if type(value) in (list, tuple):
        for v in value:
            try:
                plain(v)
            except NotPlain:
                return _outer_kind(v)
    if type(value) is dict:
        for v in [*value.keys(), *value.values()]:
            try:
                plain(v)
            except NotPlain:
                return _outer_kind(v)
    return kind(value)


def canonical(value: Any) -> Any:
    """Plain data compared by value: integral floats as ints, non-finite floats as strings."""
    value = plain(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        return int(value) if value.is_integer() else value
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    return value


def line(kind: str, payload: Any) -> str:
    """One evidence (``MARK``) or spec (``SPEC``) line."""
    return kind + json.dumps(payload, sort_keys=True, allow_nan=False)


def emit(payload: Any) -> None:
    """Print the evidence line (the only output of a judge cell that is compared)."""
    print(line(MARK, canonical(payload)))


def parse(text: str, kind: str) -> tuple[Any, str]:
    """The payload of the one ``kind`` line in ``text``, or (None, why not)."""
    found = [ln for ln in text.splitlines() if ln.startswith(kind)]
    if len(found) != 1:
        return None, f"the check printed {len(found)} evidence lines (1 expected)"
    if len(found[0]) > MAX_LINE:
        return None, "the evidence line is too long"
    try:   # NaN and Infinity are refused: NaN compares as close to anything (red team, A2)
        return json.loads(found[0][len(kind):], parse_constant=_no_constant), ""
    except ValueError:
        return None, "the evidence line is not JSON (or holds NaN or Infinity)"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not plain data")


# The only error texts feedback repeats: the harness's own wordings. Anything else a student's
# process printed as an "error" could carry what it saw (the hidden cases), so it is not echoed.
HARNESS_ERRORS = re.compile(r"^(?:[\w, .]{1,80} is not (?:defined|implemented yet)"
                            r"|the check raised \w{1,40} running your answer"
                            r"|your answer changed [\w., ']{1,300}, which the check uses"
                            r"|the evidence was not plain data)$")
BUILTIN_ERRORS = {n for n, v in vars(builtins).items()
                  if isinstance(v, type) and issubclass(v, BaseException)}
BUILTIN_ERRORS.add("CompileDuringPrediction")   # nbcheck's own: a prediction that compiled


# -- predictions -----------------------------------------------------------------------------------
def predict_all(fn: Any, cases: list[list[Any]]) -> list[Any]:
    """``fn(*case)`` for every case, each on a fresh copy, as plain data; an exception becomes
    the string 'error: Name' (a broken prediction is a wrong prediction), a value that is not
    plain data ``NOT_PLAIN`` + its kind."""
    out = []
    for case in cases:
        try:
            value = fn(*json.loads(json.dumps(case)))
        except Exception as exc:  # noqa: BLE001
            out.append(f"error: {type(exc).__name__}")
            continue
        out.append(converted(value))
    return out


def prediction_problems(name: str, predicted: list[Any], expected: list[Any], noun: str,
                        unit: str | None = None, fields: list[str] | None = None,
                        cases: list[str] | None = None) -> list[str]:
    """What was wrong with a list of predictions, in counts and field names only.

    The line names the wrong cases by their index in the check's list (from 0); ``unit`` names what
    numeric predictions count, to say how many were too low or too high; ``fields`` names the parts
    of a structured answer (a dict's keys, or a tuple's positions), to say which were wrong.
    ``cases`` (the inputs' reprs) is given only where the inputs are visible ones (the student's
    own check, seed 0): the first wrong cases' inputs are then shown, never a measured answer.
    """
    found = _prediction_problems(name, predicted, expected, noun, unit, fields)
    if not found or not cases or len(cases) != len(expected) or " wrong (" not in found[0]:
        return found                  # all right, inputs not visible, or no per-case verdict
    wrong = [k for k, (p, e) in enumerate(zip(canonical(predicted), canonical(expected)))
             if _differs(p, e, fields)][:SHOWN_CASES]
    shown = "; ".join(f"#{k} = {_cut(cases[k])}" for k in wrong)
    return [found[0] + f" — #k is the k-th entry (from 0) of the check's list of {noun}; "
            f"the inputs you got wrong: {shown}"] + found[1:]


SHOWN_CASES = 3          # visible failing inputs shown in a FAIL line


def _differs(p: Any, e: Any, fields: list[str] | None) -> bool:
    """Whether prediction ``p`` is wrong against ``e`` (for dicts: only the graded fields count)."""
    if fields and isinstance(e, dict) and isinstance(p, dict):
        return any(f in e and _ne(p.get(f), e[f]) for f in fields)
    return _ne(p, e)


def _ne(p: Any, e: Any) -> bool:
    """``p != e``, where a bool is never a number (True == 1 in Python; np.bool_ converts to bool)."""
    if (type(p) is bool) != (type(e) is bool):
        return True
    if type(p) is list and type(e) is list:
        return len(p) != len(e) or any(_ne(a, b) for a, b in zip(p, e))
    if type(p) is dict and type(e) is dict:
        return p.keys() != e.keys() or any(_ne(p[k], e[k]) for k in e)
    return bool(p != e)


def _cut(text: str, limit: int = 160) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _prediction_problems(name: str, predicted: list[Any], expected: list[Any], noun: str,
                         unit: str | None, fields: list[str] | None) -> list[str]:
    """:func:`prediction_problems` without the visible inputs."""
    if not isinstance(predicted, list) or len(predicted) != len(expected):
        return [f"{name}: no prediction for every case"]
    raised = sorted({p[len("error: "):] if p[len("error: "):] in BUILTIN_ERRORS
                     else "an exception of its own" for p in predicted
                     if isinstance(p, str) and p.startswith("error: ")})
    if raised:
        return [f"{name} raised {', '.join(raised)}"]
    odd = sorted({_known_kind(p[len(NOT_PLAIN):]) for p in predicted
                  if isinstance(p, str) and p.startswith(NOT_PLAIN)})
    if odd:
        return [f"{name} returned {', '.join(odd)}: a prediction is a plain number, string, bool, "
                "list or dict (convert it, e.g. int(...) or float(...))"]
    predicted, expected = canonical(predicted), canonical(expected)
    if fields:
        notes = []
        for k, (p, e) in enumerate(zip(predicted, expected)):
            if isinstance(e, dict):
                if not isinstance(p, dict):
                    notes.append(f"#{k}: not a dict")
                    continue
                bad = [f for f in fields if f in e and _ne(p.get(f), e[f])]
            else:
                if not isinstance(p, list) or len(p) != len(e):
                    notes.append(f"#{k}: not a ({', '.join(fields)}) tuple")
                    continue
                bad = [f for f, a, b in zip(fields, p, e) if _ne(a, b)]
            if bad:
                notes.append(f"#{k}: wrong {', '.join(bad)}")
        return [f"{len(notes)} of {len(expected)} {noun} wrong ({'; '.join(notes)})"] if notes else []
    wrong = [k for k, (p, e) in enumerate(zip(predicted, expected)) if _ne(p, e)]
    if not wrong:
        return []
    parts = ["#" + ", #".join(map(str, wrong))]
    numeric = [k for k in wrong if isinstance(predicted[k], int | float)
               and not isinstance(predicted[k], bool) and isinstance(expected[k], int | float)]
    if unit is not None:
        low = sum(1 for k in numeric if predicted[k] < expected[k])
        parts += [f"{low} predicted too few {unit}", f"{len(numeric) - low} too many"]
        if len(numeric) < len(wrong):
            parts.append(f"{len(wrong) - len(numeric)} not a number")
    return [f"{len(wrong)} of {len(expected)} {noun} wrong ({'; '.join(parts)})"]


# -- fix-type evidence ---------------------------------------------------------------------------
def tensor(values: Any) -> dict[str, Any]:
    """A tensor-like evidence entry from nested lists of numbers: shape and flat values."""
    shape, flat = [], []

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, list):
            if len(shape) <= depth:
                shape.append(len(v))
            for item in v:
                walk(item, depth + 1)
        else:
            flat.append(v)

    walk(values, 0)
    return {"shape": shape, "values": flat}


def _close(got: Any, want: dict[str, Any], tol: float) -> bool:
    if not isinstance(got, dict) or got.get("shape") != want["shape"]:
        return False
    a, b = got.get("values"), want["values"]
    if not isinstance(a, list) or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False
        elif type(x) not in (int, float) or not abs(x - y) <= tol + tol * abs(y):   # NaN fails
            return False
    return True


def _finite(got: Any) -> bool:
    return isinstance(got, dict) and all(not isinstance(v, str) for v in got.get("values", ["?"]))


def rule_problem(rule: dict[str, Any], got: Any) -> str | None:
    """One rule of a fix-type spec applied to the student's evidence field (None: met)."""
    kind, say = rule["rule"], rule.get("say", f"{rule['field']} is wrong")
    if got is None and kind != "absent":
        return rule.get("missing", f"{rule['field']}: no evidence (the check did not get that far)")
    if kind == "eq":
        return None if canonical(got) == rule["value"] else say
    if kind == "true":
        return None if got is True else say
    if kind == "at_most":
        ok = type(got) in (int, float) and got <= rule["value"]
        return None if ok else say.format(got=got, limit=rule["value"])
    if kind == "at_least":
        ok = type(got) in (int, float) and got >= rule["value"]
        return None if ok else say.format(got=got, limit=rule["value"])
    if kind == "finite":
        return None if _finite(got) else say
    if kind == "close":
        if rule.get("finite") and not _finite(got):
            return rule["finite"]
        return None if _close(got, rule["want"], rule["tol"]) else say
    if kind == "close_all":
        ok = isinstance(got, list) and len(got) == len(rule["want"]) and all(
            _close(g, w, rule["tol"]) for g, w in zip(got, rule["want"]))
        return None if ok else say
    if kind == "none_contains":
        ok = isinstance(got, list) and not any(rule["text"] in str(g) for g in got)
        return None if ok else say
    if kind == "any_contains":
        ok = isinstance(got, list) and any(rule["text"] in str(g) for g in got)
        return None if ok else say
    raise ValueError(f"unknown rule {kind!r}")


def compare(spec: dict[str, Any], got: Any, *, echo: bool = False,
            visible: bool = False) -> list[str]:
    """Everything wrong with the evidence ``got`` against the trusted ``spec`` (empty: it passes).

    ``echo``: repeat the error or refusal text the student's process printed (their own check
    cell, where nothing is secret); grading never echoes it into feedback. ``visible``: the spec's
    cases are the notebook's visible ones (``make check``), so a FAIL may show wrong cases' inputs.
    """
    if not isinstance(got, dict):
        return ["the check printed no evidence"]
    if echo and "refused" in got:
        return [f"your answer was refused: {str(got['refused'])[:300]}"]
    if echo and "error" in got:
        return [str(got["error"])[:300]]
    if spec["kind"] == "predict" and ("refused" in got or "error" in got):
        return ["the prediction cell stopped before it printed its predictions"]
    if "refused" in got:
        # only the line number: the reason's text came from the sandbox, which saw hidden inputs
        at = re.match(r"^line (\d{1,5}): ", str(got["refused"]))
        where = f" at line {at.group(1)}" if at else ""
        return [f"your answer was refused{where}: the restricted-Python rules "
                "(your notebook's check cell says which)"]
    if "error" in got:
        why = str(got["error"])
        return [why if HARNESS_ERRORS.match(why) else "the check stopped with an error in your code"]
    if spec["kind"] == "predict":
        return prediction_problems(spec["function"], got.get("predictions"), spec["expected"],
                                   spec["noun"], spec.get("unit"), spec.get("fields"),
                                   spec.get("cases") if visible else None)
    problems: list[str] = []
    for rule in spec["rules"]:
        if rule.get("after") and problems:
            continue                      # a rule that only makes sense when the earlier ones held
        if rule.get("hint"):
            # a hint names a likely cause of problems already found; alone it never fails an answer
            value = got.get(rule["field"])
            if problems and value is not None and rule_problem(rule, value):
                problems.append(rule["say"])
            continue
        why = rule_problem(rule, got.get(rule["field"]))
        if why and why not in problems:
            problems.append(why)
    return problems

"""The library tasks' cases (5.1, 5.2): programs, shapes, dtypes and hidden values, drawn per seed.

Invariants: :func:`draw` is stdlib only and depends on nothing but the seed and the task names, so
the grader draws the same cases in pass 1 and at grading without importing torch or the student's
code; its cases are plain data and its values (the hidden inputs) travel only to the sandbox that
runs generated code (``libcheck.execute``), never to the one that imports the student's library.
The programs themselves need torch and are built where they run (:func:`programs`).
"""

from __future__ import annotations

import math
import random
from typing import Any

TASKS = ("5.1", "5.2")


# -- the grader's programs, by name (their bodies need torch: built where they run) -----------------
def programs() -> dict[str, Any]:
    import torch

    return {
        "log1p": lambda x: torch.log1p(x),
        "logaddexp": lambda a, b: torch.logaddexp(a, b),
        "logaddexp_t": lambda a, b: torch.log1p(torch.logaddexp(a, b.t()) * 0.25),
        "softmax": lambda x: torch.softmax(x * 2, -1),
        "center": lambda x: (x - x.mean(-1, keepdim=True)).relu() * 3,
        "colsum": lambda x: x.sum(0) * 2 + x[0],
        "lse": lambda x: (x - x.amax(-1, keepdim=True)).exp().sum(-1).log(),
    }


def draw(seed: int, tasks: tuple[str, ...] = TASKS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(cases, hidden input values) for ``tasks`` at ``seed``; plain data, stdlib only.

    The cases never hold values: ``produce`` compiles for shapes and dtypes only.
    """
    cases: list[dict[str, Any]] = []
    values: dict[str, Any] = {}

    def program(task: str, name: str, target: str, inputs: list[tuple[list[int], str]],
                data: list[list[Any]], rtol: float, atol: float) -> None:
        cid = f"{task}#{sum(c['task'] == task for c in cases)}"
        cases.append({"id": cid, "task": task, "kind": "program", "program": name, "target": target,
                      "inputs": [{"shape": s, "dtype": d} for s, d in inputs],
                      "rtol": rtol, "atol": atol})
        values[cid] = data

    if "5.1" in tasks:                     # one stream per task: a task's cases never depend
        r = random.Random(f"libcheck:{seed}:5.1")   # on which other tasks are graded
        for target in ("cpp", "triton"):
            m, n = r.randrange(2, 7), r.randrange(5, 40)
            program("5.1", "log1p", target, [([m, n], "float32")],
                    [[_log1p_value(r) for _ in range(m * n)]], 1e-5, 0.0)   # relative: tiny x count
            dtype = r.choice(["float32", "float64"])
            m, n = r.randrange(2, 7), r.randrange(5, 40)
            a, b = _logaddexp_pairs(r, m * n)
            tol = (1e-5, 1e-6) if dtype == "float32" else (1e-11, 1e-13)
            program("5.1", "logaddexp", target, [([m, n], dtype), ([m, n], dtype)], [a, b], *tol)
        target = r.choice(["cpp", "triton"])
        n = r.randrange(5, 60)
        program("5.1", "log1p", target, [([n], "int64")],
                [[r.choice([-1, 0, 1]) if r.random() < 0.2 else r.randrange(0, 10 ** 6)
                  for _ in range(n)]], 1e-5, 0.0)
        # one side 0, the other far below: the result is log1p of a tiny exp, and only log1p
        # keeps it (log(1 + d) gives 0), so these are judged with no absolute slack at all
        n = r.randrange(4, 20)
        far = [-round(r.uniform(17.0, 80.0), 3) for _ in range(n)]
        flip = [r.random() < 0.5 for _ in range(n)]
        program("5.1", "logaddexp", r.choice(["cpp", "triton"]), [([n], "float32"), ([n], "float32")],
                [[f if left else 0.0 for f, left in zip(far, flip)],
                 [0.0 if left else f for f, left in zip(far, flip)]],
                1e-5, 0.0)
        m, n = r.randrange(2, 7), r.randrange(2, 7)
        a, b = _logaddexp_pairs(r, m * n)
        program("5.1", "logaddexp_t", r.choice(["cpp", "triton"]), [([m, n], "float32"),
                ([n, m], "float32")], [a, _transpose(b, m, n)], 1e-5, 1e-6)
    if "5.2" in tasks:
        r = random.Random(f"libcheck:{seed}:5.2")
        for name in ("softmax", "center", "colsum", "lse"):
            m, n = r.randrange(2, 9), r.randrange(8, 80)
            program("5.2", name, "cpp" if name != "lse" else r.choice(["cpp", "triton"]),
                    [([m, n], "float32")], [[round(r.gauss(0, 2), 6) for _ in range(m * n)]],
                    1e-5, 1e-5)
        for q in _fits_questions(r):
            cid = f"5.2#{sum(c['task'] == '5.2' for c in cases)}"
            cases.append({"id": cid, "task": "5.2", "kind": "fits", **q})
    return cases, values


def _log1p_value(r: random.Random) -> Any:
    kind = r.random()
    if kind < 0.35:                                   # tiny: where log(1 + x) loses every digit
        return r.choice([-1, 1]) * 10 ** -r.uniform(4, 12)
    if kind < 0.45:                                   # close to -1
        return -1 + 10 ** -r.uniform(1, 6)
    if kind < 0.55:
        return r.choice(["inf", -1.0, -2.5, "nan", 0.0, 10 ** r.uniform(3, 30)])
    return r.uniform(-0.9, 8)


def _logaddexp_pairs(r: random.Random, n: int) -> tuple[list[Any], list[Any]]:
    a, b = [], []
    for _ in range(n):
        kind = r.random()
        if kind < 0.25:                               # equal infinities, or one infinite side
            x, y = r.choice([("inf", "inf"), ("-inf", "-inf"), ("-inf", 1.5), ("inf", -3.0),
                             (2.0, "-inf")])
        else:
            x = round(r.gauss(0, 5), 4)
            y = x - r.choice([0.0, 0.5, r.uniform(0, 3), r.uniform(20, 40), r.uniform(90, 200)])
            x, y = (x, y) if r.random() < 0.5 else (y, x)
        a.append(x)
        b.append(y)
    return a, b


def _transpose(flat: list[Any], m: int, n: int) -> list[Any]:
    """``flat`` (m x n, row-major) as the row-major values of its n x m transpose."""
    return [flat[i * n + j] for j in range(n) for i in range(m)]


def _fits_questions(r: random.Random, count: int = 16) -> list[dict[str, Any]]:
    """``node_fits(space, node)`` questions: a space, a node's ranges (and reduction ranges), all
    drawn from the seed (kernel spaces, node shapes that line up with them or nearly do: swapped,
    split, merged, off by one, with 1s), so that no list of answers carries over between seeds."""
    m = r.randrange(2, 50)
    n = r.randrange(51, 200)
    p = r.choice([d for d in range(2, 10) if d != m])
    spaces = [([m], [n]), ([m, n], []), ([m * n], []), ([m], [n, p]), ([m, p], [n]), ([n], [m])]

    def near(dims: list[int]) -> list[int]:
        kind = r.randrange(9)
        if kind <= 3 or not dims:
            return list(dims)                                   # lines up
        if kind == 4 and len(dims) > 1:
            return list(reversed(dims))                         # swapped
        if kind == 5 and len(dims) > 1:
            return [math.prod(dims)]                            # merged
        if kind == 6:
            i = r.randrange(len(dims))
            return dims[:i] + [dims[i] + r.choice([-1, 1])] + dims[i + 1:]   # off by one
        if kind == 7 and dims[-1] % 2 == 0:
            return dims[:-1] + [2, dims[-1] // 2]               # split
        return dims[:-1] if len(dims) > 1 else dims + [p]       # a dim missing / extra

    def ones(dims: list[int]) -> list[int]:
        dims = list(dims)
        if r.random() < 0.3:
            dims.insert(r.randrange(len(dims) + 1), 1)
        return dims

    qs = []
    for i in range(count):
        rows, rdims = r.choice(spaces)
        pick = r.random()
        if pick < 0.4:                                          # a reduction node
            ranges, rranges = ones(near(rows)), near(rdims or [p])
        elif pick < 0.7 or not rdims:                           # a per-element node
            ranges, rranges = ones(near(rows + rdims)), None
        else:                                                   # a per-row node
            ranges, rranges = ones(near(rows)), None
        qs.append({"space": {"rows": rows, "rdims": rdims}, "ranges": ranges, "rranges": rranges,
                   "name": f"buf{i}"})
    return qs

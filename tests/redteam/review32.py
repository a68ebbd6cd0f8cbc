"""Review 32 (session 26, issue 29): answers to Task 3.2 used to review its hidden grading lines.

Instructor-only (tests/redteam/). HONEST_*: two honest ``diagnose`` written by the reviewer from
notebook 03 and the task text (one types each expression as Dynamo would, one a few keyword rules).
CHEAT_*: answers built without understanding from what the release shows (the check cell's
``random_line`` templates and the kinds' causes its ``cause_of`` decodes at seed 0, plus the task
text's hints). ``python tests/redteam/review32.py [N]`` prints each answer's rate of all-15-right
seeds over grading seeds 1..N, drawn exactly as the check cell and ``nbcheck.hidden_cases`` draw
them (no Dynamo needed: the answers never compile). Findings: tests/redteam/REVIEW32.md.
"""

from __future__ import annotations

HONEST_A = """import ast


def diagnose(line: str) -> str:
    '''The cause (one of CAUSES) of the graph break or recompiles this forward line makes (Task 3.2).'''
    # Reason as Dynamo does: follow what each expression IS (a tensor, the batch size, a plain
    # Python number, self.calls) and ask where Python itself needs to know a value.
    code = line.split("#")[0].strip()
    if code.startswith("return "):
        code = code[len("return "):]
    tree = ast.parse(code)
    TENSOR, SIZE, CONST, CALLS = "tensor", "size", "const", "calls"
    C_MODULES = {"time", "os", "zlib", "sys", "math", "random"}
    found = set()

    def kind(node):
        if isinstance(node, ast.Constant):
            return CONST
        if isinstance(node, ast.Name):
            return TENSOR if node.id in ("x", "h", "peak") else CONST
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr == "calls":
                found.add(2)                     # Dynamo guards on this int's exact value
                return CALLS
            base = kind(node.value)
            if base == TENSOR and node.attr == "shape":
                return SIZE
            return base
        if isinstance(node, ast.Subscript):
            base = kind(node.value)
            kind(node.slice)
            return SIZE if base == SIZE else base
        if isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    kind(part)
            return CONST
        if isinstance(node, ast.Tuple | ast.List):
            for e in node.elts:
                kind(e)
            return CONST
        if isinstance(node, ast.BinOp):
            a, b = kind(node.left), kind(node.right)
            return TENSOR if TENSOR in (a, b) else (SIZE if SIZE in (a, b) else a)
        if isinstance(node, ast.UnaryOp):
            return kind(node.operand)
        if isinstance(node, ast.Compare):
            ks = [kind(node.left)] + [kind(c) for c in node.comparators]
            return TENSOR if TENSOR in ks else CONST
        if isinstance(node, ast.BoolOp):
            return TENSOR if TENSOR in [kind(v) for v in node.values] else CONST
        if isinstance(node, ast.IfExp):
            if kind(node.test) == TENSOR:
                found.add(1)                     # Python must branch on a tensor's value
            a, b = kind(node.body), kind(node.orelse)
            return TENSOR if TENSOR in (a, b) else a
        if isinstance(node, ast.JoinedStr | ast.FormattedValue):
            for child in ast.iter_child_nodes(node):
                kind(child)
            return CONST
        if isinstance(node, ast.Call):
            args = [kind(a) for a in node.args] + [kind(k.value) for k in node.keywords]
            f = node.func
            if isinstance(f, ast.Name):
                if f.id == "print":
                    found.add(0)
                    return CONST
                if f.id in ("int", "float", "bool", "round", "complex") and args and args[0] == TENSOR:
                    found.add(1)                 # a tensor turned into a Python number
                    return CONST
                if f.id == "len":
                    return SIZE if args and args[0] == TENSOR else CONST
                return CONST
            if isinstance(f, ast.Attribute):
                owner = f.value
                if isinstance(owner, ast.Name) and owner.id in ("logger", "logging"):
                    found.add(0)
                    return CONST
                if f.attr in ("write", "flush", "writelines"):
                    kind(owner)
                    found.add(0)
                    return CONST
                if isinstance(owner, ast.Name) and owner.id in C_MODULES:
                    found.add(4)                 # a C function: Dynamo cannot look inside
                    return CONST
                if isinstance(owner, ast.Name) and owner.id == "torch":
                    return TENSOR
                base = kind(owner)
                if base == TENSOR:
                    if f.attr in ("item", "tolist"):
                        found.add(1)
                        return CONST
                    if f.attr in ("size", "numel", "dim", "stride"):
                        return SIZE
                    return TENSOR
                return base
            return CONST
        for child in ast.iter_child_nodes(node):
            kind(child)
        return CONST

    for stmt in tree.body:
        if isinstance(stmt, ast.If):
            if kind(stmt.test) == TENSOR:
                found.add(1)
            for s in stmt.body + stmt.orelse:
                kind(s)
        else:
            kind(stmt)
    # the break comes first on the line; a line with I/O breaks on the I/O call
    for cause in (0, 4, 1, 2):
        if cause in found:
            return CAUSES[cause]
    return CAUSES[3]
"""

HONEST_B = """import re


def diagnose(line: str) -> str:
    '''The cause (one of CAUSES) of the graph break or recompiles this forward line makes (Task 3.2).'''
    s = line.split("#")[0]
    if "print(" in s or ".write(" in s or "logger." in s:
        return CAUSES[0]                    # I/O can't go in a graph
    if re.search(r"\\b(time|os|zlib|sys)\\.\\w+\\(", s):
        return CAUSES[4]                    # C functions
    if ".item()" in s or ".tolist()" in s or re.search(r"\\b(int|float|bool)\\(h", s):
        return CAUSES[1]                    # tensor -> Python number
    cond = re.search(r"\\bif\\b(.*?)(:|\\belse\\b)", s)
    if cond and re.search(r"\\bh\\b", cond.group(1)):
        return CAUSES[1]                    # if on a tensor
    if "self.calls" in s:
        return CAUSES[2]
    return CAUSES[3]
"""

# the visible kinds' surface features, as the check cell's templates show them
CHEAT_NAIVE = """import re


def diagnose(line):
    '''A regex over the visible templates' surface features (no experiment, no lesson).'''
    s = line.split("#")[0]
    if re.search(r"print|write|logger", s):
        return CAUSES[0]
    if "self." in s:
        return CAUSES[2]
    if re.search(r"\\.item\\(\\)|float\\(|tolist", s):
        return CAUSES[1]
    if re.search(r"zlib|time|os\\.", s):
        return CAUSES[4]
    return CAUSES[3]
"""

# the same, widened by the task text's hints ("other I/O, other ways to read a tensor or
# self.calls, other C functions, other harmless uses of sizes"), with one misconception: any
# reduction of h on a line is a value read into Python
CHEAT_WIDENED = """import re


def diagnose(line):
    '''The visible kinds widened by the task text's hints: any I/O-ish word, any self., any module
    call, any size; whatever else reads h's reduction is a 'value read'.'''
    s = line.split("#")[0]
    if re.search(r"print|write|log", s):
        return CAUSES[0]
    if "self." in s:
        return CAUSES[2]
    if re.search(r"\\b(sys|os|time|zlib)\\.", s):
        return CAUSES[4]
    if re.search(r"x\\.shape|x\\.size|len\\(x\\)|numel", s):
        return CAUSES[3]
    if re.search(r"h\\.\\w+\\(\\)|tolist", s):
        return CAUSES[1]
    return CAUSES[3]
"""

# nearest visible line by token overlap: a table with a fuzzy lookup
CHEAT_NEAREST = """import re

# the visible check cell's templates (random_line) and Scorer's lines, with the check's causes
# (kind letters as the cell names them; cause_of decodes them at seed 0)
VISIBLE = {
    0: ['print(f"batch {x.shape[0]}: mean {h.mean():.3f}")', 'print("batch", h.mean())',
        'sys.stdout.write(f"batch {x.shape[0]}\\\\n")', 'logger.warning("batch %s", h.mean())'],
    3: ["h = h * x.shape[0]", "h = h * x.size(0)", "h = h[: x.shape[0] // 2 + 1]"],
    2: ["h = h * (1 + 0.2 * self.calls)", "h = h.roll(self.calls, dims=-1)", "h = h * 0.92 ** self.calls",
        "return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)"],
    4: ['h = h * (1 + zlib.crc32(b"batch") % 2)', "h = h * time.perf_counter() % 2", "h = h * (1 + os.getpid() % 2)"],
    1: ["h = h * (h.mean().item() + 1)", "h = h * (float(h.mean()) + 1)", "h = h * len(h[0].tolist())",
        "peak = h.abs().max().item()"],
}


def _tokens(s):
    return set(re.findall(r"[A-Za-z_]\\w*|[^\\sA-Za-z_0-9]", s.split("# (")[0]))


def diagnose(line):
    '''Nearest visible line by token overlap (Jaccard): a table with fuzzy lookup.'''
    t = _tokens(line)
    best = max(((len(t & _tokens(v)) / len(t | _tokens(v)), k) for k, vs in VISIBLE.items() for v in vs))
    return CAUSES[best[1]]
"""

ANSWERS = {"honest_a": HONEST_A, "honest_b": HONEST_B, "cheat_naive": CHEAT_NAIVE,
           "cheat_widened": CHEAT_WIDENED, "cheat_nearest": CHEAT_NEAREST}


def draws(seed: int) -> list[tuple[str, int]]:
    """(line, right cause index) for the lines grading asks about at ``seed``: the check cell's
    own draw (its ``random_line`` and salted ``KEY``) and ``nbcheck.hidden_cases``."""
    import os
    import re
    from pathlib import Path

    from labkit.grading import nbcheck as nc

    root = Path(__file__).resolve().parents[2]
    src = (root / "tools/exsrc/ex03_graph_breaks.py").read_text()
    causes = eval(src.split("CAUSES = ")[1].split("\n\nclass")[0])
    cell = src.split("# %% id=c3-2")[1].split("# %% id=t3-3")[0]
    ns: dict = {}
    exec(cell.split("KEY = ")[0], ns)                    # imports nbcheck, defines random_line
    key = eval("{" + re.search(r"KEY = \{(.*?)\}", cell, re.S).group(1) + "}")
    cause_of = {k: next(i for i, c in enumerate(causes) if nc.salted("3.2", k, c) == v)
                for k, v in key.items()}
    old = os.environ.get(nc.SEED_ENV)
    os.environ[nc.SEED_ENV] = str(seed)
    try:
        r = nc.rng("3.2")
        lines = [("p", 'print(f"batch {x.shape[0]}: mean {h.mean():.3f}")'),
                 ("t", "peak = h.abs().max().item()"),
                 ("r", "return torch.softmax(h * (1 + 0.1 * self.calls), dim=-1)")]
        lines += [ns["random_line"](r) for _ in range(6)]
        per_key = int(re.search(r'hidden_cases\("3\.2", r, (\d+)\)', cell).group(1))
        hidden = nc.hidden_cases("3.2", r, per_key)
    finally:
        if old is None:
            os.environ.pop(nc.SEED_ENV)
        else:
            os.environ[nc.SEED_ENV] = old
    return [(line, cause_of[k]) for k, line in lines] + [(line, int(k)) for k, line in hidden]


def diagnoser(name: str):
    """The answer's ``diagnose``, returning a cause index."""
    ns = {"CAUSES": list(range(5))}
    exec(ANSWERS[name], ns)
    return ns["diagnose"]


if __name__ == "__main__":
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    seeds = [draws(s) for s in range(1, n + 1)]
    for name in ANSWERS:
        d = diagnoser(name)
        passed = sum(all(d(line) == c for line, c in lines) for lines in seeds)
        hidden = [d(line) == c for lines in seeds for line, c in lines[9:]]
        print(f"{name:14s} all right at {passed}/{n} seeds ({passed / n:.1%}); "
              f"hidden lines right {sum(hidden)}/{len(hidden)} ({sum(hidden) / len(hidden):.1%})")

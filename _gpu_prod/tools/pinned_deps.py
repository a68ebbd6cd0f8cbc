"""Print pyproject.toml's pinned requirements (and extras), one per line, leaving out some names.

`make test-torch TORCH=x.y.z` installs another torch into its own venv, then everything else labkit
needs at the versions `make setup` installs:  pip install $(python3 tools/pinned_deps.py dev,cpu --except torch)
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirement_name(req: str) -> str:
    """The normalised project name of a requirement string ("Foo_bar[x]==1" -> "foo-bar")."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1)).lower()


def pinned(extras: list[str], leave_out: set[str]) -> list[str]:
    """The project's dependencies plus those of ``extras``, minus the names in ``leave_out``."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"no extra {unknown} in pyproject.toml (known: {', '.join(optional)})")
    reqs = list(project["dependencies"]) + [r for e in extras for r in optional[e]]
    drop = {requirement_name(n) for n in leave_out}
    return [r for r in reqs if requirement_name(r) not in drop]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("extras", nargs="?", default="", help="comma-separated extras, e.g. dev,cpu")
    ap.add_argument("--except", dest="leave_out", default="", help="comma-separated names to leave out")
    args = ap.parse_args()
    extras = [e for e in args.extras.split(",") if e]
    print("\n".join(pinned(extras, {n for n in args.leave_out.split(",") if n})))


if __name__ == "__main__":
    main()

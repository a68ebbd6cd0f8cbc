"""Publish the student release (``make student`` -> dist/student) into the hub's release repo.

``$HUB_STATE/release`` is a git repository that only grows: each publish replaces its files with
the new release and commits the difference, so nbgitpuller in every student's server can merge the
change into their ``~/course`` without overwriting their work (``make student`` itself makes a
fresh one-commit repository each time, which could not be merged).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from labkit_hub.paths import State

GIT_ENV = {"GIT_AUTHOR_NAME": "labkit hub", "GIT_AUTHOR_EMAIL": "hub@localhost",
           "GIT_COMMITTER_NAME": "labkit hub", "GIT_COMMITTER_EMAIL": "hub@localhost"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **GIT_ENV}).stdout


def publish(source: Path, repo: Path) -> bool:
    """Make ``repo``'s main branch hold exactly ``source`` (no .git); True if anything changed."""
    if not (source / "README.md").exists():
        raise FileNotFoundError(f"{source} is not a student release: run `make student` first")
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q", "-b", "main")
    for entry in repo.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    shutil.copytree(source, repo, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
    git(repo, "add", "-A")
    if not git(repo, "status", "--porcelain").strip():
        return False
    git(repo, "commit", "-q", "-m", "student release")
    os.chmod(repo, 0o755)
    return True


def main() -> int:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("dist/student")
    changed = publish(source, State.from_env().release)
    print(f"release {'updated' if changed else 'unchanged'}: {State.from_env().release}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

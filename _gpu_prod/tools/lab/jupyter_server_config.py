"""`make lab`'s server config (tools/serve_lab.py passes it with --config): git-aware notebook saves."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tools/: nb_git_clean
from nb_git_clean import post_save  # noqa: E402

c = get_config()  # noqa: F821 (traitlets defines it when it loads this file)
# a lesson saved without source edits stays clean in `git status` (see nb_git_clean.post_save)
c.FileContentsManager.post_save_hook = post_save

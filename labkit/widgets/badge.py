"""The one badge every recorded output carries: where and when it was made, drawn unlike a live output.

Note: a recording (``figures/recordings/*.json``, a benchmark's JSON) says in its env where it ran;
only ``benchmarks/record_gpu.py`` stamps ``recorded_by``, so a Trace without it was made in this
session, while a benchmark's JSON read from a file is a recording by definition. The text form is what nbval compares and what a terminal prints; the HTML form is the
styled label JupyterLab shows above the recorded output.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

# amber for "made elsewhere, shown from a file", green for "ran here, now"; the marks (U+25C6,
# U+25CF) are in common fonts (U+23FA, a record sign, drew as an empty box in Chromium on Linux)
_STYLE = {
    "recorded": "color:#5a3d00;background:#fff3d6;border:1px solid #e0a800;",
    "live": "color:#1d5c2e;background:#e8f6ec;border:1px solid #5cb270;",
}
_BOX = ("display:inline-block;margin:2px 0 4px;padding:1px 10px;border-radius:10px;"
        "font:600 12px/1.7 sans-serif;")


def badge_text(env: Mapping[str, Any], recorded: bool) -> str:
    """'RECORDING made on <device> with torch <v>[, triton <v>], on <date>' or 'LIVE on <device>'."""
    device = env.get("device_name") or env.get("device")
    if not recorded:
        return f"LIVE on {device}"
    triton = f", triton {env['triton']}" if env.get("triton") else ""
    return (f"RECORDING made on {device} with torch {env.get('torch')}{triton}, on "
            f"{env.get('date') or 'a date it does not record'}")


def badge_html(env: Mapping[str, Any], recorded: bool, what: str = "") -> str:
    """The styled label: amber 'recorded on ...' (not run here) or green 'live on ...'."""
    device = html.escape(str(env.get("device_name") or env.get("device")))
    extra = f" · {html.escape(what)}" if what else ""
    if not recorded:
        return (f'<div class="lk-badge lk-badge-live" style="{_BOX}{_STYLE["live"]}">'
                f"● live on {device}, torch {html.escape(str(env.get('torch')))}{extra}</div>")
    parts = [f"torch {env.get('torch')}"] + ([f"triton {env['triton']}"] if env.get("triton") else [])
    parts.append(str(env.get("date") or "date not recorded"))
    return (f'<div class="lk-badge lk-badge-recorded" style="{_BOX}{_STYLE["recorded"]}" '
            f'title="made on another machine and read from a file: not run here">'
            f"◆ recorded on {device} · {html.escape(' · '.join(parts))}{extra} — not run here</div>")


class Badge:
    """What ``labkit.badge`` returns: the label as text (nbval, terminals) and as styled HTML."""

    def __init__(self, env: Mapping[str, Any], recorded: bool, what: str = "") -> None:
        self.env, self.recorded, self.what = dict(env), recorded, what

    def __str__(self) -> str:
        return badge_text(self.env, self.recorded) + (f" ({self.what})" if self.what else "")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": badge_html(self.env, self.recorded, self.what)}

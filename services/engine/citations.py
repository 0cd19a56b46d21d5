"""Citations the model made checked against the passages the turn actually sent: ``[K2]`` markers of
passages not sent are dropped, the rest renumbered [1], [2] in order of first use, and the sources
list rendered by the bot (with a link when the document declares one). Pure code."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from services.ports.knowledge import Passage

_MARKER = re.compile(r"\s?[\[【(]\s*[Kk]\s*(\d{1,3})\s*[\]】)]")


@dataclass(frozen=True, slots=True)
class CitedReply:
    text: str
    cited: tuple[str, ...]
    """Ids of the passages the reply cites, in order."""


def render_citations(reply: str, refs: Mapping[str, Passage]) -> CitedReply:
    """``refs``: marker (``K1``) → the passage sent under it this turn."""
    order: list[str] = []

    def replace(match: re.Match[str]) -> str:
        ref = f"K{int(match.group(1))}"
        if ref not in refs:
            return ""
        if ref not in order:
            order.append(ref)
        space = " " if match.group(0)[:1].isspace() else ""
        return f"{space}[{order.index(ref) + 1}]"

    text = _MARKER.sub(replace, reply)
    if not order:
        return CitedReply(text, ())
    lines = []
    for number, ref in enumerate(order, start=1):
        passage = refs[ref]
        lines.append(f"[{number}] {passage.source}" + (f" — {passage.url}" if passage.url else ""))
    return CitedReply(text.rstrip() + "\n\n" + "\n".join(lines), tuple(refs[ref].id for ref in order))

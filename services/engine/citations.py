"""Citations the model made checked against the passages the turn actually sent: ``[K2]`` markers of
passages not sent are dropped, the rest renumbered [1], [2] in order of first use, and the sources
list rendered by the bot (with a link when the document declares one, written as an autolink ``<url>``:
the URL is literal text, "returns_*policy*_" is no emphasis). Pure code."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from services.core.knowledge import Passage, web_url
from services.core.prompt_format import neutralize

_MARKER = re.compile(r"\s?([\[【(])\s*([Kk])\s*(\d{1,3})\s*[\]】)]")
"""[K1] or 【K1】, the form asked for: dropped when no such passage was sent. (K1) or [k1] count only
when that passage was sent; otherwise they are left as written (a product code such as "(K120)")."""
_MARKDOWN = re.compile(r"([\\`*_\[\]()~<>|#!])")


def _plain(source: str) -> str:
    """A document's name and headings as literal text in the reply (Markdown is rendered for
    Telegram: a heading must not become a hidden link or bold), and no data fence in it (the reply
    is stored and goes back into later prompts)."""
    return _MARKDOWN.sub(r"\\\1", neutralize(source))


@dataclass(frozen=True, slots=True)
class CitedReply:
    text: str
    cited: tuple[str, ...]
    """Ids of the passages the reply cites, in order."""


def render_citations(reply: str, refs: Mapping[str, Passage]) -> CitedReply:
    """``refs``: marker (``K1``) → the passage sent under it this turn."""
    order: list[str] = []

    def replace(match: re.Match[str]) -> str:
        ref = f"K{int(match.group(3))}"
        if ref not in refs:
            strict = match.group(1) != "(" and match.group(2) == "K"
            return "" if strict else match.group(0)
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
        url = web_url(passage.url)
        lines.append(f"[{number}] {_plain(passage.source)}" + (f" — <{_literal(url)}>" if url else ""))
    return CitedReply(text.rstrip() + "\n\n" + "\n".join(lines), tuple(refs[ref].id for ref in order))


def _literal(url: str) -> str:
    """``url`` with ``~`` and ``|`` percent-encoded (the same address: ``~`` is unreserved, a browser
    encodes ``|``): the Markdown converter reads ``~~`` and ``||`` as strikethrough and spoiler even
    inside an autolink, which would show, and open, another address."""
    return url.replace("~", "%7E").replace("|", "%7C")

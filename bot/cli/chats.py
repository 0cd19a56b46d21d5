"""Why did it answer that? ``python -m bot chat show CHAT_ID``: a chat's summary, its stored turns,
and for each reply the passages its prompt carried (document › heading, from the ids the turn
record keeps) and the media the customer sent (the photo notes are in the stored message itself).
Read-only: it loads the session the way a turn does and changes nothing."""

from __future__ import annotations

import sys
from typing import TextIO

from services.core.records import Session, StoredMessage
from services.core.summary_state import render_summary
from services.knowledge.library import KnowledgeLibrary
from services.ports.sessions import SessionStore

ROLE = {"user": "customer", "assistant": "bot"}
GONE = "not in the documents now (edited or removed since)"


def _indented(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines() or [""])


def _passages(message: StoredMessage, library: KnowledgeLibrary | None) -> list[str]:
    known = {p.id: p for p in library.current().passages} if library is not None else {}
    lines = []
    for pid in message.knowledge:
        passage = known.get(pid)
        where = passage.source if passage is not None else (GONE if library is not None else "KNOWLEDGE_DIR unset")
        lines.append(f"    passage [{pid}] {where}")
    return lines


def _message(message: StoredMessage, library: KnowledgeLibrary | None) -> str:
    lines = [f"#{message.seq} {ROLE.get(message.role, message.role)} ({message.tokens} tokens)"]
    lines.append(_indented(message.content))
    lines += [f"    sent: {ref.kind} (file_id {ref.file_id})" for ref in message.media]
    lines += _passages(message, library)
    if message.role == "assistant" and not message.knowledge and library is not None:
        lines.append("    passages: none")
    return "\n".join(lines)


def describe(session: Session, library: KnowledgeLibrary | None) -> str:
    head = (
        f"chat {session.chat_id}: version {session.version}, {len(session.messages)} stored message(s) "
        f"({session.history_tokens} tokens), summary {session.summary_tokens} tokens"
    )
    parts = [head]
    if session.summary is not None and not session.summary.is_empty():
        folded = _indented(render_summary(session.summary))
        parts.append(f"summary (the turns before the stored ones, folded):\n{folded}")
    else:
        parts.append("summary: none")
    parts += [_message(m, library) for m in session.messages]
    return "\n".join(parts) + "\n"


async def show(
    store: SessionStore, chat_id: int, *, library: KnowledgeLibrary | None = None, out: TextIO = sys.stdout
) -> int:
    """Exit status 0, or 1 when the chat has nothing stored (never talked, expired, or /forget)."""
    session = await store.load(chat_id)
    if not session.messages and session.summary is None:
        out.write(f"chat {chat_id} has no stored session (never talked, expired after SESSION_TTL_SECONDS, /forget)\n")
        return 1
    out.write(describe(session, library))
    return 0

"""Operator commands on the shared Redis: dead letters and quarantined sessions.

python -m bot dead-letters list | show ID | replay ID | drop ID
python -m bot quarantine list | show CHAT_ID | drop CHAT_ID
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TextIO

from services.ports.backend import QueuedBackend


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def dead_letters(backend: QueuedBackend, action: str, letter_id: str | None, out: TextIO = sys.stdout) -> int:
    """Returns the exit status."""
    store = backend.dead_letters
    if action == "list":
        letters = await store.list(limit=200)
        for letter in letters:
            out.write(f"{letter.id}\t{_when(letter.at)}\tattempts={letter.attempts}\t{letter.error[:100]}\n")
        out.write(f"{len(letters)} dead letter(s)\n")
        return 0
    if letter_id is None:
        out.write(f"dead-letters {action} needs an ID (see dead-letters list)\n")
        return 2
    found = await store.get(letter_id)
    if found is None:
        out.write(f"no dead letter {letter_id}\n")
        return 1
    letter = found
    if action == "show":
        record = {**asdict(letter), "at": _when(letter.at), "payload": json.loads(letter.payload or "null")}
        out.write(json.dumps(record, ensure_ascii=False, indent=2) + "\n")
    elif action == "replay":
        queue = backend.queue()
        item_id = f"{letter.item_id}:replay:{int(letter.at * 1000)}"
        await queue.enqueue(letter.chat_id, item_id, letter.payload, order=letter.order)
        await store.drop(letter.id)
        out.write(f"queued again for chat {letter.chat_id} as {item_id}\n")
    elif action == "drop":
        await store.drop(letter.id)
        out.write(f"dropped {letter.id}\n")
    return 0


async def quarantine(backend: QueuedBackend, action: str, chat_id: int | None, out: TextIO = sys.stdout) -> int:
    store = backend.quarantined
    if action == "list":
        found = await store.list()
        for entry in found:
            out.write(f"{entry.chat_id}\t{_when(entry.at)}\t{entry.reason}\n")
        out.write(f"{len(found)} quarantined session(s)\n")
        return 0
    if chat_id is None:
        out.write(f"quarantine {action} needs a CHAT_ID (see quarantine list)\n")
        return 2
    if action == "drop":
        removed = await store.drop(chat_id)
        out.write(f"dropped {removed} key(s) of chat {chat_id}\n")
        return 0
    record = await store.show(chat_id)
    if record is None:
        out.write(f"chat {chat_id} has no quarantined session\n")
        return 1
    out.write(json.dumps(record, ensure_ascii=False, indent=2) + "\n")
    return 0

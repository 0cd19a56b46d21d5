"""The note an image is remembered by: one short call of the chat model with the same image parts
the reply gets, run beside the reply (the reply is committed once it is in, waiting for it at most
NOTE_WAIT_SECONDS), kept by the images' ``file_unique_id`` so a redelivered update is not described
twice. A failed or late note leaves "[photo]" in the history and a WARNING; it never fails the turn."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence

from services.core.errors import LLMError
from services.core.prompt_format import clean_text, customer_block
from services.core.records import ImagePart, PromptPart
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnImage
from services.ports.chat_model import ChatModel
from services.ports.media import MediaMemos

log = logging.getLogger(__name__)

NOTE_MAX_CHARS = 300
NOTE_WAIT_SECONDS = 3.0
"""How long a ready reply waits for its images' note (written at the same time, usually done first);
a later note is given up: the customer is not held back for the history's sake."""
_LINE = re.compile(r"\s*\[?(\d+)\]?\s*[:.)-]\s*(.+)")
"""``<n>: <note>`` (with ``match``; ``_short`` trims the note). A lazy note before trailing
spaces was quadratic on a line with a long run of spaces inside (100 kB: minutes)."""


class ImageNotes:
    def __init__(
        self,
        *,
        llm: ChatModel,
        counter: TokenCounter,
        instruction: str,
        role: str,
        memos: MediaMemos | None = None,
        max_tokens: int = 200,
    ) -> None:
        self._llm = llm
        self._counter = counter
        self._instruction = PromptPart(role, instruction, counter.count_message(role, instruction))
        self._memos = memos
        self._max_tokens = max_tokens

    async def describe(
        self, chat_id: int, images: Sequence[TurnImage], parts: Sequence[ImagePart], caption: str
    ) -> tuple[str, ...]:
        """One note per image, in order ("" where the model wrote none); ``parts``: the images as the
        reply gets them (at low detail when the reply's prompt had no room for more)."""
        key = "+".join(image.file_unique_id for image in images)
        if self._memos is not None:
            cached = await self._memos.get(chat_id, "note", key)
            if cached is not None:
                return tuple(cached.split("\n"))
        content = customer_block(caption) if caption else "(no caption)"
        ask = PromptPart("user", content, 0, images=tuple(parts))
        try:
            completion = await self._llm.describe((self._instruction, ask), max_tokens=self._max_tokens)
        except LLMError as exc:
            log.warning("chat %s: the image note failed (%s); remembered as [photo]", chat_id, exc)
            return ()
        notes = parse_notes(completion.text, len(images))
        if self._memos is not None and any(notes):
            await self._memos.put(chat_id, "note", key, "\n".join(notes))
        return notes


def parse_notes(text: str, count: int) -> tuple[str, ...]:
    """The model's "<n>: <note>" lines as one note per image; a single image may get a bare line."""
    notes = [""] * count
    lines = [line for line in clean_text(text).splitlines() if line.strip()]
    for line in lines:
        match = _LINE.match(line)
        if match and 1 <= int(match.group(1)) <= count:
            notes[int(match.group(1)) - 1] = _short(match.group(2))
    if count == 1 and not notes[0] and lines:
        notes[0] = _short(" ".join(lines))
    return tuple(notes)


def _short(note: str) -> str:
    note = " ".join(note.replace("[", "(").replace("]", ")").split())
    return note if len(note) <= NOTE_MAX_CHARS else note[: NOTE_MAX_CHARS - 1] + "…"


async def notes_within(task: asyncio.Task[tuple[str, ...]], chat_id: int, seconds: float) -> tuple[str, ...]:
    """The note task's result if it is done within ``seconds``; else it is cancelled: "[photo]"."""
    done, _ = await asyncio.wait([task], timeout=seconds)
    if done:
        return task.result()
    await cancel_quietly(task)
    log.warning("chat %s: the image note took over %.0f s; remembered as [photo]", chat_id, seconds)
    return ()


async def cancel_quietly(task: asyncio.Task[tuple[str, ...]]) -> None:
    """Stop a note nobody will use (the reply failed)."""
    task.cancel()
    await asyncio.wait([task])  # never raises the task's error; a cancel of the caller still does
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at exit

"""Plain data shared by the window, the store and the chat service."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from services.core.summary_state import SummaryState

Role = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image sent with one message, this turn only: a data URL (never a Telegram file URL, which
    holds the bot token), its detail, and its prompt tokens by the model's rule."""

    url: str
    detail: str
    tokens: int

    def as_openai(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.url, "detail": self.detail}}


@dataclass(frozen=True, slots=True)
class PromptPart:
    """One chat message as it goes to the model, with its token cost (framing and images included)."""

    role: str
    content: str
    tokens: int
    images: tuple[ImagePart, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    """An assistant message's tool calls (a tool loop's turn: the model's calls sent back to it)."""
    tool_call_id: str = ""
    """A ``tool`` message's call id (the result of that call)."""

    def as_openai(self) -> dict[str, Any]:
        if self.tool_calls:
            calls = [call.as_openai() for call in self.tool_calls]
            return {"role": self.role, "content": self.content or None, "tool_calls": calls}
        if self.tool_call_id:
            return {"role": self.role, "tool_call_id": self.tool_call_id, "content": self.content}
        if not self.images:
            return {"role": self.role, "content": self.content}
        parts = [{"type": "text", "text": self.content}, *(image.as_openai() for image in self.images)]
        return {"role": self.role, "content": parts}


@dataclass(frozen=True, slots=True)
class MediaRef:
    """What the customer sent besides text, as the turn's record keeps it: the kind (photo, voice,
    audio, video_note, document) and Telegram's file id (an operator's view of it in a handoff;
    no pixels, no audio, no URL)."""

    kind: str
    file_id: str


def _message_fields(
    role: str,
    content: str,
    tokens: int,
    knowledge: tuple[str, ...],
    media: tuple[MediaRef, ...] = (),
    actions: tuple[str, ...] = (),
) -> dict[str, Any]:
    fields: dict[str, Any] = {"r": role, "c": content, "t": tokens}
    if knowledge:  # only then: a turn without passages is stored byte for byte as before
        fields["k"] = list(knowledge)
    if media:  # likewise: a text turn's record is unchanged
        fields["m"] = [[ref.kind, ref.file_id] for ref in media]
    if actions:  # likewise: a turn without actions is stored as before
        fields["a"] = list(actions)
    return fields


def _actions_of(data: dict[str, Any]) -> tuple[str, ...]:
    lines = data.get("a", [])
    if not isinstance(lines, list):
        raise ValueError(f"bad action lines {lines!r}")
    return tuple(str(line) for line in lines)


def _media_of(data: dict[str, Any]) -> tuple[MediaRef, ...]:
    refs = data.get("m", [])
    if not isinstance(refs, list) or not all(isinstance(r, list) and len(r) == 2 for r in refs):
        raise ValueError(f"bad media references {refs!r}")
    return tuple(MediaRef(str(kind), str(file_id)) for kind, file_id in refs)


def _dumps(fields: dict[str, Any]) -> str:
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message of the verbatim history. ``content`` is the prompt text, ``tokens`` its cost, counted once.

    ``knowledge``: ids of the passages the reply's prompt carried (JSON ``k``, absent when none);
    ``media``: what the customer sent besides text (JSON ``m``). Records of the turn, never prompt
    text: the next prompt is the same with or without them. ``actions``: the compact lines of the
    actions the reply's turn took (JSON ``a``): rendered as a note with the reply, in ``tokens``."""

    seq: int
    role: Role
    content: str
    tokens: int
    knowledge: tuple[str, ...] = ()
    media: tuple[MediaRef, ...] = ()
    actions: tuple[str, ...] = ()

    def to_json(self) -> str:
        fields = _message_fields(self.role, self.content, self.tokens, self.knowledge, self.media, self.actions)
        return _dumps({"s": self.seq, **fields})

    @classmethod
    def from_json(cls, raw: str | bytes) -> StoredMessage:
        data: dict[str, Any] = json.loads(raw)
        role = data["r"]
        if role not in ("user", "assistant"):
            raise ValueError(f"bad role {role!r}")
        ids = data.get("k", [])
        if not isinstance(ids, list):
            raise ValueError(f"bad passage ids {ids!r}")
        return cls(
            seq=int(data["s"]),
            role=role,
            content=str(data["c"]),
            tokens=int(data["t"]),
            knowledge=tuple(str(i) for i in ids),
            media=_media_of(data),
            actions=_actions_of(data),
        )

    def as_prompt_part(self) -> PromptPart:
        return PromptPart(role=self.role, content=self.content, tokens=self.tokens)


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message about to be appended; the store gives it its sequence number."""

    role: Role
    content: str
    tokens: int
    knowledge: tuple[str, ...] = ()
    """Ids of the passages the reply's prompt carried (see ``StoredMessage.knowledge``)."""
    media: tuple[MediaRef, ...] = ()
    """What the customer sent besides text (see ``StoredMessage.media``)."""
    actions: tuple[str, ...] = ()
    """The lines of the actions the turn took (see ``StoredMessage.actions``)."""

    def to_json(self) -> str:
        """The stored record without its sequence number (the store prefixes ``"s"``)."""
        fields = _message_fields(self.role, self.content, self.tokens, self.knowledge, self.media, self.actions)
        return _dumps(fields)


@dataclass(frozen=True, slots=True)
class Compaction:
    """Replace the running summary and drop the ``fold_count`` oldest stored messages, atomically."""

    fold_count: int
    summary: SummaryState
    summary_tokens: int


@dataclass(frozen=True, slots=True)
class Session:
    """One chat's memory as loaded from the store."""

    chat_id: int
    version: int = 0
    next_seq: int = 0
    summary: SummaryState | None = None
    summary_tokens: int = 0
    messages: tuple[StoredMessage, ...] = field(default_factory=tuple)

    @property
    def history_tokens(self) -> int:
        return sum(m.tokens for m in self.messages)


OnDelta = Callable[[str], Awaitable[None]]
"""Receives each piece of the reply as it is streamed (drafts)."""

OnRestart = Callable[[], None]
"""Told that the turn is produced again (a retry after a lost commit): what was streamed so far is
void, the pieces that follow start the reply anew."""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens the provider served from its prompt cache (``prompt_tokens_details.cached_tokens``;
    0 when the provider does not report it)."""

    @classmethod
    def from_json(cls, usage: object) -> Usage | None:
        """From the ``usage`` object of a chat completion (or of the last chunk of a stream)."""
        if not isinstance(usage, dict):
            return None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return cls(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), int(cached or 0))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function the model asked to call."""

    name: str
    arguments: str
    """The arguments as the model wrote them (JSON text, not yet validated)."""
    id: str = field(default="", repr=False)
    """The call's id (a ``tool`` message answers it by this id)."""

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    finish_reason: str
    usage: Usage | None
    model: str
    seconds: float
    tool_call: ToolCall | None = None
    """The first of ``tool_calls`` (either may be given: each fills the other)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Every call of the reply, in the model's order."""

    def __post_init__(self) -> None:
        if self.tool_calls and self.tool_call is None:
            object.__setattr__(self, "tool_call", self.tool_calls[0])
        elif self.tool_call is not None and not self.tool_calls:
            object.__setattr__(self, "tool_calls", (self.tool_call,))

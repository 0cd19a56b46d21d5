"""Reading a chat-completion answer, whole or streamed, without trusting its shape.

Every field is read totally (a missing or odd field never raises KeyError/TypeError/ValueError), and
only an answer with one of OpenAI's finish reasons is complete: none (a stream cut by a proxy ends
cleanly, just without one) or another (``error``, ``abort``: generation failed) is
LLMIncompleteReplyError."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.core.errors import LLMIncompleteReplyError
from services.core.records import ToolCall, Usage

FINISH_REASONS = frozenset(
    {"stop", "length", "tool_calls", "function_call", "content_filter", "eos", "eos_token", "end_turn", "stop_sequence"}
)
"""The finish reasons of an answer that ended as the model meant (or hit a limit the caller checks):
OpenAI's, and the end-of-sequence names OpenAI-compatible servers and proxies send for ``stop``
(TGI's ``eos_token``, ``eos``; Anthropic-style ``end_turn`` / ``stop_sequence``). Anything else
(``error``, ``abort``, an unknown word) is a generation that failed."""


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    finish_reason: str
    usage: Usage | None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def tool_call(self) -> ToolCall | None:
        return self.tool_calls[0] if self.tool_calls else None


def read_completion(body: object) -> Reply:
    """A non-streamed answer (``chat.completion``)."""
    choice = _first_choice(body)
    message = choice.get("message") if choice is not None else None
    if choice is None or not isinstance(message, dict):
        raise LLMIncompleteReplyError(f"the LLM answer has no readable choice ({type(body).__name__})")
    finish = _complete_finish(_finish(choice))
    usage = usage_of(body.get("usage") if isinstance(body, dict) else None)
    return Reply(_text(message.get("content")), finish, usage, _tool_calls(message.get("tool_calls")))


@dataclass
class StreamReader:
    """Folds ``chat.completion.chunk`` objects into a Reply; ``feed`` returns the chunk's text."""

    parts: list[str] = field(default_factory=list)
    finish_reason: str = ""
    usage: Usage | None = None
    calls: dict[int, _CallParts] = field(default_factory=dict)
    """The tool calls by their delta ``index``: id and name come once, the arguments in pieces."""

    def feed(self, chunk: object) -> str:
        if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
            self.usage = usage_of(chunk["usage"])
        choice = _first_choice(chunk)
        if choice is None:
            return ""
        self.finish_reason = _finish(choice) or self.finish_reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict):
                self._feed_call(call)
        text = _text(delta.get("content"))
        if text:
            self.parts.append(text)
        return text

    def _feed_call(self, call: dict[str, Any]) -> None:
        index = call.get("index", 0)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_CALLS:
            return
        parts = self.calls.setdefault(index, _CallParts())
        parts.id = parts.id or _str(call.get("id"))
        function = call.get("function")
        if isinstance(function, dict):
            parts.name = parts.name or _str(function.get("name"))
            parts.arguments.append(_str(function.get("arguments")))

    def reply(self) -> Reply:
        if not self.finish_reason:
            raise LLMIncompleteReplyError("the LLM stream ended without a finish reason")
        calls = tuple(
            ToolCall(parts.name, "".join(parts.arguments), parts.id or f"call_{index}")
            for index, parts in sorted(self.calls.items())
            if parts.name
        )
        return Reply("".join(self.parts), _complete_finish(self.finish_reason), self.usage, calls)


MAX_CALLS = 64
"""Of one reply, the tool calls read (by delta index); a larger index is ignored."""


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _complete_finish(finish: str) -> str:
    if not finish:
        raise LLMIncompleteReplyError("the LLM answer has no finish reason")
    if finish not in FINISH_REASONS:
        raise LLMIncompleteReplyError(f"the LLM answer ended with finish reason {finish[:40]!r}: generation failed")
    return finish


def usage_of(usage: object) -> Usage | None:
    """The ``usage`` object; counts that are not numbers read as 0."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), _count(cached))


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return max(0, int(min(value, 2**62)))


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _text(content: object) -> str:
    """``content`` as a string, or as a list of content parts (``{"type": "text", "text": ...}``)."""
    if isinstance(content, list):
        return "".join(_str(part.get("text")) for part in content if isinstance(part, dict))
    return _str(content)


def _tool_calls(calls: object) -> tuple[ToolCall, ...]:
    """Every named call of a whole answer's ``tool_calls``, in order (an id made up when missing)."""
    if not isinstance(calls, list):
        return ()
    found: list[ToolCall] = []
    for index, call in enumerate(calls[:MAX_CALLS]):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and _str(function.get("name")):
            call_id = _str(call.get("id")) or f"call_{index}"
            found.append(ToolCall(_str(function.get("name")), _str(function.get("arguments")), call_id))
    return tuple(found)


def _first_choice(data: object) -> dict[str, Any] | None:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    return choices[0]


def _finish(choice: dict[str, Any]) -> str:
    return _str(choice.get("finish_reason"))

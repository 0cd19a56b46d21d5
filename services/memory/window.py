"""The budgeted prompt window. Pure code: no I/O, linear in the length of the history."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from services.core.errors import ConfigurationError, CorruptHistoryError, MessageTooLongError
from services.core.records import PromptPart
from services.core.tokens import REPLY_PRIMER_TOKENS


class Costed(Protocol):
    """Anything with a role and a precomputed token cost (a PromptPart, a StoredMessage)."""

    @property
    def role(self) -> str: ...

    @property
    def tokens(self) -> int: ...


H = TypeVar("H", bound=Costed)


def _as_part(item: Costed) -> PromptPart:
    if not isinstance(item, PromptPart):
        raise TypeError("history items that are not PromptPart need a render function")
    return item


@dataclass(frozen=True, slots=True)
class Window:
    """The prompt to send, in chronological order, with its metrics."""

    messages: tuple[PromptPart, ...]
    estimated_tokens: int
    context_history_messages: int
    removed_history_messages: int

    @property
    def history_start(self) -> int:
        """Index in the stored history of the first message that made it into the prompt."""
        return self.removed_history_messages


def _check_turn(history: Sequence[Costed], start: int) -> None:
    for index, expected in ((start, "user"), (start + 1, "assistant")):
        role = history[index].role
        if role != expected:
            raise CorruptHistoryError(f"history message {index} has role {role!r}, expected {expected!r}")


def fixed_cost(instruction: PromptPart, context: Sequence[PromptPart]) -> int:
    """Tokens of the parts that are always sent besides the new message (primer included)."""
    return instruction.tokens + sum(part.tokens for part in context) + REPLY_PRIMER_TOKENS


def build_window(
    *,
    instruction: PromptPart,
    context: Sequence[PromptPart],
    history: Sequence[H],
    new_message: PromptPart,
    budget: int,
    render: Callable[[H], PromptPart] = _as_part,
) -> Window:
    """Instruction + context + the newest whole turns that fit + the new message, within ``budget``.

    History enters newest first, a whole user+assistant turn at a time, and stops at the first turn
    that does not fit, so the prompt never has a gap. Every turn it reaches must be user+assistant
    (CorruptHistoryError otherwise), so a broken history is never sent. Only the included history items are passed
    to ``render`` (which turns a stored message into prompt text; costs must already be known).
    Raises MessageTooLongError if the new message alone does not fit next to instruction and context.
    """
    if len(history) % 2:
        raise CorruptHistoryError(f"history has {len(history)} messages: not whole user/assistant turns")
    fixed = fixed_cost(instruction, context)
    room_for_message = budget - fixed
    if room_for_message <= 0:
        raise ConfigurationError(f"input budget {budget} is smaller than instruction + summary ({fixed} tokens)")
    if new_message.tokens > room_for_message:
        raise MessageTooLongError(tokens=new_message.tokens, limit=room_for_message)

    room = room_for_message - new_message.tokens
    start = len(history)
    while start >= 2:
        # only the turns the walk reaches are checked: cost stays flat in the history length, and
        # nothing older than the first turn that does not fit can reach the prompt anyway
        _check_turn(history, start - 2)
        turn_tokens = history[start - 2].tokens + history[start - 1].tokens
        if turn_tokens > room:
            break
        room -= turn_tokens
        start -= 2

    included = [render(item) for item in history[start:]]
    messages = (instruction, *context, *included, new_message)
    used = budget - room
    return Window(
        messages=tuple(messages),
        estimated_tokens=used,
        context_history_messages=len(included),
        removed_history_messages=start,
    )

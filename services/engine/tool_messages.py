"""The messages a turn's tool calls add to its prompt (the model's calls, each call's result as a
hardened ``<tool_result>`` data block), kept within the room the window left in
CHAT_INPUT_TOKEN_BUDGET: a result is cut to fit, and a round that would not fit is not sent (the
model then answers). Pure code."""

from __future__ import annotations

import json
from collections.abc import Sequence

from services.core.actions import ActionOutcome
from services.core.prompt_format import tool_result_block
from services.core.records import Completion, PromptPart, ToolCall
from services.core.tokens import TokenCounter, count_calls

MIN_RESULT_TOKENS = 64
"""The room each call of a round must find for its result (a refusal or a short answer fits)."""
CUT_MARK = " …[cut to fit]"


def result_text(outcome: ActionOutcome) -> str:
    """What the model reads of an outcome: its kind, the note and the projected data, as JSON."""
    fields: dict[str, object] = {"status": outcome.kind, "note": outcome.note}
    if outcome.data is not None:
        fields["data"] = outcome.data
    return json.dumps(fields, ensure_ascii=False, default=str)


def calls_part(counter: TokenCounter, text: str, calls: Sequence[ToolCall]) -> PromptPart:
    """The assistant message that made ``calls`` (sent back before their results)."""
    tokens = counter.count_message("assistant", text) + count_calls(
        counter, ((call.id, call.name, call.arguments) for call in calls)
    )
    return PromptPart("assistant", text, tokens, tool_calls=tuple(calls))


def result_part(counter: TokenCounter, call_id: str, outcome: ActionOutcome, room: int) -> PromptPart:
    """The ``tool`` message of one result, within ``room`` tokens (its text cut when it is longer)."""
    text = result_text(outcome)
    content = tool_result_block(text)
    tokens = counter.count_message("tool", content) + counter.count_text(call_id)
    encoded = counter.encode(text)
    keep = len(encoded)
    while tokens > room and keep > 0:  # each pass cuts at least the excess: a few passes at most
        keep = max(0, keep - (tokens - room) - counter.count_text(CUT_MARK))
        content = tool_result_block(counter.decode(encoded[:keep]) + CUT_MARK)
        tokens = counter.count_message("tool", content) + counter.count_text(call_id)
    return PromptPart("tool", content, tokens, tool_call_id=call_id)


class ToolTranscript:
    """A turn's tool messages, in order, and the tokens left for more (``room``)."""

    def __init__(self, counter: TokenCounter, room: int, start: Sequence[PromptPart] = ()) -> None:
        self._counter = counter
        self.messages: list[PromptPart] = list(start)
        self.room = room

    def calls(self, completion: Completion, calls: Sequence[ToolCall]) -> bool:
        """Add the model's message making ``calls``; False (nothing added) when it and a minimal
        result for each call would not fit."""
        part = calls_part(self._counter, completion.text, calls)
        if part.tokens + MIN_RESULT_TOKENS * len(calls) > self.room:
            return False
        self.messages.append(part)
        self.room -= part.tokens
        return True

    def result(self, call_id: str, outcome: ActionOutcome, *, still_to_come: int) -> None:
        """Add a call's result, leaving the minimal room for the ``still_to_come`` results of the round."""
        part = result_part(self._counter, call_id, outcome, self.room - MIN_RESULT_TOKENS * still_to_come)
        self.messages.append(part)
        self.room -= part.tokens

    def another_round(self) -> bool:
        """Whether a next round (the model's calls and their results) may still fit."""
        return self.room >= 2 * MIN_RESULT_TOKENS

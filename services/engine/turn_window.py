"""The prompt window of one turn: the instruction, the summary, the newest history that fits and the
new message within the budget; a new message with images that leave no room goes at low detail, and
is refused (MediaError NO_ROOM) when even that does not fit. No I/O."""

from __future__ import annotations

from collections.abc import Callable

from services.core import media_reasons as reasons
from services.core.errors import MediaError, MessageTooLongError
from services.core.prompt_format import customer_block, with_actions
from services.core.records import PromptPart, StoredMessage
from services.core.tokens import TokenCounter
from services.core.turn_media import TurnMedia
from services.media.prompt_parts import turn_part
from services.memory.window import Window, build_window


def render_stored(message: StoredMessage) -> PromptPart:
    """A stored message as prompt text: customer text goes inside its data fence, a reply after the
    note of the actions its turn took (if any)."""
    if message.role == "user":
        return PromptPart(message.role, customer_block(message.content), message.tokens)
    content = with_actions(message.content, message.actions)
    return PromptPart(message.role, content, message.tokens)


class TurnWindow:
    def __init__(self, *, instruction: PromptPart, budget: int, counter: TokenCounter) -> None:
        self.instruction = instruction
        self.budget = budget
        self._counter = counter

    def build(self, summary: PromptPart | None, history: tuple[StoredMessage, ...], new: PromptPart) -> Window:
        return build_window(
            instruction=self.instruction,
            context=[summary] if summary else [],
            history=history,
            new_message=new,
            budget=self.budget,
            render=render_stored,
        )

    def with_new(self, new: PromptPart) -> Callable[[PromptPart | None, tuple[StoredMessage, ...]], Window]:
        """The window of ``new`` for another summary and history (what compaction tries)."""
        return lambda summary, history: self.build(summary, history, new)

    def fitting(
        self,
        summary: PromptPart | None,
        history: tuple[StoredMessage, ...],
        new: PromptPart,
        text: str,
        media: TurnMedia | None,
    ) -> tuple[Window, PromptPart]:
        """The window with the new message, and the new message as sent (its images perhaps at low)."""
        try:
            return self.build(summary, history, new), new
        except MessageTooLongError:
            if not new.images:
                raise
        low = turn_part(self._counter, text, media, low=True)
        try:
            return self.build(summary, history, low), low
        except MessageTooLongError as exc:
            raise MediaError(
                f"the images do not fit the prompt ({exc})", kind="image", reason=reasons.NO_ROOM, limit=exc.limit
            ) from exc

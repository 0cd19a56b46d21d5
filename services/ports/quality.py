"""The conversation log contract: the events support quality is measured from (a conversation started,
the bot's first answer, a handoff, the feedback question and its answer) and the feedback schedule
every worker reads (docs/quality.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from services.core.fence import Fence
from services.core.quality import Conversation, Rating

Rated = Literal["new", "again", "none"]
"""A press recorded now / the same press seen again (a redelivery: its reply is sent again) / nothing
(rated before, or the conversation is gone)."""


@dataclass(frozen=True, slots=True)
class Started:
    """What a customer message did: ``new`` when it started a conversation."""

    new: bool
    conversation: int


@dataclass(frozen=True, slots=True)
class Ask:
    """A feedback question to send: its conversation and the customer's language; ``again`` when an
    attempt that died may have sent it already."""

    conversation: int
    language: str
    again: bool = False


class ConversationLog(Protocol):
    """Per chat (one slot, fenced where a decision is made): the current conversation, its records and
    the feedback state (none → asking → asked, once per conversation). Global: the due schedule (chat
    → when to ask) and the index of conversations by start time."""

    async def customer_message(
        self, chat_id: int, *, private: bool, language: str, gap_seconds: float, sent_ms: int = 0, item_id: str = ""
    ) -> Started:
        """A customer's message: starts a conversation after ``gap_seconds`` of quiet (or /new; it
        starts at ``sent_ms``, the message's own date, when given), and takes the chat off the schedule
        (the quiet period starts again once the bot has answered). The update ``item_id`` counted once:
        its redelivery changes nothing."""
        ...

    async def relayed(self, chat_id: int, *, item_id: str = "") -> None:
        """A customer's message relayed to the operators during a handoff: counted in the current
        conversation and its quiet gap starts again; never a new conversation, nothing scheduled."""
        ...

    async def answered(self, chat_id: int, *, ask_after_seconds: float) -> float | None:
        """The bot's answer was sent: schedules the question ``ask_after_seconds`` later (0: never; not
        in groups, during a handoff or once asked). The seconds to the first answer, when it is one."""
        ...

    async def handoff_opened(self, chat_id: int, *, private: bool) -> tuple[bool, bool]:
        """A handoff opened: never asked while it is open (a new conversation clears it: an end that
        was not recorded does not silence the chat). Whether it is the conversation's first, and
        whether it started a conversation (``/operator`` with none going, in a private chat or not)."""
        ...

    async def handoff_ended(self, chat_id: int, *, ask: bool) -> None:
        """A handoff ended: with ``ask``, the question is due now (unless asked before)."""
        ...

    async def ended(self, chat_id: int) -> None:
        """/new: the conversation ends; its question is never asked."""
        ...

    async def due(self, limit: int = 100) -> list[tuple[int, int]]:
        """Chats whose question is due, with the time it was due (ms), oldest first."""
        ...

    async def claim(self, chat_id: int, due_ms: int, *, hold_seconds: float) -> int | None:
        """Take a due chat for ``hold_seconds`` (exactly one caller wins; the hold expires, so a caller
        that dies leaves it to another): the hold's mark for ``release``, or None."""
        ...

    async def release(self, chat_id: int, hold: int) -> None:
        """The claimed chat's question was queued: off the schedule, unless it was moved meanwhile."""
        ...

    async def begin_ask(self, chat_id: int, *, fence: Fence | None = None) -> Ask | None:
        """Under the chat's lease: the question to send now, marked as being asked; None when it is not
        due (the customer wrote again, a reply is pending, a handoff is open, asked already, a group)."""
        ...

    async def asked(self, chat_id: int, conversation: int, *, fence: Fence | None = None, sent: bool = True) -> bool:
        """The question went out (marked in the step that records it), or Telegram refused it (``sent``
        False: never tried again, not recorded as asked). True the first time."""
        ...

    async def rate(self, chat_id: int, conversation: int, rating: Rating, *, item_id: str) -> Rated:
        """A press of Yes / No (the first one counts; ``item_id``: the update that pressed it); "none"
        for a conversation that was never asked (a forged press)."""
        ...

    async def conversations(self, since_ms: int) -> list[Conversation]:
        """Every recorded conversation started at or after ``since_ms`` (the report)."""
        ...

    async def forget(self, chat_id: int) -> None:
        """/forget: the chat's conversation records and feedback state, and its place in the schedule."""
        ...

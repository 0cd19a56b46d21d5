"""The action ledger of the in-process backend (``services.ports.actions.ActionLedger``): recorded
outcomes by idempotency key, pending decisions, the actions' lines and the shared phone, per chat
(nothing survives a restart; /forget via ``forget``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from services.core.actions import ActionOutcome, PendingAction, PendingState
from services.core.fence import Fence


@dataclass
class _ChatActions:
    recorded: dict[str, ActionOutcome] = field(default_factory=dict)
    pending: dict[str, PendingAction] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    phone: str | None = None


class InMemoryActionLedger:
    """One process's ledger. Every method runs without an ``await`` inside, so each is atomic on the
    event loop, as the Redis ledger's scripts are on the server (``decide``: one decision)."""

    def __init__(self) -> None:
        self._chats: dict[int, _ChatActions] = {}

    def _chat(self, chat_id: int) -> _ChatActions:
        return self._chats.setdefault(chat_id, _ChatActions())

    async def recorded(self, chat_id: int, key: str) -> ActionOutcome | None:
        return self._chat(chat_id).recorded.get(key)

    async def record(self, chat_id: int, key: str, outcome: ActionOutcome, *, fence: Fence | None = None) -> None:
        chat = self._chat(chat_id)
        if key in chat.recorded:
            return
        chat.recorded[key] = outcome
        if outcome.line:
            chat.lines.append(outcome.line)

    async def put_pending(self, pending: PendingAction, *, fence: Fence | None = None) -> None:
        self._chat(pending.chat_id).pending.setdefault(pending.action_id, replace(pending, state="pending"))

    async def pending(self, chat_id: int, action_id: str) -> PendingAction | None:
        return self._chat(chat_id).pending.get(action_id)

    async def open_pending(self, chat_id: int) -> list[PendingAction]:
        found = [p for p in self._chat(chat_id).pending.values() if p.state == "pending"]
        return sorted(found, key=lambda p: p.created)

    async def decide(self, chat_id: int, action_id: str, state: PendingState, *, now: float) -> PendingAction | None:
        chat = self._chat(chat_id)
        current = chat.pending.get(action_id)
        if current is None or current.state != "pending" or state in ("pending", "done"):
            return None
        if state != "expired" and now > current.expires:
            return None
        chat.pending[action_id] = decided = replace(current, state=state)
        return decided

    async def finish(self, chat_id: int, action_id: str, outcome: ActionOutcome) -> None:
        chat = self._chat(chat_id)
        current = chat.pending.get(action_id)
        if current is None or current.state == "done":
            return
        chat.pending[action_id] = replace(current, state="done", result=outcome)
        if outcome.line:
            chat.lines.append(outcome.line)

    async def lines(self, chat_id: int) -> list[str]:
        return list(self._chat(chat_id).lines)

    async def set_phone(self, chat_id: int, phone: str) -> None:
        self._chat(chat_id).phone = phone

    async def phone(self, chat_id: int) -> str | None:
        return self._chat(chat_id).phone

    async def forget(self, chat_id: int) -> None:
        self._chats.pop(chat_id, None)

"""The Telegram edge of actions, through aiogram's real Dispatcher and Bot against the stub Bot API:
a write's text under Confirm / Cancel, a press carried out once (pressed twice, cancelled, expired,
forged), the share-contact keyboard and the own-contact rule, and an approval card whose Approve
press reaches the customer. The chat service and the ledger are small fakes of the engine's API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import fakeredis
import pytest
from aiogram import Bot, Dispatcher
from prometheus_client import REGISTRY

from bot.factory import build_bot, build_dispatcher
from bot.provider_health import ProviderWatch
from bot.queueing.intake import Intake, operator_route
from bot.settings import BotSettings
from bot.telegram.action_buttons import Press, callback_data, read_press
from bot.telegram.texts import TEXTS
from prompts.actions import CONTACT_SHARED
from services.backends.memory import InMemoryBackend
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import RedisWorkQueue
from services.core.actions import ActionOutcome, Customer, PendingAction, PendingState, Risk
from services.core.errors import LLMUnavailableError
from services.core.turns import PendingTurn, TurnResult
from tests.stubs.telegram_server import StubTelegram
from tests.worker_helpers import make_worker

CUSTOMER, GROUP, OPERATOR = 31337, -1001234567890, 9001
USER = CUSTOMER + 7  # the stub's sender of the customer's messages
EN = TEXTS["en"]


class FakeLedger:
    """``ActionLedger``'s decisions and phone numbers, in memory (decide: one caller moves it)."""

    def __init__(self) -> None:
        self.actions: dict[tuple[int, str], PendingAction] = {}
        self.phones: dict[int, str] = {}

    async def put_pending(self, pending: PendingAction, *, fence: Any = None) -> None:
        self.actions[pending.chat_id, pending.action_id] = pending

    async def pending(self, chat_id: int, action_id: str) -> PendingAction | None:
        return self.actions.get((chat_id, action_id))

    async def decide(self, chat_id: int, action_id: str, state: PendingState, *, now: float) -> PendingAction | None:
        known = self.actions.get((chat_id, action_id))
        if known is None or known.state != "pending" or (now >= known.expires and state != "expired"):
            return None
        self.actions[chat_id, action_id] = decided = replace(known, state=state)
        return decided

    async def finish(self, chat_id: int, action_id: str, outcome: ActionOutcome) -> None:
        self.actions[chat_id, action_id] = replace(self.actions[chat_id, action_id], state="done", result=outcome)

    async def set_phone(self, chat_id: int, phone: str) -> None:
        self.phones[chat_id] = phone

    async def phone(self, chat_id: int) -> str | None:
        return self.phones.get(chat_id)


@dataclass
class FakeChat:
    """``ChatService``'s begin / carry_out / finish: turns as the test queues them; carry_out runs a
    confirmed or approved action (``ran``) and answers; a declined one is only answered."""

    ledger: FakeLedger
    results: list[TurnResult] = field(default_factory=list)
    begun: list[tuple[str, Customer | None]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    carried: list[tuple[int, bool]] = field(default_factory=list)
    """(chat, under a fence) of each carry_out."""
    die_after_running: int = 0
    summarizer: Any = None

    async def begin(self, chat_id: int, text: str, *, customer: Customer | None = None, **kw: Any) -> PendingTurn:
        self.begun.append((text, customer))
        result = self.results.pop(0) if self.results else TurnResult(reply="an answer")
        return PendingTurn(chat_id, kw.get("turn_id"), result, deliver=True, after="answered")

    async def carry_out(
        self, chat_id: int, action_id: str, *, turn_id: str, customer: Customer, **kw: Any
    ) -> PendingTurn | None:
        self.carried.append((chat_id, kw.get("fence") is not None))
        pending = await self.ledger.pending(chat_id, action_id)
        if pending is None or pending.state == "pending":
            return None
        if pending.state in ("confirmed", "approved"):  # run once; a done one is only told again
            self.ran.append(action_id)
            await self.ledger.finish(chat_id, action_id, ActionOutcome("ok", "done"))
        elif pending.state == "declined":
            await self.ledger.finish(chat_id, action_id, ActionOutcome("declined", "kept"))
        if self.die_after_running:  # the worker dies (or the model fails) after the request was made
            self.die_after_running -= 1
            raise LLMUnavailableError("the model is down")
        done = await self.ledger.pending(chat_id, action_id)
        assert done is not None and done.result is not None
        kept = done.result.kind == "declined"
        reply = "Your order is kept." if kept else f"Done: {pending.tool} for {customer.telegram_id}."
        return PendingTurn(chat_id, turn_id, TurnResult(reply=reply), deliver=True, after="answered")

    async def finish(self, turn: PendingTurn, *, fence: Any = None) -> TurnResult:
        return turn.result

    async def close(self) -> None:
        return None


@dataclass
class Edge:
    telegram: StubTelegram
    bot: Bot
    dispatcher: Dispatcher
    chat: FakeChat
    ledger: FakeLedger
    backend: InMemoryBackend

    async def feed(self, update: dict[str, Any]) -> None:
        await self.dispatcher.feed_raw_update(self.bot, update)

    async def pending(
        self, risk: Risk, *, prompt: str = "Cancel order 5521?", expires_in: float = 600
    ) -> PendingAction:
        now = time.time()
        action = PendingAction(
            action_id=f"a{len(self.ledger.actions)}", chat_id=CUSTOMER, tool="cancel_order", risk=risk,
            arguments={"order_id": "5521"}, prompt=prompt, idempotency_key="k", created=now, expires=now + expires_in,
            customer=Customer(telegram_id=USER),
        )  # fmt: skip
        await self.ledger.put_pending(action)
        return action

    def buttons(self, chat_id: int) -> list[dict[str, Any]]:
        [keyboard] = [
            c.params["reply_markup"] for c in self.telegram.of("sendMessage", chat_id) if "reply_markup" in c.params
        ]
        row: list[dict[str, Any]] = keyboard["inline_keyboard"][0]
        return row


@pytest.fixture
async def edge(telegram: StubTelegram, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Edge]:
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    settings = BotSettings(
        _env_file=None, telegram_api_url=telegram.base_url, operator_chat_id=GROUP, drafts_enabled=False
    )  # type: ignore[call-arg]
    backend = InMemoryBackend()
    ledger = FakeLedger()
    backend.actions = ledger  # type: ignore[attr-defined]
    chat = FakeChat(ledger)
    dispatcher = build_dispatcher(chat, settings, backend=backend, provider=ProviderWatch())  # type: ignore[arg-type]
    bot = build_bot(settings)
    yield Edge(telegram, bot, dispatcher, chat, ledger, backend)
    await bot.session.close()


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_write_waits_for_the_button_and_runs_once_when_pressed_twice(edge: Edge) -> None:
    pending = await edge.pending("write")
    edge.chat.results.append(TurnResult(reply="I can cancel it for you.", pending=pending))
    await edge.feed(edge.telegram.message_update(CUSTOMER, "cancel order 5521"))
    assert edge.telegram.texts_to(CUSTOMER) == ["I can cancel it for you.", "Cancel order 5521?"]
    buttons = edge.buttons(CUSTOMER)
    assert [read_press(b["callback_data"]) for b in buttons] == [Press("confirm", "a0"), Press("cancel", "a0")]
    assert [b["text"] for b in buttons] == [EN["action_confirm"], EN["action_cancel"]]
    accepted = counted("sb_action_confirmations_total", step="accepted")
    for _ in range(2):  # a double tap: one decision
        await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, buttons[0]["callback_data"], user_id=USER))
    assert edge.chat.ran == ["a0"], "the write did not run exactly once"
    assert edge.telegram.texts_to(CUSTOMER)[2:] == [f"Done: cancel_order for {USER}.", EN["action_gone"]]
    toasts = [c.params["text"] for c in edge.telegram.of("answerCallbackQuery")]
    assert toasts == [EN["action_confirmed"], EN["action_gone"]]
    assert [str(c.params["message_id"]) for c in edge.telegram.of("editMessageReplyMarkup")] == ["1001", "1001"]
    assert counted("sb_action_confirmations_total", step="accepted") == accepted + 1


async def test_cancel_tells_the_model_and_runs_nothing(edge: Edge) -> None:
    pending = await edge.pending("write")
    declined = counted("sb_action_confirmations_total", step="declined")
    await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, f"act:n:{pending.action_id}", user_id=USER))
    assert edge.chat.ran == [] and edge.ledger.actions[CUSTOMER, "a0"].state == "done"
    assert edge.telegram.texts_to(CUSTOMER) == ["Your order is kept."]
    assert counted("sb_action_confirmations_total", step="declined") == declined + 1


async def test_an_expired_confirmation_runs_nothing_and_says_so(edge: Edge) -> None:
    pending = await edge.pending("write", expires_in=-1)
    expired = counted("sb_action_confirmations_total", step="expired")
    await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, f"act:y:{pending.action_id}", user_id=USER))
    assert edge.chat.ran == [] and edge.telegram.texts_to(CUSTOMER) == [EN["action_gone"]]
    assert counted("sb_action_confirmations_total", step="expired") == expired + 1


async def test_a_forged_press_decides_nothing(edge: Edge) -> None:
    """A modified client can send any callback data: "confirm" on an action that waits for an operator,
    or on another customer's action, moves nothing."""
    approval = await edge.pending("approval")
    await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, f"act:y:{approval.action_id}", user_id=USER))
    write = await edge.pending("write")
    await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, f"act:y:{write.action_id}", user_id=USER + 1))
    assert [a.state for a in edge.ledger.actions.values()] == ["pending", "pending"] and edge.chat.ran == []


async def test_a_typed_yes_is_a_message_not_a_confirmation(edge: Edge) -> None:
    pending = await edge.pending("write")
    edge.chat.results.append(TurnResult(reply="Please press Confirm.", pending=None))
    await edge.feed(edge.telegram.message_update(CUSTOMER, "yes"))
    assert edge.chat.begun == [("yes", Customer(telegram_id=USER))]
    assert edge.ledger.actions[CUSTOMER, pending.action_id].state == "pending" and edge.chat.ran == []


async def test_the_share_contact_button_takes_only_the_senders_own_number(edge: Edge) -> None:
    edge.chat.results.append(TurnResult(reply="I need your number.", ask_contact=True))
    await edge.feed(edge.telegram.message_update(CUSTOMER, "where is my order?"))
    [asked] = [c for c in edge.telegram.of("sendMessage", CUSTOMER) if "reply_markup" in c.params]
    keyboard = asked.params["reply_markup"]
    assert asked.params["text"] == EN["contact_ask"] and keyboard["one_time_keyboard"] is True
    assert keyboard["keyboard"] == [[{"text": EN["contact_button"], "request_contact": True}]]

    def contact(user_id: int) -> dict[str, Any]:
        card = {"phone_number": "+15550001", "first_name": "Ann", "user_id": user_id}
        return edge.telegram.message_update(CUSTOMER, None, extra={"contact": card})

    await edge.feed(contact(USER + 1))  # someone else's card, forwarded or attached
    assert edge.telegram.texts_to(CUSTOMER)[-1] == EN["contact_not_own"] and edge.ledger.phones == {}
    await edge.feed(contact(USER))
    assert edge.ledger.phones == {CUSTOMER: "+15550001"}
    [saved] = [c for c in edge.telegram.of("sendMessage", CUSTOMER) if c.params["text"] == EN["contact_saved"]]
    assert saved.params["reply_markup"] == {"remove_keyboard": True}
    assert edge.chat.begun[-1] == (CONTACT_SHARED, Customer(telegram_id=USER, phone="+15550001"))


async def test_an_approval_card_and_an_operators_approve_reach_the_customer(edge: Edge) -> None:
    pending = await edge.pending("approval", prompt="Refund 40 EUR for order 5521?")
    asked = counted("sb_action_approvals_total", step="asked")
    edge.chat.results.append(TurnResult(reply="I asked the team.", pending=pending))
    await edge.feed(edge.telegram.message_update(CUSTOMER, "refund me"))
    assert edge.telegram.texts_to(CUSTOMER) == ["I asked the team.", EN["approval_waiting"]]
    [card] = edge.telegram.texts_to(GROUP)
    assert "Refund 40 EUR for order 5521?" in card and str(USER) in card and "cancel_order" in card
    approve, reject = edge.buttons(GROUP)
    assert [read_press(approve["callback_data"]), read_press(reject["callback_data"])] == [
        Press("approve", pending.action_id, CUSTOMER),
        Press("reject", pending.action_id, CUSTOMER),
    ]
    press = edge.telegram.press_update(GROUP, 2000, approve["callback_data"], user_id=OPERATOR, chat_type="supergroup")
    await edge.feed(press)
    assert edge.chat.ran == [pending.action_id]
    assert edge.telegram.texts_to(CUSTOMER)[-1] == f"Done: cancel_order for {USER}."
    [edited] = edge.telegram.of("editMessageText", GROUP)
    assert edited.params["text"].endswith(EN["op_approved"].format(name="@presser"))
    await edge.feed(press)  # pressed again, or by a second operator: nothing more
    assert edge.chat.ran == [pending.action_id]
    assert counted("sb_action_approvals_total", step="asked") == asked  # the fake engine reports no turns


async def test_an_approve_press_outside_the_operators_group_decides_nothing(edge: Edge) -> None:
    pending = await edge.pending("approval")
    data = f"act:a:{CUSTOMER}:{pending.action_id}"
    await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, data, user_id=USER))  # the customer themselves
    assert edge.ledger.actions[CUSTOMER, pending.action_id].state == "pending" and edge.chat.ran == []


async def test_queued_an_approve_press_runs_in_the_customers_chat_even_after_a_dead_attempt(edge: Edge) -> None:
    """Queued mode: the operator's press is queued in the customer chat's inbox, served under that
    chat's lease; an attempt that dies after the action ran is retried, and the retry tells the
    customer the recorded outcome without running it again."""
    redis, keys = fakeredis.FakeAsyncRedis(), KeySpace("edge", "123456")
    queue = RedisWorkQueue(redis=redis, keys=keys, lease_ms=5000)
    dead = RedisDeadLetters(redis=redis, keys=keys)
    intake = Intake(queue=queue, dead_letters=dead, identity="w", route=operator_route(GROUP, edge.backend.handoffs))
    pending = await edge.pending("approval")
    data = callback_data("approve", pending.action_id, CUSTOMER)
    await intake.take(edge.telegram.press_update(GROUP, 2000, data, user_id=OPERATOR, chat_type="supergroup"))
    edge.chat.die_after_running = 1
    worker = make_worker(queue, edge.dispatcher, edge.bot)  # a worker that starts after the press was queued
    running = asyncio.create_task(worker.run())
    try:
        await edge.telegram.wait_messages(CUSTOMER, 1, within=30)
    finally:
        worker.stop()
        await running
    assert edge.telegram.texts_to(CUSTOMER) == [f"Done: cancel_order for {USER}."]
    assert edge.chat.ran == [pending.action_id], "the approved action ran twice (or never)"
    assert edge.chat.carried == [(CUSTOMER, True), (CUSTOMER, True)], "not carried out in the customer's chat"
    assert await dead.count() == 0


async def test_a_failure_after_a_customers_press_is_told_in_their_chat(edge: Edge) -> None:
    pending = await edge.pending("write")
    edge.chat.die_after_running = 1
    await edge.feed(edge.telegram.press_update(CUSTOMER, 1001, f"act:y:{pending.action_id}", user_id=USER))
    assert edge.telegram.texts_to(CUSTOMER) == [EN["llm_unavailable"]]

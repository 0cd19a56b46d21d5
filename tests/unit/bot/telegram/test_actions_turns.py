"""Actions at the Telegram edge with the real engine: aiogram's Dispatcher and Bot against the stub
Bot API, the real ChatService (tool loop, decisions) against the stub OpenAI server, the real ledger,
and a fake of the operator's tools that counts effects. A write runs once on its button (pressed
twice, cancelled, expired, forged: never more); a typed "yes" confirms nothing; only the sender's own
contact is taken; an operator's approval reaches the customer, in queued mode on a real redis-server
after a worker restart and a failed attempt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiogram import Bot, Dispatcher
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from bot.factory import build_bot, build_dispatcher
from bot.metrics import PrometheusObserver
from bot.provider_health import ProviderWatch
from bot.queueing.intake import Intake, operator_route
from bot.settings import BotSettings
from bot.telegram.texts import TEXTS
from prompts.actions import CONTACT_SHARED
from services.backends.memory import InMemoryBackend
from services.backends.redis.backend import RedisBackend
from services.core.actions import ActionOutcome, Customer, Risk
from services.engine.builders import build_chat_service
from services.llm.client import LLMClient
from services.settings import MemorySettings
from tests.conftest import TEST_KEYS, RedisServer
from tests.stubs.openai_server import StubError, StubOpenAI, customer_texts, tool_reply
from tests.stubs.telegram_server import StubTelegram
from tests.worker_helpers import make_worker

CUSTOMER, GROUP, OPERATOR = 31337, -1001234567890, 9001
USER = CUSTOMER + 7  # the stub's sender of the customer's messages
EN = TEXTS["en"]


@dataclass
class ShopTools:
    """``ActionTools`` of a shop: ``order_status`` (read, needs the phone), ``cancel_order`` (write)."""

    effects: list[tuple[str, str, int, str | None]] = field(default_factory=list)
    """(tool, order, customer id, idempotency key) of every request made."""

    def schemas(self) -> Sequence[dict[str, Any]]:
        return [self._schema(name) for name in self.names()]

    @staticmethod
    def _schema(name: str) -> dict[str, Any]:
        params = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
        return {"type": "function", "function": {"name": name, "strict": True, "parameters": params}}

    def names(self) -> Sequence[str]:
        return ("order_status", "cancel_order", "refund")

    def risk(self, tool: str) -> Risk:
        return {"order_status": "read", "cancel_order": "write"}.get(tool, "approval")

    def needs_phone(self, tool: str) -> bool:
        return tool == "order_status"

    def check(self, tool: str, arguments: str) -> dict[str, Any] | str:
        checked = json.loads(arguments)
        return checked if isinstance(checked, dict) and set(checked) == {"order_id"} else "order_id only"

    def prompt(self, tool: str, arguments: dict[str, Any]) -> str:
        return f"{'Cancel' if tool == 'cancel_order' else 'Refund'} order {arguments['order_id']}?"

    async def run(
        self, tool: str, arguments: dict[str, Any], customer: Customer, *, idempotency_key: str | None
    ) -> ActionOutcome:
        self.effects.append((tool, arguments["order_id"], customer.telegram_id, idempotency_key))
        return ActionOutcome("ok", f"{tool} {arguments['order_id']}: done", data={"status": "ok"}, status=200)


@dataclass
class Edge:
    telegram: StubTelegram
    openai: StubOpenAI
    bot: Bot
    dispatcher: Dispatcher
    tools: ShopTools
    backend: InMemoryBackend

    async def say(self, text: str | None, **extra: Any) -> None:
        await self.dispatcher.feed_raw_update(self.bot, self.telegram.message_update(CUSTOMER, text, **extra))

    async def press(self, data: str) -> None:
        await self.dispatcher.feed_raw_update(self.bot, self.telegram.press_update(CUSTOMER, 1001, data, user_id=USER))

    def buttons(self, chat_id: int = CUSTOMER) -> list[str]:
        marked = [
            c.params["reply_markup"] for c in self.telegram.of("sendMessage", chat_id) if "reply_markup" in c.params
        ]
        return [b["callback_data"] for b in marked[-1]["inline_keyboard"][0]]


@pytest.fixture
def confirm_seconds() -> float:
    return 600.0


@pytest.fixture
async def edge(
    confirm_seconds: float,
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    llm: LLMClient,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Edge]:
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    settings = BotSettings(
        _env_file=None, telegram_api_url=telegram.base_url, drafts_enabled=False, operator_chat_id=GROUP
    )  # type: ignore[call-arg]
    backend, tools = InMemoryBackend(), ShopTools()
    chat = build_chat_service(
        llm=llm, store=backend.store, memory=MemorySettings(_env_file=None), instruction_role="system",  # type: ignore[call-arg]
        observer=PrometheusObserver(tools=tools.names()), actions=tools, ledger=backend.actions,
        actions_confirm_seconds=confirm_seconds,
    )  # fmt: skip
    dispatcher = build_dispatcher(chat, settings, backend=backend, provider=ProviderWatch())
    bot = build_bot(settings)
    yield Edge(telegram, stub_llm, bot, dispatcher, tools, backend)
    await bot.session.close()


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_write_runs_once_on_the_button_and_never_on_a_typed_yes(edge: Edge) -> None:
    calls = counted("sb_action_calls_total", tool="cancel_order", outcome="pending_confirmation")
    edge.openai.chat_replies.extend([tool_reply("cancel_order", order_id="5521"), "Press Confirm to cancel it."])
    await edge.say("cancel order 5521")
    assert edge.telegram.texts_to(CUSTOMER) == ["Press Confirm to cancel it.", "Cancel order 5521?"]
    confirm, _cancel = edge.buttons()
    assert counted("sb_action_calls_total", tool="cancel_order", outcome="pending_confirmation") == calls + 1

    edge.openai.chat_replies.append("Yes, it is done.")  # the model may say anything: "yes" is a message
    await edge.say("yes")
    assert edge.tools.effects == [], "a typed yes ran the write"

    edge.openai.chat_replies.append("Order 5521 is cancelled.")
    await edge.press(confirm)
    await edge.press(confirm)  # a double tap
    assert [effect[:3] for effect in edge.tools.effects] == [("cancel_order", "5521", USER)]
    assert edge.telegram.texts_to(CUSTOMER)[-2:] == ["Order 5521 is cancelled.", EN["action_gone"]]
    toasts = [c.params["text"] for c in edge.telegram.of("answerCallbackQuery")]
    assert toasts == [EN["action_confirmed"], EN["action_gone"]]
    assert len(edge.telegram.of("editMessageReplyMarkup", CUSTOMER)) == 2  # the buttons removed
    told = customer_texts(edge.openai.chat_requests[-1])
    assert any("pressed Confirm" in text for text in told), told


async def test_a_shared_contact_lets_the_model_call_the_tool_again(edge: Edge) -> None:
    edge.openai.chat_replies.extend([tool_reply("order_status", order_id="5521"), "I need your phone number."])
    await edge.say("where is order 5521?")
    asked = [c for c in edge.telegram.of("sendMessage", CUSTOMER) if c.params["text"] == EN["contact_ask"]]
    assert asked and asked[0].params["reply_markup"]["keyboard"][0][0]["request_contact"] is True
    assert edge.tools.effects == []

    edge.openai.chat_replies.extend([tool_reply("order_status", order_id="5521"), "It ships tomorrow."])
    contact = {"phone_number": "+15550001", "first_name": "Ann", "user_id": USER}
    await edge.say(None, extra={"contact": contact})
    assert await edge.backend.actions.phone(CUSTOMER) == "+15550001"
    assert [effect[:3] for effect in edge.tools.effects] == [("order_status", "5521", USER)]
    assert edge.telegram.texts_to(CUSTOMER)[-1] == "It ships tomorrow."
    assert any(CONTACT_SHARED in text for text in customer_texts(edge.openai.chat_requests[-2]))


async def test_an_operators_approval_runs_it_and_the_customer_hears_the_outcome(edge: Edge) -> None:
    approved = counted("sb_action_approvals_total", step="approved")
    edge.openai.chat_replies.extend([tool_reply("refund", order_id="5521"), "I asked the team."])
    await edge.say("refund order 5521")
    assert edge.telegram.texts_to(CUSTOMER) == ["I asked the team.", EN["approval_waiting"]]
    [card] = edge.telegram.texts_to(GROUP)
    assert "Refund order 5521?" in card and str(USER) in card
    approve, _reject = edge.buttons(GROUP)
    edge.openai.chat_replies.append("Your refund is on its way.")
    press = edge.telegram.press_update(GROUP, 2000, approve, user_id=OPERATOR, chat_type="supergroup")
    await edge.dispatcher.feed_raw_update(edge.bot, press)
    assert [effect[:3] for effect in edge.tools.effects] == [("refund", "5521", USER)]
    assert edge.telegram.texts_to(CUSTOMER)[-1] == "Your refund is on its way."
    assert counted("sb_action_approvals_total", step="approved") == approved + 1
    [edited] = edge.telegram.of("editMessageText", GROUP)
    assert edited.params["text"].endswith(EN["op_approved"].format(name="@presser"))
    await edge.dispatcher.feed_raw_update(edge.bot, press)  # a second operator's press: nothing more
    assert len(edge.tools.effects) == 1


@pytest.mark.parametrize("confirm_seconds", [0.0])  # expired as soon as it is asked
async def test_a_press_after_the_confirmation_expired_runs_nothing(edge: Edge) -> None:
    expired = counted("sb_action_confirmations_total", step="expired")
    edge.openai.chat_replies.extend([tool_reply("cancel_order", order_id="5521"), "Press Confirm."])
    await edge.say("cancel order 5521")
    confirm, _cancel = edge.buttons()
    await edge.press(confirm)
    assert edge.tools.effects == [] and edge.telegram.texts_to(CUSTOMER)[-1] == EN["action_gone"]
    assert counted("sb_action_confirmations_total", step="expired") == expired + 1


async def test_queued_an_approval_survives_a_worker_restart_and_a_failed_attempt(
    redis_server: RedisServer,
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    llm: LLMClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Queued mode on a real redis-server: the card is posted by one worker; the operator's press is
    queued into the customer chat's inbox and served by another worker after the first stopped; its
    first attempt dies after the refund was made (the model down), and the retry tells the customer
    the recorded outcome: one refund."""
    monkeypatch.setenv("BOT_TOKEN", "123456:" + "A" * 35)
    redis = Redis.from_url(redis_server.url)
    await redis.flushdb()
    backend = RedisBackend(redis=redis, keys=TEST_KEYS, ttl_seconds=3600, per_minute=0)
    settings = BotSettings(
        _env_file=None, telegram_api_url=telegram.base_url, drafts_enabled=False, operator_chat_id=GROUP
    )  # type: ignore[call-arg]
    tools = ShopTools()
    chat = build_chat_service(
        llm=llm, store=backend.store, memory=MemorySettings(_env_file=None), instruction_role="system",  # type: ignore[call-arg]
        actions=tools, ledger=backend.actions,
    )  # fmt: skip
    dispatcher = build_dispatcher(chat, settings, backend=backend, provider=ProviderWatch())
    bot = build_bot(settings)
    queue = backend.queue(lease_ms=5000)
    intake = Intake(
        queue=queue, dead_letters=backend.dead_letters, identity="w", route=operator_route(GROUP, backend.handoffs)
    )

    async def served(wanted: int) -> None:
        worker = make_worker(queue, dispatcher, bot)
        running = asyncio.create_task(worker.run())
        try:
            await telegram.wait_messages(CUSTOMER, wanted, within=30)
        finally:
            worker.stop()
            await running

    try:
        stub_llm.chat_replies.extend([tool_reply("refund", order_id="5521"), "I asked the team."])
        await intake.take(telegram.message_update(CUSTOMER, "refund order 5521"))
        await served(2)
        [card] = [c for c in telegram.of("sendMessage", GROUP) if "reply_markup" in c.params]
        approve = card.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        stub_llm.chat_replies.extend([StubError(503), "Your refund is on its way."])
        await intake.take(telegram.press_update(GROUP, 2000, approve, user_id=OPERATOR, chat_type="supergroup"))
        await served(3)  # a worker started after the first one stopped
        assert telegram.texts_to(CUSTOMER) == [
            "I asked the team.",
            EN["approval_waiting"],
            "Your refund is on its way.",
        ]
        assert [effect[:3] for effect in tools.effects] == [("refund", "5521", USER)], "not exactly one refund"
        assert await backend.dead_letters.count() == 0
        assert "by an attempt that died; carried out now" in caplog.text, "the failed attempt was not retried"
    finally:
        await bot.session.close()
        await backend.close()


async def test_cancel_runs_nothing_and_the_model_is_told(edge: Edge) -> None:
    declined = counted("sb_action_confirmations_total", step="declined")
    edge.openai.chat_replies.extend([tool_reply("cancel_order", order_id="5521"), "Press Confirm."])
    await edge.say("cancel order 5521")
    _confirm, cancel = edge.buttons()
    edge.openai.chat_replies.append("OK, your order stays.")
    await edge.press(cancel)
    assert edge.tools.effects == [] and edge.telegram.texts_to(CUSTOMER)[-1] == "OK, your order stays."
    assert any("pressed Cancel" in text for text in customer_texts(edge.openai.chat_requests[-1]))
    assert counted("sb_action_confirmations_total", step="declined") == declined + 1


async def test_a_forged_press_decides_nothing(edge: Edge) -> None:
    """A modified client can send any callback data: "confirm" on an action waiting for an operator,
    another customer confirming this one, or an "approve" pressed outside the operators' group."""
    edge.openai.chat_replies.extend([tool_reply("refund", order_id="5521"), "I asked the team."])
    await edge.say("refund order 5521")
    approve, _reject = edge.buttons(GROUP)
    [waiting] = await edge.backend.actions.open_pending(CUSTOMER)
    await edge.press(f"act:y:{waiting.action_id}")  # the customer "confirms" their own approval
    await edge.press(approve)  # the operators' button, pressed in the customer's chat
    pressed = edge.telegram.press_update(CUSTOMER, 1001, f"act:y:{waiting.action_id}", user_id=USER + 1)
    await edge.dispatcher.feed_raw_update(edge.bot, pressed)  # someone else
    assert edge.tools.effects == []
    assert [p.action_id for p in await edge.backend.actions.open_pending(CUSTOMER)] == [waiting.action_id]


async def test_a_contact_of_someone_else_is_refused(edge: Edge) -> None:
    contact = {"phone_number": "+15550002", "first_name": "Bob", "user_id": USER + 1}  # forwarded or attached
    await edge.say(None, extra={"contact": contact})
    [refused] = edge.telegram.of("sendMessage", CUSTOMER)
    assert refused.params["text"] == EN["contact_not_own"]
    assert refused.params["reply_markup"]["keyboard"][0][0]["request_contact"] is True
    assert await edge.backend.actions.phone(CUSTOMER) is None and edge.openai.chat_requests == []


async def test_a_model_failure_after_a_press_is_told_in_the_customers_chat(edge: Edge) -> None:
    edge.openai.chat_replies.extend([tool_reply("cancel_order", order_id="5521"), "Press Confirm."])
    await edge.say("cancel order 5521")
    confirm, _cancel = edge.buttons()
    edge.openai.chat_replies.append(StubError(503))
    await edge.press(confirm)
    assert len(edge.tools.effects) == 1 and edge.telegram.texts_to(CUSTOMER)[-1] == EN["llm_unavailable"]

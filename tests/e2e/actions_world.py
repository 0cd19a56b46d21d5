"""What the actions e2e modules share: the actions file written for the shop API on loopback, a
scripted model (tool calls by the customer's text, then an answer from the newest tool result), the
Bot API stub with the callback-query methods, buttons read from the messages the bot sent and pressed
as Telegram delivers a press, and the queued webhook workers (``python -m bot``) around them."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from array import array
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from tests.e2e.processes import BotProcess, start_webhook_workers
from tests.e2e.test_faults import post, worker_env
from tests.stubs.openai_server import StubOpenAI, customer_texts, echo_reply, tool_reply
from tests.stubs.shop_api import ShopApi
from tests.stubs.telegram_server import BOT_USER, StubTelegram
from tests.stubs.vision import text_of

SHOP_TOKEN = "shop-secret-token-5f1d2c9a7b"
GROUP = -100777
"""The operators' forum group (OPERATOR_CHAT_ID): approval cards go there."""
OPERATOR = 4242001
ID = {"type": "string", "pattern": "^[0-9]{4,12}$", "description": "the order number"}
SECRET_HEADERS = {"Authorization": "Bearer ${SHOP_API_TOKEN}", "X-Customer-Telegram-Id": "{customer.telegram_id}"}
MIRROR = "shop-mirror.example.com"
FAKE_HOSTS = Path(__file__).parent / "fake_hosts"
"""A sitecustomize answering PROOF_FAKE_HOSTS' names (the workers resolve MIRROR to 127.0.0.1)."""
RESULT = ["order_id", "status", "eta", "items.*.name", "total", "refund"]


def actions_file(shop: ShopApi, path: Path) -> Path:
    """The actions file of the tests: the shop's tools, plus a lenient lookup (no pattern: what an
    argument like ``../admin`` becomes on the wire) and one through a name resolving to 127.0.0.1 and
    not marked private (the shop's mirror port: a listener that counts connections)."""
    base = f"{shop.base_url}/api/orders"
    body = {"customer_id": "{customer.telegram_id}"}
    tools: dict[str, Any] = {
        "order_status": _tool("Status, items and delivery date of one of the customer's orders", "GET",
                              base + "/{order_id}", {"order_id": ID}, result=RESULT),
        "order_lookup": _tool("Look an order up by a reference the customer gives", "GET", base + "/{order_ref}",
                              {"order_ref": {"type": "string", "maxLength": 80}}, result=RESULT),
        "order_status_mirror": _tool("Order status through the mirror", "GET",
                                     f"https://{MIRROR}:{shop.mirror_port}/api/orders/{{order_id}}",
                                     {"order_id": ID}, result=RESULT),
        "cancel_order": _tool("Cancel one of the customer's orders that has not shipped yet", "POST",
                              base + "/{order_id}/cancel", {"order_id": ID, "reason": {"type": "string",
                              "maxLength": 200}}, risk="write", confirm="Cancel order {order_id}?",
                              json=body | {"reason": "{reason}"}, result=RESULT),
        "change_address": _tool("Send an order that has not shipped to another address", "POST",
                                base + "/{order_id}/address", {"order_id": ID, **{
                                    k: {"type": "string", "maxLength": 80} for k in ("address1", "city", "zip",
                                                                                    "country")}},
                                risk="write", confirm="Send order {order_id} to {address1}, {city}?",
                                json=body | {k: f"{{{k}}}" for k in ("address1", "city", "zip", "country")},
                                result=RESULT),
        "refund_order": _tool("Refund a delivered order", "POST", base + "/{order_id}/refund",
                              {"order_id": ID, "reason": {"type": "string", "maxLength": 200}}, risk="approval",
                              confirm="Refund order {order_id} ({reason})?", json=body | {"reason": "{reason}"},
                              result=RESULT),
    }  # fmt: skip
    hosts = [
        {"host": shop.host, "private": True},
        {"host": shop.elsewhere_url.removeprefix("http://"), "private": True},  # the redirect's target
        {"host": f"{MIRROR}:{shop.mirror_port}"},  # resolves to 127.0.0.1 (FAKE_HOSTS), not marked private
    ]
    path.write_text(json.dumps({"hosts": hosts, "tools": tools}, indent=2), encoding="utf-8")  # JSON is YAML
    return path


def _tool(
    description: str, method: str, url: str, params: dict[str, Any], *, risk: str = "read", **more: Any
) -> dict[str, Any]:
    return {"description": description, "risk": risk, "method": method, "url": url, "params": params,
            "headers": dict(SECRET_HEADERS), **more}  # fmt: skip


# --- the model ----------------------------------------------------------------------------------------


def tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of the ``tool`` messages after the newest customer message, oldest first."""
    found: list[str] = []
    for message in reversed(body.get("messages") or []):
        content = text_of(message.get("content"))
        if message.get("role") == "tool":
            found.insert(0, content)
        elif "<customer_message>" in content:
            break
    return found


@dataclass
class ScriptedModel:
    """The stub model's chat reply, stateless (a retried or resumed turn is answered alike): for a
    customer text given to ``on``, the n-th reply once n tool results follow that message (a tool call:
    ``call``); past them the answer reads the newest tool result back, so the customer's reply shows
    what the API gave; any other text is echoed."""

    scripts: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def on(self, text: str, *replies: str) -> str:
        self.scripts[text] = replies
        return text

    def __call__(self, body: dict[str, Any]) -> str:
        texts = customer_texts(body)
        replies = self.scripts.get(texts[-1], ()) if texts else ()
        results = tool_results(body)
        if len(results) < len(replies):
            return replies[len(results)]
        if results:
            return f"From the order service: {results[-1][:600]}"
        return echo_reply(body)


def call(tool: str, **arguments: Any) -> str:
    return tool_reply(tool, **arguments)


@dataclass
class ActionsOpenAI(StubOpenAI):
    """The stub model server, keeping the usage it reported for each answered request."""

    usages: list[dict[str, Any]] = field(default_factory=list)

    def _usage(self, prompt: array[int], reply: str, cached: int) -> dict[str, Any]:
        usage = super()._usage(prompt, reply, cached)
        self.usages.append(usage)
        return usage


# --- Telegram ------------------------------------------------------------------------------------


@dataclass
class ActionsTelegram(StubTelegram):
    """The Bot API stub with the methods a button press makes (answered True), keeping every message
    sent with its answer (``sent``: the message ids a press refers to)."""

    pressed: list[dict[str, Any]] = field(default_factory=list)
    sent: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        result = await super()._m_sendMessage(params)
        self.sent.append((params, result))
        return result

    async def _m_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        self.pressed.append(params)
        return True

    async def _m_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        return await StubTelegram._m_sendMessage(self, params)

    async def _m_deleteMessage(self, _params: dict[str, Any]) -> Any:
        return True


_presses = itertools.count(1)


@dataclass(frozen=True)
class Keyboard:
    """A message the bot sent with inline buttons."""

    chat_id: int
    message_id: int
    thread_id: int | None
    text: str
    buttons: list[dict[str, Any]]


def keyboards(telegram: ActionsTelegram, chat_id: int) -> list[Keyboard]:
    """The messages sent to ``chat_id`` with an inline keyboard, oldest first."""
    found = []
    for params, result in telegram.sent:
        markup = params.get("reply_markup")
        if isinstance(markup, str):
            markup = json.loads(markup)
        if int(params.get("chat_id") or 0) != chat_id or not isinstance(markup, dict):
            continue
        rows = markup.get("inline_keyboard") or []
        thread = params.get("message_thread_id")
        found.append(
            Keyboard(chat_id, int(result["message_id"]), int(thread) if thread else None, str(params.get("text", "")),
                     [button for row in rows for button in row])
        )  # fmt: skip
    return found


def choose(keyboard: list[dict[str, Any]], which: str) -> dict[str, Any]:
    """``which`` is "yes" (Confirm / Approve: the first button) or "no" (Cancel / Reject: the second)."""
    return keyboard[0 if which == "yes" else 1]


def press_update(telegram: StubTelegram, keyboard: Keyboard, data: str, user_id: int) -> dict[str, Any]:
    """A callback query as Telegram delivers a press of a button under ``keyboard``'s message."""
    chat: dict[str, Any] = {"id": keyboard.chat_id, "type": "private" if keyboard.chat_id > 0 else "supergroup"}
    if keyboard.chat_id < 0:
        chat |= {"title": "Operators", "is_forum": True}
    message: dict[str, Any] = {
        "message_id": keyboard.message_id, "date": int(time.time()), "chat": chat, "from": BOT_USER,
        "text": keyboard.text,
    }  # fmt: skip
    if keyboard.thread_id is not None:
        message |= {"message_thread_id": keyboard.thread_id, "is_topic_message": True}
    user = {"id": user_id, "is_bot": False, "first_name": "Customer" if keyboard.chat_id > 0 else "Operator",
            "language_code": "en"}  # fmt: skip
    query = {"id": f"cbq-{next(_presses)}", "from": user, "chat_instance": "ci-1", "message": message, "data": data}
    return {"update_id": next(telegram._ids), "callback_query": query}


def said(telegram: StubTelegram, chat_id: int, text: str) -> dict[str, Any]:
    """A customer's message in their private chat (the sender's id is the chat's, as in Telegram)."""
    sender = {"id": chat_id, "is_bot": False, "first_name": "Customer", "language_code": "en"}
    return telegram.message_update(chat_id, text, extra={"from": sender})


# --- the workers ---------------------------------------------------------------------------------


@dataclass
class World:
    telegram: ActionsTelegram
    llm: ActionsOpenAI
    model: ScriptedModel
    shop: ShopApi
    redis: Redis
    env: dict[str, str]
    workdir: Path
    processes: list[BotProcess] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def live_url(self) -> str:
        alive = [
            u for p, u in zip(self.processes, self.urls, strict=True) if p.process and p.process.returncode is None
        ]
        return alive[0]

    async def send(self, update: dict[str, Any], url: str | None = None) -> dict[str, Any]:
        assert await post(url or self.live_url(), update) == 200
        return update

    async def say(self, chat_id: int, text: str) -> dict[str, Any]:
        return await self.send(said(self.telegram, chat_id, text))

    def keyboards(self, chat_id: int) -> list[Keyboard]:
        return keyboards(self.telegram, chat_id)

    async def press(self, chat_id: int, which: str, *, at: int = -1, user_id: int | None = None) -> dict[str, Any]:
        """Press "yes" or "no" on the ``at``-th keyboard the bot sent to ``chat_id`` (newest: -1), as the
        customer of that private chat (or ``user_id``, an operator in the group)."""
        keyboard = self.keyboards(chat_id)[at]
        data = str(choose(keyboard.buttons, which)["callback_data"])
        return await self.send(press_update(self.telegram, keyboard, data, user_id or chat_id))

    async def wait_keyboard(self, chat_id: int, count: int, within: float = 60) -> Keyboard:
        await self.telegram.wait_for(lambda: len(self.keyboards(chat_id)) >= count, within=within)
        return self.keyboards(chat_id)[count - 1]

    def logs(self) -> str:
        return "".join(p.log.decode(errors="replace") for p in self.processes)

    async def add_workers(self, count: int, **env: str) -> None:
        self.urls += await start_webhook_workers(self.env | env, self.workdir, self.processes, count)

    async def kill_all(self) -> None:
        """SIGKILL every worker still running (what they knew survives in Redis only)."""
        for process in self.processes:
            if process.process is not None and process.process.returncode is None:
                process.process.kill()
                await process.process.wait()


def actions_env(
    w_telegram: StubTelegram, llm: StubOpenAI, redis_url: str, actions: Path, **extra: str
) -> dict[str, str]:
    return worker_env(
        w_telegram,
        llm,
        redis_url,
        ACTIONS_FILE=str(actions),
        SHOP_API_TOKEN=SHOP_TOKEN,
        DRAFTS_ENABLED="false",
        OPERATOR_CHAT_ID=str(GROUP),
        LOG_LEVEL="DEBUG",
        PYTHONPATH=str(FAKE_HOSTS),
        PROOF_FAKE_HOSTS=f"{MIRROR}=127.0.0.1",
        **extra,
    )


ANSWERED = ("From the order service:", "Support answer to:")
"""How every answer of the scripted model begins."""


async def ask(world: World, chat_id: int, text: str, *replies: str, within: float = 60) -> str:
    """The customer says ``text`` (the model's replies in that turn scripted); the bot's answer (the
    first new message to the chat that is the model's), once it came."""
    world.model.on(text, *replies)
    before = len(world.telegram.texts_to(chat_id))
    await world.say(chat_id, text)

    def answered() -> bool:
        return any(t.startswith(ANSWERED) for t in world.telegram.texts_to(chat_id)[before:])

    await world.telegram.wait_for(answered, within=within)
    return next(t for t in world.telegram.texts_to(chat_id)[before:] if t.startswith(ANSWERED))


@contextlib.asynccontextmanager
async def open_world(redis_url: str, workdir: Path, *, workers: int = 1, **env: str) -> AsyncIterator[World]:
    """The stubs, the shop and ``workers`` queued webhook workers with the actions file; all stopped
    after (workers still running killed)."""
    telegram, model = ActionsTelegram(), ScriptedModel()
    llm, shop, redis = ActionsOpenAI(chat_reply=model), ShopApi(token=SHOP_TOKEN), Redis.from_url(redis_url)
    await telegram.start()
    await llm.start()
    await shop.start()
    world = World(telegram, llm, model, shop, redis, {}, workdir)
    try:
        await redis.flushdb()
        actions = actions_file(shop, workdir / "actions.yaml")
        world.env = actions_env(telegram, llm, redis_url, actions, **env)
        await world.add_workers(workers)
        yield world
    finally:
        for process in world.processes:
            if process.process is not None and process.process.returncode is None:
                process.process.kill()
                await process.process.wait()
        await shop.stop()
        await llm.stop()
        await telegram.stop()
        await redis.aclose()

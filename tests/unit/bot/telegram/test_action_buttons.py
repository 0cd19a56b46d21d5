"""The actions' callback data (within Telegram's 64 bytes, read as hostile input) and the intake's
routing of button presses: a customer's press joins its own chat's inbox, an operator's Approve /
Reject the inbox of the customer chat it names (so the action runs there, in that chat's order)."""

from __future__ import annotations

import json

import fakeredis
import pytest

from bot.queueing.intake import Intake, chat_of, operator_route
from bot.telegram.action_buttons import CALLBACK_DATA_LIMIT, Press, callback_data, read_press
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.handoffs import RedisHandoffStore
from services.backends.redis.keys import KeySpace
from services.backends.redis.queue import RedisWorkQueue
from tests.stubs.telegram_server import StubTelegram

KEYS = KeySpace("a", "1")
GROUP, CUSTOMER = -1001234567890, 31337
ACTION = "f" * 32


def test_presses_read_back_and_fit_telegrams_limit() -> None:
    for press in (
        Press("confirm", ACTION),
        Press("cancel", ACTION),
        Press("approve", ACTION, GROUP),  # a chat id as long as they come
        Press("reject", ACTION, CUSTOMER),
    ):
        data = callback_data(press.verb, press.action_id, press.chat_id)
        assert len(data.encode()) <= CALLBACK_DATA_LIMIT and read_press(data) == press


@pytest.mark.parametrize(
    "data",
    [None, "", "act", "act:y", "act:y:", "act:q:x", "act:a:x", "act:a:12", "act:a:12:", "act:a:-:x", "act:a:١٢:x",
     "other:y:x", "act:y:" + "x" * 100, "act:a:" + "9" * 5000 + ":x"],
)  # fmt: skip
def test_malformed_data_is_no_press(data: str | None) -> None:
    assert read_press(data) is None


def test_an_action_id_too_long_for_a_button_is_refused_not_cut() -> None:
    with pytest.raises(ValueError, match="64-byte"):
        callback_data("approve", "x" * 60, GROUP)
    with pytest.raises(ValueError):
        callback_data("confirm", ACTION, CUSTOMER)  # the customer's buttons name no chat


def test_a_press_belongs_to_the_chat_of_the_pressed_message() -> None:
    stub = StubTelegram()
    assert chat_of(stub.press_update(CUSTOMER, 5, "act:y:abc")) == CUSTOMER
    inline = stub.press_update(CUSTOMER, 5, "act:y:abc")
    del inline["callback_query"]["message"]  # a press on an inline-mode message: no chat
    assert chat_of(inline) is None


async def test_presses_are_queued_in_the_customers_inbox() -> None:
    redis = fakeredis.FakeAsyncRedis()
    intake = Intake(
        queue=RedisWorkQueue(redis=redis, keys=KEYS),
        dead_letters=RedisDeadLetters(redis=redis, keys=KEYS),
        identity="w",
        route=operator_route(GROUP, RedisHandoffStore(redis=redis, keys=KEYS)),
    )
    stub = StubTelegram()
    operator = 9001
    updates = [
        stub.message_update(CUSTOMER, "cancel my order 5521"),
        stub.press_update(CUSTOMER, 7, callback_data("confirm", ACTION)),  # the customer's own press
        stub.press_update(
            GROUP, 8, callback_data("approve", ACTION, CUSTOMER), user_id=operator, chat_type="supergroup"
        ),
        stub.press_update(GROUP, 9, "act:y:" + ACTION, user_id=operator, chat_type="supergroup"),  # no chat named
        stub.press_update(GROUP, 9, "something else", user_id=operator, chat_type="supergroup"),
    ]
    for update in updates:
        await intake.take(update)
    inbox = [json.loads(raw)["id"] for raw in await redis.zrange(KEYS.chat(CUSTOMER).inbox, 0, -1)]
    assert inbox == [f"u{update['update_id']}" for update in updates[:3]], "not in the chat's order"
    assert await redis.zcard(KEYS.chat(GROUP).inbox) == 0, "an operator's press was queued in the group's inbox"

"""Actions end to end, changing things (issue 39): two real ``python -m bot`` queued webhook workers on
a real redis-server, the stub Bot API and model server, and the shop API counting effects per
Idempotency-Key. A write runs only after the customer's button, once: through a redelivered update, a
second press, a retried turn and a SIGKILL of the worker right after the request returned. Declined,
typed-"yes" and (last, on a worker with short confirmations) expired ones change nothing. A refund
waits for an operator's Approve in the operators' group and runs after every worker was killed and a
new one started; a Reject runs nothing.

The workers serve the whole module (each start is a whole interpreter start)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from tests.conftest import RedisServer
from tests.e2e.actions_world import GROUP, OPERATOR, World, ask, call, open_world, tool_results
from tests.e2e.test_faults import KEYS, LEASE
from tests.e2e.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")
EXPIRE_SECONDS = 3
MIA, NOAH, AVA, LIAM, EMMA, OLIVER, SOFIA = range(880001, 880008)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with open_world(
        redis_server.url,
        tmp_path_factory.mktemp("actions-writes"),
        workers=2,
    ) as opened:
        yield opened


async def answered_after(world: World, chat_id: int, count: int, within: float = 60) -> str:
    """The first message to the chat after its ``count`` first, once sent."""
    await world.telegram.wait_messages(chat_id, count + 1, within=within)
    return world.telegram.texts_to(chat_id)[count]


async def settle(world: World, chat_id: int, tag: str) -> None:
    """A message sent after the ones before it in the chat's queue, answered: those were handled."""
    await ask(world, chat_id, f"Thanks! ({tag})")


async def test_a_write_runs_after_the_button_once_whatever_is_delivered_again(world: World) -> None:
    text = world.model.on("Cancel order 5522 please, I no longer need it",
                          call("cancel_order", order_id="5522", reason="no longer needed"))  # fmt: skip
    asked = await world.say(MIA, text)
    keyboard = await world.wait_keyboard(MIA, 1)
    assert "5522" in keyboard.text and len(keyboard.buttons) == 2
    assert world.shop.writes() == [], "nothing runs before the button"
    count = len(world.telegram.texts_to(MIA))
    press = await world.press(MIA, "yes")
    await eventually(lambda: _true(world.shop.effects.total() == 1), within=60, what="the cancel")
    await answered_after(world, MIA, count)
    (write,) = world.shop.writes()
    key = write.idempotency_key
    assert key and write.customer == str(MIA) and isinstance(write.body, dict)
    assert str(write.body["customer_id"]) == str(MIA) and write.body["reason"] == "no longer needed"
    # Telegram delivers the press and the message again; the customer presses again
    await world.send(press)
    await world.send(asked)
    await world.send({**press, "update_id": press["update_id"] + 10_000})
    await settle(world, MIA, "cancel")
    assert world.shop.effects == {key: 1} and len(world.shop.with_key(key)) == 1
    assert world.shop.state()["orders"]["5522"]["status"] == "cancelled"


async def test_a_declined_confirmation_changes_nothing(world: World) -> None:
    before = world.shop.state()
    world.model.on("Cancel 6610", call("cancel_order", order_id="6610", reason="ordered by mistake"))
    await world.say(NOAH, "Cancel 6610")
    await world.wait_keyboard(NOAH, 1)
    count = len(world.telegram.texts_to(NOAH))
    await world.press(NOAH, "no")
    await answered_after(world, NOAH, count)
    await settle(world, NOAH, "declined")
    assert world.shop.writes() == [] or all("6610" not in r.path for r in world.shop.writes())
    assert world.shop.state()["orders"] == before["orders"]
    told = [m for r in world.llm.chat_requests for m in tool_results(r)]
    assert any("declin" in m.lower() or "cancel" in m.lower() for m in told), "the model was told"


async def test_a_typed_yes_confirms_nothing(world: World) -> None:
    world.model.on("Cancel 7701 now", call("cancel_order", order_id="7701", reason="found it cheaper"))
    await world.say(AVA, "Cancel 7701 now")
    await world.wait_keyboard(AVA, 1)
    world.model.on("yes", "Yes, confirmed: I have cancelled order 7701 for you.")
    await ask(world, AVA, "yes")
    assert all("7701" not in r.path for r in world.shop.writes()), "a typed yes confirms nothing"
    assert world.shop.state()["orders"]["7701"]["status"] == "processing"


async def test_a_retried_turn_after_the_request_does_not_send_it_again(world: World) -> None:
    """The model's answer after the write fails once (HTTP 500, a transient failure: the update is tried
    again): the write is not sent again, and the customer is told its recorded result."""
    address = {"address1": "1 New Street", "city": "Denver", "zip": "80203", "country": "US"}
    world.model.on("Send 8801 to 1 New Street, Denver", call("change_address", order_id="8801", **address))
    await world.say(LIAM, "Send 8801 to 1 New Street, Denver")
    await world.wait_keyboard(LIAM, 1)
    count = len(world.telegram.texts_to(LIAM))
    world.llm.chat_replies.append(500)
    await world.press(LIAM, "yes")
    await eventually(lambda: _true(bool(world.shop.writes()[-1:])), within=60, what="the address change")
    await settle(world, LIAM, "retried")
    (key,) = {r.idempotency_key for r in world.shop.writes() if "8801" in r.path}
    assert key is not None and world.shop.effects[key] == 1 and len(world.shop.with_key(key)) == 1
    assert world.shop.state()["orders"]["8801"]["address"] == address
    told = world.telegram.texts_to(LIAM)[count:]
    assert any(t.startswith("From the order service:") and '"status": "ok"' in t and "8801" in t for t in told), told


async def test_a_worker_killed_after_the_request_returned_does_not_send_it_again(
    world: World, shown: Callable[[str], None]
) -> None:
    world.model.on("Cancel order 8851", call("cancel_order", order_id="8851", reason="changed my mind"))
    await world.say(EMMA, "Cancel order 8851")
    await world.wait_keyboard(EMMA, 1)
    count, calls = len(world.telegram.texts_to(EMMA)), len(world.llm.requests)
    world.llm.gate = asyncio.Event()  # the model's answer after the request is held
    await world.press(EMMA, "yes")
    try:
        await world.telegram.wait_for(lambda: bool(world.shop.writes()) and len(world.llm.requests) > calls, 60)
        await kill_the_holder(world, EMMA)
    finally:
        world.llm.gate.set()
        world.llm.gate = None
    await answered_after(world, EMMA, count, within=60 + 10 * LEASE)
    await settle(world, EMMA, "killed")
    (key,) = {r.idempotency_key for r in world.shop.writes() if "8851" in r.path}
    assert key is not None
    shown(f"\nactions: write requests with the key after a SIGKILL: {len(world.shop.with_key(key))}")
    assert world.shop.effects[key] == 1 and len(world.shop.with_key(key)) == 1
    assert world.shop.state()["orders"]["8851"]["status"] == "cancelled"


async def kill_the_holder(world: World, chat_id: int) -> None:
    holder = await world.redis.get(KEYS.chat(chat_id).lease)
    assert isinstance(holder, bytes), "the chat is being served"
    victim = next(p for p in world.processes if p.process is not None and f":{p.process.pid}:" in holder.decode())
    assert victim.process is not None
    victim.process.send_signal(signal.SIGKILL)
    await victim.process.wait()


async def test_a_refund_waits_for_an_operator_through_a_restart_of_every_worker(world: World) -> None:
    world.model.on("Refund order 6611, it arrived broken",
                   call("refund_order", order_id="6611", reason="arrived broken"))  # fmt: skip
    world.model.on("Refund 8862 too", call("refund_order", order_id="8862", reason="not needed"))
    count = len(world.telegram.texts_to(NOAH))
    await world.say(NOAH, "Refund order 6611, it arrived broken")
    card = await world.wait_keyboard(GROUP, 1)
    assert "6611" in card.text and len(card.buttons) == 2
    await answered_after(world, NOAH, count)  # the customer is told it waits for a person
    assert all("6611" not in r.path for r in world.shop.writes())
    await world.kill_all()  # a new worker knows only what is in Redis
    await world.add_workers(1)
    count = len(world.telegram.texts_to(NOAH))
    await world.press(GROUP, "yes", user_id=OPERATOR)
    await eventually(lambda: _true(any("6611" in r.path for r in world.shop.writes())), within=60, what="refund")
    await answered_after(world, NOAH, count)
    assert world.shop.state()["orders"]["6611"]["status"] == "refunded"
    # another refund, rejected by the operator: nothing runs
    await world.say(OLIVER, "Refund 8862 too")
    await world.wait_keyboard(GROUP, 2)
    await world.press(GROUP, "no", user_id=OPERATOR)
    await settle(world, OLIVER, "rejected")
    await settle(world, NOAH, "approved")
    assert all("8862" not in r.path for r in world.shop.writes())
    refunds = [r for r in world.shop.writes() if "6611" in r.path]
    assert len(refunds) == 1 and world.shop.effects[refunds[0].idempotency_key or ""] == 1
    assert "Traceback" not in world.logs()


async def _true(value: bool) -> bool:
    return value


async def test_an_expired_confirmation_changes_nothing(world: World) -> None:
    """Last: the worker is replaced by one whose confirmations wait EXPIRE_SECONDS."""
    await world.kill_all()
    await world.add_workers(1, ACTIONS_CONFIRM_SECONDS=str(EXPIRE_SECONDS))
    world.model.on("Cancel 8871", call("cancel_order", order_id="8871", reason="too slow"))
    await world.say(SOFIA, "Cancel 8871")
    await world.wait_keyboard(SOFIA, 1)
    await asyncio.sleep(EXPIRE_SECONDS + 1)  # silence past ACTIONS_CONFIRM_SECONDS
    presses = len(world.telegram.pressed)
    await world.press(SOFIA, "yes")
    await world.telegram.wait_for(lambda: len(world.telegram.pressed) > presses, within=30)
    await settle(world, SOFIA, "expired")
    assert all("8871" not in r.path for r in world.shop.writes()), "an expired confirmation runs nothing"
    assert world.shop.state()["orders"]["8871"]["status"] == "processing"

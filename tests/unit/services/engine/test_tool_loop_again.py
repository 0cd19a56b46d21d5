"""The tool loop when a turn runs again or a model misbehaves (services.engine.tool_loop), against the
stub OpenAI server and the in-process ledger: a redelivered turn asking about something else is not
given the first answer, a decision stored before a crash is the call's own, a model calling tools
after ``tool_choice: none`` still gets the customer an answer (and the buttons), approvals wait
ACTIONS_APPROVAL_SECONDS, call ids made up by the server are unique in the turn, and a decision's
turn with long arguments stays within CHAT_INPUT_TOKEN_BUDGET."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from services.backends.memory import InMemoryBackend
from services.core.records import Completion, ToolCall
from services.core.tokens import TokenCounter, count_calls, count_tools
from services.llm.client import LLMClient
from tests.stubs.openai_server import StubOpenAI, tool_calls_reply, tool_messages
from tests.unit.services.engine.action_fakes import TOOLS, FakeActions, FakeTool
from tests.unit.services.engine.test_tool_loop import ALICE, Clock, call, service_for


def replace_loop_model(service: Any, model: Any, steps: tuple[str, ...] = ("ToolLoop",)) -> None:
    for step in service.steps:
        if type(step).__name__ in steps:
            step._llm = model


class IgnoresToolChoice:
    """Ollama's OpenAI API, some vLLM parsers: ``tool_choice`` is not honoured."""

    def __init__(self, llm: LLMClient) -> None:
        self._llm = llm

    async def chat(self, messages: Any, **kw: Any) -> Completion:
        kw.pop("tool_choice", None)
        return await self._llm.chat(messages, **kw)


class MadeUpIds:
    """A server that sends no call ids: the client makes up ``call_0``... in every reply."""

    def __init__(self, llm: LLMClient) -> None:
        self._llm = llm

    async def chat(self, messages: Any, **kw: Any) -> Completion:
        completion = await self._llm.chat(messages, **kw)
        calls = tuple(ToolCall(c.name, c.arguments, f"call_{n}") for n, c in enumerate(completion.tool_calls))
        return replace(completion, tool_call=None, tool_calls=calls) if calls else completion


async def test_a_redelivered_turn_asking_about_another_order_gets_that_order(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    service = service_for(llm, counter, backend, actions)
    # attempt 1: the model reads order 5521, then the model endpoint fails (the update is redelivered)
    stub_llm.chat_replies.extend([tool_calls_reply(call("order_status", order_id="5521")), 500])
    with pytest.raises(Exception):  # noqa: B017
        await service.begin(1, "where are my orders?", turn_id="u2", customer=ALICE)
    # redelivery: the model (sampling) now asks for order 7718 first
    stub_llm.chat_replies.extend([tool_calls_reply(call("order_status", order_id="7718")), "ok"])
    result = (await service.begin(1, "where are my orders?", turn_id="u2", customer=ALICE)).result
    told = tool_messages(stub_llm.chat_requests[-1])[0]["content"]
    assert [r.arguments["order_id"] for r in actions.shop.requests] == ["5521", "7718"], told
    assert "processing" in told and result.actions[0].line.startswith("order_status 7718")
    # and a third delivery asking for 7718 again reads nothing more
    stub_llm.chat_replies.extend([tool_calls_reply(call("order_status", order_id="7718")), 500])
    with pytest.raises(Exception):  # noqa: B017
        await service.begin(1, "and now?", turn_id="u3", customer=ALICE)
    stub_llm.chat_replies.extend([tool_calls_reply(call("order_status", order_id="7718")), "ok"])
    await service.begin(1, "and now?", turn_id="u3", customer=ALICE)
    assert [r.arguments["order_id"] for r in actions.shop.requests] == ["5521", "7718", "7718"]


async def test_a_redelivered_turn_asking_for_another_write_is_refused_and_the_first_shown(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    service = service_for(llm, counter, backend, actions)
    stub_llm.chat_replies.extend([tool_calls_reply(call("cancel_order", order_id="5521")), 500])
    with pytest.raises(Exception):  # noqa: B017
        await service.begin(1, "cancel my order", turn_id="u1", customer=ALICE)
    stub_llm.chat_replies.extend([tool_calls_reply(call("cancel_order", order_id="7718")), "Press Confirm."])
    result = (await service.begin(1, "cancel my order", turn_id="u1", customer=ALICE)).result
    told = tool_messages(stub_llm.chat_requests[-1])[0]["content"]
    assert [o.kind for o in result.actions] == ["refused"] and "other arguments" in told
    assert "Cancel order 5521?" in told
    assert result.pending is not None and result.pending.prompt == "Cancel order 5521?", "the stored one is shown"
    assert len(await backend.actions.open_pending(1)) == 1 and actions.shop.requests == []


async def test_a_decision_stored_before_a_crash_is_the_redelivered_calls_own(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    service = service_for(llm, counter, backend, actions)
    real_put = backend.actions.put_pending
    crashed: list[str] = []

    async def put_pending(pending, *, fence=None):  # type: ignore[no-untyped-def]
        await real_put(pending, fence=fence)
        if not crashed:
            crashed.append(pending.action_id)
            raise ConnectionError("worker SIGKILLed / Redis blip right after put_pending")

    backend.actions.put_pending = put_pending  # type: ignore[method-assign]
    stub_llm.chat_replies.extend([tool_calls_reply(call("cancel_order", order_id="5521")), "Press Confirm."])
    with pytest.raises(ConnectionError):
        await service.begin(1, "cancel 5521", turn_id="u1", customer=ALICE)
    # the update is redelivered: the same turn, the same call
    stub_llm.chat_replies.clear()
    stub_llm.chat_replies.extend([tool_calls_reply(call("cancel_order", order_id="5521")), "Press Confirm."])
    result = (await service.begin(1, "cancel 5521", turn_id="u1", customer=ALICE)).result
    told = tool_messages(stub_llm.chat_requests[-1])[0]["content"]
    assert result.pending is not None and result.pending.action_id == crashed[0], told
    assert [o.kind for o in result.actions] == ["pending_confirmation"]


async def test_calls_after_tool_choice_none_still_answer_and_show_the_buttons(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    service = service_for(llm, counter, backend, actions, max_calls=1)
    replace_loop_model(service, IgnoresToolChoice(llm))
    again = tool_calls_reply(call("cancel_order", order_id="5521"))
    stub_llm.chat_replies.extend([again, again])  # the model asks for the write, then calls again, no text
    result = (await service.begin(1, "cancel 5521", turn_id="u1", customer=ALICE)).result
    assert result.pending is not None and result.pending.state == "pending"
    assert result.reply == "Cancel order 5521?" and result.handoff_reason is None
    assert actions.shop.requests == [] and len(await backend.actions.open_pending(1)) == 1


async def test_calls_after_tool_choice_none_keep_the_text_or_hand_over(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    service = service_for(llm, counter, backend, actions, max_calls=1)
    replace_loop_model(service, IgnoresToolChoice(llm))
    read = tool_calls_reply(call("order_status", order_id="5521"))
    stub_llm.chat_replies.extend([read, read])
    handed = (await service.begin(1, "where is 5521", turn_id="u1", customer=ALICE)).result
    assert handed.handoff_reason is not None and handed.pending is None
    stub_llm.chat_replies.extend([read, "It has shipped." + read])  # text and calls: the text is the answer
    answered = (await service.begin(1, "and 5521?", turn_id="u2", customer=ALICE)).result
    assert answered.reply.startswith("It has shipped.") and len(actions.shop.requests) == 2


async def test_an_approval_waits_for_the_approval_window_not_the_confirm_window(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    clock = Clock()
    service = service_for(llm, counter, backend, actions, clock=clock)
    stub_llm.chat_replies.extend([tool_calls_reply(call("refund", order_id="5521")), "An operator will decide."])
    pending = (await service.begin(1, "refund 5521", turn_id="u1", customer=ALICE)).result.pending
    assert pending is not None and pending.risk == "approval"
    assert pending.expires - pending.created == 86400, "ACTIONS_APPROVAL_SECONDS' default: a day"
    clock.now += 11 * 60  # the operators take 11 minutes: past ACTIONS_CONFIRM_SECONDS (600)
    assert await backend.actions.decide(1, pending.action_id, "approved", now=clock.now) is not None
    stub_llm.chat_replies.extend([tool_calls_reply(call("cancel_order", order_id="7718")), "Press Confirm."])
    write = (await service.begin(1, "cancel 7718", turn_id="u2", customer=ALICE)).result.pending
    assert write is not None and write.expires - write.created == 600


async def test_call_ids_the_client_made_up_are_unique_in_the_turn(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    backend, actions = InMemoryBackend(), FakeActions()
    service = service_for(llm, counter, backend, actions)
    replace_loop_model(service, MadeUpIds(llm), ("Answer", "ToolLoop"))
    stub_llm.chat_replies.extend(
        [
            tool_calls_reply(call("order_status", order_id="5521")),
            tool_calls_reply(call("order_status", order_id="7718")),
            "Both found.",
        ]
    )
    result = (await service.begin(1, "where are 5521 and 7718?", turn_id="u1", customer=ALICE)).result
    assert result.reply == "Both found."
    last = stub_llm.chat_requests[-1]["messages"]
    asked = [c["id"] for m in last for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in last if m.get("role") == "tool"]
    assert len(asked) == 2 and len(set(asked)) == 2 and answered == asked


async def test_a_carried_out_decision_with_long_arguments_stays_within_the_budget(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter
) -> None:
    note = {"type": "string", "pattern": "^[\\s\\S]*$", "maxLength": 4096}
    complain = FakeTool("complain", "File a complaint", "write", {"text": note}, "File this complaint?")
    backend, actions = InMemoryBackend(), FakeActions(tools=(*TOOLS, complain))
    clock, budget = Clock(), 4000
    service = service_for(llm, counter, backend, actions, budget=budget, clock=clock)
    rng = random.Random(1)
    chars = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"
    text = "".join(rng.choice(chars) for _ in range(2600))
    assert len(text.encode()) < 8192
    stub_llm.chat_replies.extend([tool_calls_reply(call("complain", text=text)), "Press Confirm."])
    pending = (await service.begin(1, "file a complaint", turn_id="u1", customer=ALICE)).result.pending
    assert pending is not None
    for n in range(3):  # the customer keeps talking: the history fills its share of the window
        stub_llm.chat_replies.append("Noted. " + "please wait " * 150)
        turn = await service.begin(1, f"while I wait {n} " + "details " * 400, turn_id=f"m{n}", customer=ALICE)
        await service.finish(turn)
    await backend.actions.decide(1, pending.action_id, "confirmed", now=clock.now + 5)
    stub_llm.chat_replies.append("Filed.")
    before = len(stub_llm.chat_requests)
    carried = await service.carry_out(1, pending.action_id, turn_id="cb1", customer=ALICE)
    assert carried is not None and carried.result.reply == "Filed."
    assert [(r.tool, r.arguments["text"]) for r in actions.shop.requests] == [("complain", text)]
    for request in stub_llm.chat_requests[before:]:
        total = count_tools(counter, request.get("tools") or []) + 3
        for m in request["messages"]:
            total += counter.count_message(m["role"], m.get("content") or "")
            calls = ((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or ())
            total += count_calls(counter, calls) + counter.count_text(m.get("tool_call_id") or "")
        assert total <= budget, f"the carry-out turn's prompt is {total} tokens, over CHAT_INPUT_TOKEN_BUDGET={budget}"


def test_a_decision_told_fits_the_room_held_for_a_turns_tool_messages(counter: TokenCounter) -> None:
    from services.core.actions import ActionOutcome, PendingAction
    from services.engine.decisions import ARGUMENTS_ROOM, RESULT_ROOM, Decisions
    from services.engine.tool_loop import TOOL_ROOM_TOKENS

    arguments = {"text": "的一是不了人我在有他" * 400}
    pending = PendingAction("a" * 32, 1, "complain", "write", arguments, "File it?", "a" * 32, 0.0, 600.0, ALICE)
    outcome = ActionOutcome("ok", "filed", {"echo": "x " * 5000}, 200)
    decisions = Decisions(actions=FakeActions(), ledger=InMemoryBackend().actions, counter=counter)
    asked, result = decisions.told(pending, outcome)
    assert asked.tokens <= ARGUMENTS_ROOM and result.tokens <= RESULT_ROOM
    assert asked.tokens + result.tokens < TOOL_ROOM_TOKENS

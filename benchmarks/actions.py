"""Actions (issue 39) in one run: (a) prompt tokens and model requests per resolved "where is my order"
conversation answered with actions, beside the same conversation answered by handoff (the model
offers a person, an operator answers); (b) the scripted tasks of benchmarks/actions_tasks.py replayed,
the shop's end state compared with the expected one exactly.

    .venv/bin/python -m benchmarks.actions [--conversations N]

The real bot in this process (aiogram polling, the real ChatService) against the stub Bot API, the
scripted stub model (tests/e2e/actions_world.py) and the shop (tests/stubs/shop_api.py); the tools
block counted by the cookbook's rule beside the stub's usage."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.actions_tasks import TASKS, Step, Task, differences
from benchmarks.common import machine
from prompts.support_chat import HANDOFF_TOOL
from services.core.tokens import TokenCounter
from tests.e2e.actions_world import (
    GROUP,
    OPERATOR,
    SHOP_TOKEN,
    ActionsOpenAI,
    ActionsTelegram,
    ScriptedModel,
    actions_file,
    call,
    choose,
    keyboards,
    press_update,
    said,
)
from tests.e2e.harness import RunningBot, make_settings, start_bot
from tests.stubs.openai_server import tool_reply
from tests.stubs.shop_api import ShopApi

WITHIN = 60.0
"""Seconds a step may take before the run calls it stuck."""
ORDERS = (
    ("mia_lopez", "5521"),
    ("noah_kim", "6610"),
    ("ava_petrova", "7702"),
    ("liam_brown", "8801"),
    ("emma_rossi", "8852"),
    ("oliver_wang", "8861"),
    ("sofia_ivanova", "8871"),
    ("lucas_meyer", "8881"),
)


@dataclass
class Bench:
    """One bot in this process and the servers around it."""

    telegram: ActionsTelegram
    llm: ActionsOpenAI
    model: ScriptedModel
    shop: ShopApi
    bot: RunningBot | None = None
    settled: int = 0

    def chat_of(self, user: str) -> int:
        return self.shop.telegram_id_of(user)

    def texts(self, chat_id: int) -> list[str]:
        return self.telegram.texts_to(chat_id)

    async def until(self, predicate: Any, what: str) -> None:
        try:
            await self.telegram.wait_for(predicate, within=WITHIN)
        except AssertionError as exc:
            raise TimeoutError(f"stuck waiting for {what}") from exc


@contextlib.contextmanager
def environment(values: dict[str, str | None]) -> Iterator[None]:
    """os.environ with ``values`` set (None: removed), as it was after."""
    before = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.asynccontextmanager
async def running(workdir: Path, *, actions: bool) -> AsyncIterator[Bench]:
    """The bot with the shop's actions file (``actions``) or without one (today's bot: handoff only)."""
    model = ScriptedModel()
    bench = Bench(ActionsTelegram(), ActionsOpenAI(chat_reply=model), model, ShopApi(token=SHOP_TOKEN))
    await bench.telegram.start()
    await bench.llm.start()
    await bench.shop.start()
    try:
        spec = str(actions_file(bench.shop, workdir / "actions.yaml")) if actions else None
        values = {"ACTIONS_FILE": spec, "SHOP_API_TOKEN": SHOP_TOKEN, "DRAFTS_ENABLED": "false"}
        with environment(values):
            settings = make_settings(bench.telegram.base_url, bench.llm.base_url, None, bot={"operator_chat_id": GROUP})
            bench.bot = await start_bot(settings)
        yield bench
    finally:
        if bench.bot is not None:
            await bench.bot.stop()
        await bench.shop.stop()
        await bench.llm.stop()
        await bench.telegram.stop()


# --- (a) "where is my order": actions against handoff ---------------------------------------------


@dataclass
class Cost:
    requests: int = 0
    prompt_tokens: int = 0
    tools_tokens: int = 0
    operator_messages: int = 0
    conversations: int = 0

    def add(self, bench: Bench, requests: int, usages: int, tokens: TokenCounter) -> None:
        sent = bench.llm.requests[requests:]
        self.requests += len(sent)
        self.prompt_tokens += sum(u["prompt_tokens"] for u in bench.llm.usages[usages:])
        self.tools_tokens += sum(tools_tokens(tokens, r["tools"]) for r in sent if r.get("tools"))
        self.conversations += 1

    def per(self, value: int) -> str:
        return f"{value / max(1, self.conversations):.1f}"


def tools_tokens(tokens: TokenCounter, tools: list[dict[str, Any]]) -> int:
    """The tools block's prompt tokens by the cookbook's rule, as the bot budgets them (the stub's usage
    counts the messages only)."""
    from services.core import tokens as rules

    count = getattr(rules, "count_tools", None)  # the engine's, from issue 39 on
    return int(count(tokens, tools)) if count is not None else tokens.count_text(json.dumps(tools))


async def with_actions(bench: Bench, user: str, order_id: str, cost: Cost, tokens: TokenCounter) -> None:
    chat, marks = bench.chat_of(user), (len(bench.llm.requests), len(bench.llm.usages))
    status = bench.shop.data["orders"][order_id]["status"]
    text = bench.model.on(f"Hi, where is my order {order_id}?", call("order_status", order_id=order_id))
    before = len(bench.texts(chat))
    bench.telegram.push(said(bench.telegram, chat, text))
    await bench.until(lambda: any(status in t for t in bench.texts(chat)[before:]), f"{order_id}'s status")
    cost.add(bench, *marks, tokens)


async def by_handoff(bench: Bench, user: str, order_id: str, cost: Cost, tokens: TokenCounter) -> None:
    chat, marks = bench.chat_of(user), (len(bench.llm.requests), len(bench.llm.usages))
    order = bench.shop.data["orders"][order_id]
    offer = "I cannot see orders from here. Shall I connect you with a colleague who can check it?"
    text = bench.model.on(f"Hi, where is my order {order_id}?", offer)
    before = len(bench.texts(chat))
    bench.telegram.push(said(bench.telegram, chat, text))
    await bench.until(lambda: len(bench.texts(chat)) > before, "the offer of a person")
    yes = bench.model.on(f"Yes please, order {order_id}", tool_reply(HANDOFF_TOOL, reason="order status lookup"))
    bench.telegram.push(said(bench.telegram, chat, yes))
    await bench.until(lambda: topic_of(bench, chat) is not None, "the handoff's topic")
    copies = len(bench.telegram.of("copyMessage", chat))
    reply = f"Order {order_id} is {order['status']}, it arrives on {order['eta']}."
    bench.telegram.push(bench.telegram.operator_update(GROUP, topic_of(bench, chat), reply, operator_id=OPERATOR))
    await bench.until(lambda: len(bench.telegram.of("copyMessage", chat)) > copies, "the operator's answer")
    cost.add(bench, *marks, tokens)
    cost.operator_messages += 1


def topic_of(bench: Bench, chat_id: int) -> int | None:
    return next((t for t, info in bench.telegram.topics.items() if info["name"].endswith(f"· {chat_id}")), None)


# --- (b) the scripted tasks ---------------------------------------------------------------------


@dataclass
class Outcome:
    task: Task
    diff: list[str] = field(default_factory=list)
    requests: int = 0
    shop_requests: int = 0
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.diff and not self.error


async def run_step(bench: Bench, chat: int, step: Step) -> None:
    before = (len(bench.texts(chat)), len(keyboards(bench.telegram, chat)), len(keyboards(bench.telegram, GROUP)))
    if step.kind == "say":
        bench.model.on(step.text, *step.replies)
        bench.telegram.push(said(bench.telegram, chat, step.text))
    else:
        where, user = (chat, chat) if step.kind == "press" else (GROUP, OPERATOR)
        keyboard = keyboards(bench.telegram, where)[-1]
        data = choose(keyboard.buttons, step.choice)
        bench.telegram.push(press_update(bench.telegram, keyboard, str(data["callback_data"]), user))
    if step.waits_for == "keyboard":
        await bench.until(lambda: len(keyboards(bench.telegram, chat)) > before[1], "the confirm buttons")
    elif step.waits_for == "card":
        await bench.until(lambda: len(keyboards(bench.telegram, GROUP)) > before[2], "the approval card")
    else:
        await bench.until(lambda: len(bench.texts(chat)) > before[0], "the answer")
    await settle(bench, chat)


async def settle(bench: Bench, chat: int) -> None:
    """A message after the step's, answered: the chat's updates before it were handled."""
    bench.settled += 1
    text = f"Thank you (check {bench.settled})"
    bench.telegram.push(said(bench.telegram, chat, text))
    await bench.until(lambda: any(text in t for t in bench.texts(chat)), "the chat to settle")


async def replay(bench: Bench) -> list[Outcome]:
    expected, outcomes = bench.shop.state(), []
    for task in TASKS:
        outcome, marks = Outcome(task), (len(bench.llm.requests), len(bench.shop.log))
        try:
            for step in task.steps:
                await run_step(bench, bench.chat_of(task.customer), step)
        except (TimeoutError, IndexError, StopIteration) as exc:
            outcome.error = str(exc) or type(exc).__name__
        task.change(expected)
        outcome.diff = differences(bench.shop.state(), expected)
        settles = len(task.steps)  # each step's check message is one model request more
        outcome.requests = len(bench.llm.requests) - marks[0] - settles
        outcome.shop_requests = len(bench.shop.log) - marks[1]
        outcomes.append(outcome)
        expected = bench.shop.state()  # the next task is judged on its own change
    return outcomes


# --- the run ------------------------------------------------------------------------------------


def report(costs: dict[str, Cost], outcomes: list[Outcome], effects: dict[str, int]) -> list[str]:
    a, h = costs["actions"], costs["handoff"]
    lines = [
        f"actions benchmark, {machine()}, {date.today()}",
        f'(a) "where is my order", per resolved conversation ({a.conversations} with actions, {h.conversations} '
        "by handoff)",
        f"{'':34}{'with actions':>14}{'by handoff':>14}",
        f"{'model requests':34}{a.per(a.requests):>14}{h.per(h.requests):>14}",
        f"{'prompt tokens (stub usage)':34}{a.per(a.prompt_tokens):>14}{h.per(h.prompt_tokens):>14}",
        f"{'tools block tokens (cookbook)':34}{a.per(a.tools_tokens):>14}{h.per(h.tools_tokens):>14}",
        f"{'prompt tokens with the tools':34}{a.per(a.prompt_tokens + a.tools_tokens):>14}"
        f"{h.per(h.prompt_tokens + h.tools_tokens):>14}",
        f"{'operator messages':34}{a.per(a.operator_messages):>14}{h.per(h.operator_messages):>14}",
        f"(b) scripted tasks: {sum(o.passed for o in outcomes)}/{len(outcomes)} end states exact",
    ]
    for o in outcomes:
        verdict = "PASS" if o.passed else "FAIL"
        lines.append(f"  {verdict} {o.task.name} (model requests {o.requests}, shop requests {o.shop_requests})")
        lines += [f"      {line}" for line in ([o.error] if o.error else []) + o.diff]
    doubled = {key: n for key, n in effects.items() if n != 1}
    lines.append(f"effects per Idempotency-Key other than 1: {doubled or 'none'}")
    ok = all(o.passed for o in outcomes) and not doubled and a.conversations and h.conversations
    lines.append(f"RESULT: {'OK' if ok else 'FAIL'}")
    return lines


async def run(conversations: int) -> list[str]:
    tokens, costs = TokenCounter.for_encoding("o200k_base"), {"actions": Cost(), "handoff": Cost()}
    orders = ORDERS[: max(1, min(conversations, len(ORDERS)))]
    with tempfile.TemporaryDirectory(prefix="actions-bench-") as workdir:
        async with running(Path(workdir), actions=False) as bench:
            for user, order_id in orders:
                await by_handoff(bench, user, order_id, costs["handoff"], tokens)
        async with running(Path(workdir), actions=True) as bench:
            for user, order_id in orders:
                await with_actions(bench, user, order_id, costs["actions"], tokens)
        async with running(Path(workdir), actions=True) as bench:
            outcomes = await replay(bench)
            effects = dict(bench.shop.effects)
    return report(costs, outcomes, effects)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=len(ORDERS), help="(a)'s conversations of each kind")
    args = parser.parse_args(argv)
    lines = asyncio.run(run(args.conversations))
    print("\n".join(lines))
    return 0 if lines[-1] == "RESULT: OK" else 1


if __name__ == "__main__":
    sys.exit(main())

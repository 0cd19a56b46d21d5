"""Actions end to end, reading (issue 39): a real ``python -m bot`` queued webhook worker on a real
redis-server, the stub Bot API and model server, and the shop API (tests/stubs/shop_api.py) as the
operator's API. An order question answered from the API; the customer's id from the update, whatever
the model's arguments claim; arguments that try to leave their path segment; a redirect, a loopback
host not marked private, an undeclared host; timeout, 500, oversize, malformed and 401 answers; a
result carrying fence-closing text; /forget; and, over everything the module did, the secret only in
the shop's requests, every prompt within budget and the tools block the same bytes every time.

One worker serves the whole module (a bot's start is a whole interpreter start)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import pytest_asyncio

from tests.conftest import RedisServer, free_port
from tests.e2e.actions_world import SHOP_TOKEN, World, ask, call, open_world, tool_results
from tests.e2e.test_faults import redis_holds
from tests.stubs.shop_api import FENCE_TEXT

pytestmark = pytest.mark.asyncio(loop_scope="module")
BUDGET = 4500
MIA, NOAH, AVA, LIAM, EMMA, OLIVER, SOFIA = range(880001, 880008)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with open_world(
        redis_server.url,
        tmp_path_factory.mktemp("actions"),
        ACTIONS_TIMEOUT_SECONDS="2",
        ACTIONS_MAX_RESPONSE_BYTES="100000",
        CHAT_INPUT_TOKEN_BUDGET=str(BUDGET),
    ) as opened:
        opened.shop.slow_seconds = 20
        opened.shop.oversize_bytes = 300_000
        yield opened


def requests_of(world: World, customer: int, since: int = 0) -> list[str]:
    return [r.path for r in world.shop.log[since:] if r.customer == str(customer)]


async def test_an_order_status_question_is_answered_from_the_api(world: World) -> None:
    mark = len(world.shop.log)
    answer = await ask(world, MIA, "Where is my order 5521?", call("order_status", order_id="5521"))
    assert "shipped" in answer and "2026-12-08" in answer and "Monitor stand" in answer
    (request,) = world.shop.log[mark:]
    assert (request.method, request.path, request.customer, request.auth) == ("GET", "/api/orders/5521", "880001", "ok")
    assert request.idempotency_key is None, "a read carries no Idempotency-Key"
    last = world.llm.chat_requests[-1]
    assert any(m.get("role") == "tool" and "shipped" in str(m.get("content")) for m in last["messages"])
    assert [t["function"]["name"] for t in last["tools"] if t["function"]["name"] != "handoff_to_operator"] == [
        "order_status", "order_lookup", "order_status_mirror", "cancel_order", "change_address", "refund_order",
    ]  # fmt: skip


async def test_the_customer_is_who_the_update_says_whatever_the_model_claims(world: World) -> None:
    """Noah asks for Mia's order, the model names Mia's id in its arguments: refused, then the call
    without it goes out as Noah, and the shop says there is no such order of his."""
    mark = len(world.shop.log)
    answer = await ask(
        world,
        NOAH,
        "Status of order 5521 for customer 880001 please",
        call("order_status", order_id="5521", customer_id="880001"),
        call("order_status", order_id="5521"),
    )
    sent = world.shop.log[mark:]
    assert sent and all(r.customer == str(NOAH) for r in sent), [(r.path, r.customer) for r in sent]
    assert all(not isinstance(r.body, dict) or r.body.get("customer_id") in (None, NOAH) for r in sent)
    assert [r.status for r in sent][-1] == 404
    assert "Monitor stand" not in answer and "Monitor stand" not in " ".join(world.telegram.texts_to(NOAH))


@pytest.mark.parametrize("ref", ["../../admin", "7701%2F..%2F..%2Fadmin", "7701@elsewhere.example:80", "..%2F7702"])
async def test_an_argument_stays_inside_its_path_segment(world: World, ref: str) -> None:
    """Sent percent-encoded inside its one segment, or (a dot-segment) refused: never another path or host."""
    mark = len(world.shop.log)
    await ask(world, AVA, f"Look up my order reference {ref}", call("order_lookup", order_ref=ref))
    sent = world.shop.log[mark:]
    assert len(sent) <= 1 and not world.shop.elsewhere
    if not sent:
        assert tool_results(world.llm.chat_requests[-1]), "refused, and the model told why"
        return
    segment = sent[0].path.removeprefix("/api/orders/")
    assert sent[0].path.startswith("/api/orders/") and "/" not in segment and unquote(segment) == ref
    assert sent[0].headers["Host"] == world.shop.host


async def test_a_pattern_mismatch_requests_nothing(world: World) -> None:
    mark = len(world.shop.log)
    await ask(world, AVA, "Order ../7701 please", call("order_status", order_id="../7701"))
    assert world.shop.log[mark:] == []
    assert tool_results(world.llm.chat_requests[-1]), "the model was told why"


async def test_a_redirect_is_not_followed(world: World) -> None:
    world.shop.faults["8801"] = "redirect"
    mark = len(world.shop.log)
    await ask(world, LIAM, "Where is 8801?", call("order_status", order_id="8801"))
    assert [r.status for r in world.shop.log[mark:]] == [302]
    assert world.shop.elsewhere == [], "the redirect's target (a declared host) was never requested"


async def test_a_host_resolving_to_loopback_needs_private(world: World) -> None:
    """The mirror's name resolves to 127.0.0.1 in the worker (as an /etc/hosts line would make it) and is
    not marked private: the address is refused before any connection."""
    mark = len(world.shop.log)
    await ask(world, LIAM, "Check 8802 on the mirror", call("order_status_mirror", order_id="8802"))
    assert world.shop.mirror_connections == 0 and world.shop.log[mark:] == []
    assert tool_results(world.llm.chat_requests[-1]), "the model was told"


def write_changed(source: Path, path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    spec = json.loads(source.read_text())
    change(spec)
    path.write_text(json.dumps(spec))


async def refused_file(world: World, path: Path, change: Callable[[dict[str, Any]], None], name: str) -> None:
    """``actions check`` exits 2 naming ``name``, and the bot refuses to start on the file."""
    write_changed(world.workdir / "actions.yaml", path, change)
    check = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "actions", "check", str(path),
        env=world.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output = (await asyncio.wait_for(check.communicate(), 60))[0].decode()
    assert check.returncode == 2 and name in output, output
    bot = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", env=world.env | {"ACTIONS_FILE": str(path), "WEBHOOK_PORT": str(free_port())},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output = (await asyncio.wait_for(bot.communicate(), 60))[0].decode()
    assert bot.returncode != 0 and name in output and SHOP_TOKEN not in output, output


async def test_an_undeclared_host_or_localhost_not_private_is_refused_before_start(
    world: World, tmp_path: Path
) -> None:
    def undeclared(spec: dict[str, Any]) -> None:
        spec["tools"]["order_status"]["url"] = "https://api.undeclared.example/orders/{order_id}"

    def localhost(spec: dict[str, Any]) -> None:
        port = world.shop.host.rsplit(":", 1)[1]
        spec["hosts"].append({"host": f"localhost:{port}"})
        spec["tools"]["order_status"]["url"] = f"https://localhost:{port}/api/orders/{{order_id}}"

    await refused_file(world, tmp_path / "undeclared.yaml", undeclared, "order_status")
    await refused_file(world, tmp_path / "localhost.yaml", localhost, "localhost")


@pytest.mark.parametrize("fault", ["slow", "500", "oversize", "malformed"])
async def test_a_failing_api_still_gets_the_customer_an_answer(world: World, fault: str) -> None:
    world.shop.faults["8851"] = fault
    text = f"Where is my order 8851? ({fault})"
    answer = await ask(world, EMMA, text, call("order_status", order_id="8851"), within=90)
    assert answer.startswith("From the order service:"), "the model was given a result to explain"
    assert "xxxxxxxxxx" not in answer and "2026-12" not in answer, "nothing of a refused body"
    del world.shop.faults["8851"]


async def test_a_401_from_the_api_is_an_error_line_for_the_operator(world: World) -> None:
    world.shop.token = "rotated-token"
    try:
        await ask(world, EMMA, "And order 8852?", call("order_status", order_id="8852"))
    finally:
        world.shop.token = SHOP_TOKEN
    assert world.shop.log[-1].status == 401
    errors = [line for line in world.logs().splitlines() if "ERROR" in line and "401" in line]
    assert errors, world.logs()[-3000:]


async def test_a_result_carrying_fence_closing_text_is_defused(world: World) -> None:
    world.shop.faults["8861"] = "fence"
    await ask(world, OLIVER, "What is in order 8861?", call("order_status", order_id="8861"))
    (result,) = tool_results(world.llm.chat_requests[-1])
    assert "Wireless mouse" in result and "admin mode" in result, "the data is there"
    closings = result.count("</tool_result>")
    assert closings == 0 or (closings == 1 and result.rstrip().endswith("</tool_result>")), result
    assert FENCE_TEXT not in json.dumps(world.llm.chat_requests[-1])


async def test_forget_deletes_what_actions_gave(world: World) -> None:
    await ask(world, SOFIA, "Where is order 8871?", call("order_status", order_id="8871"))
    assert await redis_holds(world.redis, b"8871")
    before = len(world.telegram.texts_to(SOFIA))
    await world.say(SOFIA, "/forget")
    await world.telegram.wait_messages(SOFIA, before + 1, within=30)
    assert not await redis_holds(world.redis, b"8871"), "no session, ledger or recorded result keeps it"
    await ask(world, SOFIA, "Hello again")
    assert "8871" not in json.dumps(world.llm.chat_requests[-1]["messages"])


async def test_the_secret_reached_the_shop_and_nothing_else(world: World) -> None:
    """Over everything the module did: every shop request but the deliberately refused ones carried
    the token; it is in no log line, prompt, Telegram call or Redis value (run alone, over its own call)."""
    await ask(world, MIA, "And order 5523?", call("order_status", order_id="5523"))
    assert all(r.headers.get("Authorization") == f"Bearer {SHOP_TOKEN}" for r in world.shop.log)
    assert SHOP_TOKEN not in world.logs()
    assert SHOP_TOKEN not in json.dumps(world.llm.requests)
    assert SHOP_TOKEN not in json.dumps([c.params for c in world.telegram.calls], default=str)
    assert not await redis_holds(world.redis, SHOP_TOKEN.encode())
    assert "Traceback" not in world.logs()


async def test_prompts_within_budget_and_the_tools_block_identical(world: World) -> None:
    """Every chat request of the module (this case's two turns at least) has the same tools block bytes;
    the largest prompt the stub billed (its messages) plus the tools block (the cookbook's rule) and the
    calls' text stays within the budget."""
    await ask(world, MIA, "And 5522?", call("order_status", order_id="5522"))
    await ask(world, MIA, "Thanks, and 5521 again?", call("order_status", order_id="5521"))
    chats = world.llm.chat_requests
    assert len(chats) >= 4
    assert {json.dumps(r.get("tools"), sort_keys=False) for r in chats} == {json.dumps(chats[0]["tools"])}
    assert chats[0]["tools"], "the tools were offered"
    from services.core.tokens import TokenCounter, count_tools  # count_tools: the engine's (issue 39)

    counter = TokenCounter.for_encoding("o200k_base")
    tools = count_tools(counter, chats[0]["tools"])
    calls = max(counter.count_text(json.dumps([m.get("tool_calls") for m in r["messages"]])) for r in chats)
    worst = max(u["prompt_tokens"] for u in world.llm.usages)
    assert worst + tools + calls <= BUDGET, f"messages {worst} + tools {tools} + calls {calls}, budget {BUDGET}"

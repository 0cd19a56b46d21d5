"""A 30-message conversation whose first message gives the order number, against the stub model in
one of its ``summary_format_support`` modes: what the summary calls cost and whether the number
survived. Shared by tests/e2e/test_summary_formats.py and benchmarks/summary_formats.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from services.core.prompt_format import SUMMARY_TAG
from tests.helpers import customer_line
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

ORDER = "7718"
FIRST = f"Hello, my order {ORDER} arrived with a broken screen."
MESSAGES = 30
MEMORY = {"chat_input_token_budget": 1100, "summary_max_tokens": 300}
"""A budget small enough that the 30 messages pass the high-water mark early and are forced out."""
_SUMMARY = re.compile(rf"<{SUMMARY_TAG}>(.*?)</{SUMMARY_TAG}>", re.S)


@dataclass(frozen=True)
class Talk:
    summary_requests: int
    chat_requests: int
    order_in_summary: bool
    order_verbatim: bool

    @property
    def extra_per_message(self) -> float:
        return self.summary_requests / MESSAGES


def summary_in_prompt(request: dict[str, Any]) -> str:
    """The summary block of a chat prompt ("" when it has none; the instruction, which names the tag,
    is not searched)."""
    text = "\n".join(str(m.get("content") or "") for m in request["messages"] if m["role"] == "user")
    match = _SUMMARY.search(text)
    return match.group(1) if match else ""


async def talk(telegram: StubTelegram, stub_llm: StubOpenAI, chat_id: int, *, within: float = 15) -> Talk:
    """Send the conversation one message at a time, each after the previous answer."""
    summaries_before, chats_before = len(stub_llm.summary_requests), len(stub_llm.chat_requests)
    for n in range(MESSAGES):
        telegram.send_text(chat_id, FIRST if n == 0 else customer_line(n))
        await telegram.wait_messages(chat_id, n + 1, within=within)
    last = stub_llm.chat_requests[-1]
    verbatim = any(f"<customer_message>\n{FIRST}" in str(m.get("content") or "") for m in last["messages"])
    summary = summary_in_prompt(last)
    return Talk(
        summary_requests=len(stub_llm.summary_requests) - summaries_before,
        chat_requests=len(stub_llm.chat_requests) - chats_before,
        order_in_summary=ORDER in summary,
        order_verbatim=verbatim,
    )

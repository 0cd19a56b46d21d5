"""Summaries per kind of model server: for each ``summary_format_support`` mode of the stub model (all:
structured output; json_object only; response_format rejected with a 400; ignored with the JSON in
prose; ignored with prose only), a 30-message conversation whose first message gives the order number,
through the real bot in process: summary requests made and whether the order number is still in the
prompt's summary at the end, side by side.

    .venv/bin/python -m benchmarks.summary_formats
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from tests.e2e.harness import make_settings, start_bot
from tests.e2e.summary_talk import MEMORY, MESSAGES, Talk, talk
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

MODES = ("all", "json_object", "reject", "ignore", "prose")


async def run_mode(mode: str) -> tuple[Talk, int]:
    telegram, llm = StubTelegram(), StubOpenAI(summary_format_support=mode)
    await telegram.start()
    await llm.start()
    bot = await start_bot(
        make_settings(telegram.base_url, llm.base_url, None, bot={"rate_limit_per_minute": 0}, **MEMORY)
    )
    try:
        result = await talk(telegram, llm, 1)
        await asyncio.sleep(0.5)  # the last reply's proactive compaction, if any, finishes
    finally:
        await bot.stop()
        await llm.stop()
        await telegram.stop()
    return result, len(llm.summary_requests)


async def main() -> None:
    print(
        f"{MESSAGES} messages; budget {MEMORY['chat_input_token_budget']}, summary cap {MEMORY['summary_max_tokens']}"
    )
    print(f"{'server':<12} {'summary requests':>16} {'per message':>11} {'order number kept':>17}")
    for mode in MODES:
        result, requests = await run_mode(mode)
        kept = "yes" if result.order_in_summary else "NO"
        print(f"{mode:<12} {requests:>16} {requests / MESSAGES:>11.2f} {kept:>17}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())

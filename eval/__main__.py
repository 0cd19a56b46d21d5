"""``python -m eval --base-url URL --model NAME``: fact retention against any OpenAI-compatible endpoint.

Uses a small budget so that every dialogue goes through several compactions; prints, per control fact,
whether it is in the summary and whether the model gave it back when asked at the end."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from openai import AsyncOpenAI

from eval.dialogues import DIALOGUES
from eval.runner import DialogueOutcome, run_dialogue, table
from services.backends.memory import InMemorySessionStore
from services.engine.builders import build_chat_service
from services.llm.client import LLMClient
from services.settings import MemorySettings


async def run(args: argparse.Namespace) -> list[DialogueOutcome]:
    llm = LLMClient(
        client=AsyncOpenAI(
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "not-set",
            base_url=args.base_url,
            timeout=args.timeout,
            max_retries=args.retries,
        ),
        chat_model=args.model,
        summary_model=args.summary_model or args.model,
        max_output_tokens=args.max_output_tokens,
        summary_max_tokens=args.summary_max_tokens,
        token_limit_param=args.token_limit_param,
    )
    memory = MemorySettings(
        _env_file=None,
        chat_input_token_budget=args.budget,  # type: ignore[call-arg]
        summary_max_tokens=args.summary_max_tokens,
    )
    store = InMemorySessionStore()
    chat = build_chat_service(
        llm=llm,
        store=store,
        memory=memory,
        instruction_role=args.instruction_role,
        summary_response_format=args.summary_response_format,
    )
    try:
        return [
            await run_dialogue(chat, store, dialogue, chat_id=index)
            for index, dialogue in enumerate(DIALOGUES, 1)
            if not args.only or dialogue.name in args.only
        ]
    finally:
        await chat.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--summary-model", default="")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--summary-max-tokens", type=int, default=400)
    parser.add_argument("--max-output-tokens", type=int, default=400)
    parser.add_argument("--instruction-role", choices=["developer", "system"], default="system")
    parser.add_argument(
        "--token-limit-param", choices=["max_completion_tokens", "max_tokens"], default="max_completion_tokens"
    )
    parser.add_argument(
        "--summary-response-format", choices=["auto", "json_schema", "json_object", "plain"], default="auto"
    )
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=[], help="dialogue names to run")
    parser.add_argument(
        "--require-all-in-summary", action="store_true", help="exit 1 unless every control fact is in the summary"
    )
    args = parser.parse_args(argv)
    outcomes = asyncio.run(run(args))
    print(table(outcomes))
    if args.require_all_in_summary and not all(f.in_summary for o in outcomes for f in o.facts):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

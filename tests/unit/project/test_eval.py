"""The fact-retention evaluation against the stub LLM: a faithful and an adversarial summarizer
(every digit dropped) must both keep 100 % of the identifiers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eval.dialogues import DIALOGUES
from eval.runner import run_dialogue, table
from services.backends.memory import InMemorySessionStore
from services.core.tokens import TokenCounter
from services.llm.client import LLMClient
from services.memory.identifiers import extract_identifiers
from tests.helpers import make_service
from tests.stubs.openai_server import StubOpenAI, customer_texts, digit_dropping_summary, faithful_summary

FINAL_QUESTIONS = {d.final_question for d in DIALOGUES}
ROOT = Path(__file__).resolve().parents[3]


def reading_reply(body: dict[str, Any]) -> str:
    """Stands in for a model that reads its whole context well: answers with every identifier visible in
    the prompt (summary and history) when asked the final question. It measures whether a fact reached
    the model, not model quality."""
    texts = customer_texts(body)
    if not texts or texts[-1] not in FINAL_QUESTIONS:
        return "Noted, thank you. I am checking this for you."
    context = "\n".join(m["content"] for m in body["messages"][1:])
    found = [i.value for i in extract_identifiers(context)]
    return "Here is what I have: " + "; ".join(dict.fromkeys(found))


@pytest.mark.parametrize("summarizer", [faithful_summary, digit_dropping_summary], ids=["faithful", "adversarial"])
async def test_every_identifier_survives(
    stub_llm: StubOpenAI, llm: LLMClient, counter: TokenCounter, summarizer: Any
) -> None:
    stub_llm.summary_reply = summarizer
    stub_llm.chat_reply = reading_reply
    store = InMemorySessionStore()
    service = make_service(store=store, llm=llm, counter=counter, budget=1500, summary_max_tokens=400)
    outcomes = [await run_dialogue(service, store, d, chat_id=i) for i, d in enumerate(DIALOGUES, 1)]
    print("\n" + table(outcomes))
    assert len(outcomes) >= 6 and {d.language for d in DIALOGUES} == {"en", "ru"}
    assert all(o.compactions >= 2 for o in outcomes), [o.compactions for o in outcomes]
    facts = [f for o in outcomes for f in o.facts]
    assert len(facts) == 5 * len(outcomes)
    assert all(not f.in_final_prompt_verbatim for f in facts), "facts must have left the verbatim history"
    assert all(f.in_summary for f in facts), [f.value for f in facts if not f.in_summary]
    assert all(f.answered for f in facts), [f.value for f in facts if not f.answered]
    if summarizer is digit_dropping_summary:
        summaries = [r for r in stub_llm.summary_requests]
        assert summaries and not re.search(r"\d", digit_dropping_summary(summaries[0]))


@pytest.mark.slow  # a new interpreter
def test_cli_help() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "eval", "--help"],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: the niced unit pass beside busy cores is slow
    )
    assert completed.returncode == 0 and "--base-url" in completed.stdout


@pytest.mark.slow  # a new interpreter
async def test_cli_runs_against_an_openai_compatible_endpoint(stub_llm: StubOpenAI) -> None:
    import asyncio

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eval",
        "--base-url",
        stub_llm.base_url,
        "--model",
        "stub",
        "--api-key",
        "k",
        "--only",
        "refund-en",
        "--require-all-in-summary",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    text = output.decode()
    assert process.returncode == 0, text
    assert text.count("refund-en") >= 5 and "in summary: 5/5 (100%)" in text
    assert stub_llm.summary_requests, "the dialogue went through compaction"

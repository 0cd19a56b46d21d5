"""A local model server as it is (issue 36): ``python -m bot`` with no setting about the server, against
a stub that answers as llama-cpp-python's OpenAI-compatible server does (tests.stubs.llama_cpp): the
``developer`` role and ``response_format: json_schema`` refused with its HTTP 500, ``max_completion_tokens``
ignored. Every message is answered, MAX_OUTPUT_TOKENS caps the replies, and the summary is made in
json_object mode and kept in the prompt (a small budget forces compaction, as in test_summary_formats)."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from bot.telegram.texts import TEXTS
from tests.conftest import RedisServer
from tests.e2e.processes import BotProcess, base_env
from tests.e2e.summary_talk import MEMORY, MESSAGES, talk
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram

MAX_OUTPUT_TOKENS = 120
CHAT = 36001


async def test_a_llama_cpp_python_server_works_with_no_extra_settings(
    telegram: StubTelegram, stub_llm: StubOpenAI, tmp_path: Path, processes: list[BotProcess]
) -> None:
    stub_llm.llama_cpp = True
    env = base_env(telegram, stub_llm) | {
        "OPENAI_MAX_RETRIES": "2",  # the default: a refusal taken for an outage was retried, then paused
        "LOG_LEVEL": "INFO",
        "RATE_LIMIT_PER_MINUTE": "0",
        "MAX_OUTPUT_TOKENS": str(MAX_OUTPUT_TOKENS),
        "CHAT_INPUT_TOKEN_BUDGET": str(MEMORY["chat_input_token_budget"]),
        "SUMMARY_MAX_TOKENS": str(MEMORY["summary_max_tokens"]),
    }
    worker = BotProcess(env, tmp_path)
    for name in ("OPENAI_INSTRUCTION_ROLE", "OPENAI_TOKEN_LIMIT_PARAM", "SUMMARY_RESPONSE_FORMAT"):
        worker.env.pop(name, None)  # nothing from the environment running the tests either
    processes.append(worker)
    await worker.start()

    result = await talk(telegram, stub_llm, CHAT, within=30)
    answers = telegram.texts_to(CHAT)
    assert all(text.startswith("Support answer to:") for text in answers), answers[:3]
    assert result.chat_requests == MESSAGES, "every turn answered at its first request"
    assert all(r["messages"][0]["role"] == "system" for r in stub_llm.requests)
    assert all(r.get("max_tokens") for r in stub_llm.requests)
    assert not any("max_completion_tokens" in r for r in stub_llm.requests)
    assert {r["max_tokens"] for r in stub_llm.chat_requests} == {MAX_OUTPUT_TOKENS}

    assert not result.order_verbatim, "the first message must have left the verbatim history"
    assert result.order_in_summary, "the summary (with the order number) is in the prompt"
    kinds = [r["response_format"]["type"] for r in stub_llm.summary_requests]
    assert kinds[0] == "json_schema" and set(kinds[1:]) == {"json_object"}, kinds
    assert kinds.count("json_schema") == 1, "refused once, never retried as an outage"

    stub_llm.chat_replies.append("A very long answer. " * 200)  # far over MAX_OUTPUT_TOKENS
    telegram.send_text(CHAT, "Tell me everything about my order, please.")
    texts = await telegram.wait_messages(CHAT, MESSAGES + 1, within=30)
    assert texts[-1] == TEXTS["en"]["reply_truncated"], "the server cut the reply at MAX_OUTPUT_TOKENS"

    await worker.stop()
    log = worker.log.decode(errors="replace")
    assert "summary calls use response format json_object (detected)" in log
    assert "paused for" not in log, "the summary breaker never opened"
    assert "Traceback" not in log


async def test_two_chats_at_once_both_get_their_whole_answer_queued(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    """The server serves one request at a time and cuts a stream short (``[DONE]``, no finish_reason)
    when another one waits. The cut answer is never sent; its text was already shown as a draft, so
    the call does not ask again itself (test_model_faults: in-process, the customer is told to retry)
    but the queue worker does, after telling the customer the message is saved, and each customer
    gets the whole of their answer. ``real_redis``: the database flushed first."""
    stub_llm.llama_cpp = True
    stub_llm.llama_chunk_seconds = 0.05
    stub_llm.llama_await_rivals = 1  # the first stream is still running when the other chat's request comes
    whole = {chat: f"Answer for chat {chat}: " + "all the details you asked about. " * 12 for chat in (36101, 36102)}
    stub_llm.chat_reply = lambda body: next(a for c, a in whole.items() if f"question of {c}" in str(body))
    env = base_env(telegram, stub_llm) | {
        "OPENAI_MAX_RETRIES": "2",
        "LOG_LEVEL": "INFO",
        "RATE_LIMIT_PER_MINUTE": "0",
        "BOT_MODE": "polling",
        "REDIS_URL": redis_server.url,
        "POLLING_TIMEOUT_SECONDS": "1",
    }
    worker = BotProcess(env, tmp_path)
    for name in ("OPENAI_INSTRUCTION_ROLE", "OPENAI_TOKEN_LIMIT_PARAM"):
        worker.env.pop(name, None)
    processes.append(worker)
    await worker.start()
    for chat in whole:
        telegram.send_text(chat, f"This is the question of {chat}.")
    saved = TEXTS["en"]["llm_retrying"]
    for chat, answer in whole.items():
        await telegram.wait_for(lambda chat=chat, answer=answer: answer.strip() in telegram.texts_to(chat), within=90)
        texts = telegram.texts_to(chat)
        assert texts[-1] == answer.strip() and set(texts[:-1]) <= {saved}, texts
    assert stub_llm.interrupted >= 1, "a stream was cut short"
    await worker.stop()

"""The reference the load benchmark measures the product against: a minimal aiogram + openai + redis
webhook bot doing the same visible work per turn ("typing…", drafts while the reply streams, the
reply, the history in Redis) and nothing else.

    .venv/bin/python -m benchmarks.load --workers 1 --chats 100 --messages 6 --llm-latency 0.2 \
        --budget 6000 --drafts --variant naive:WORKER_MODULE=benchmarks.naive_bot --variant this:

No budget, summary, queue, lease, rate limit, redelivery check, metrics or rendering; drafts
are awaited inline. ``NAIVE_FASTPATHS=on`` adds the product's process-level
speed-ups (bot/serving/fastpath.py), to tell them apart from the design.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.types import Message
from aiogram.utils.chat_action import ChatActionSender
from aiogram.webhook.aiohttp_server import SimpleRequestHandler
from aiohttp import web
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionUserMessageParam
from redis.asyncio import Redis

from bot.serving.fastpath import freeze_startup_heap, install_event_loop, json_codec
from prompts import default_registry

HISTORY = 20
"""Messages of history sent with each request (10 turns)."""


def _session(env: dict[str, str], *, fast: bool) -> AiohttpSession:
    api = TelegramAPIServer.from_base(env["TELEGRAM_API_URL"].rstrip("/"))
    if fast:
        loads, dumps, _ = json_codec()
        return AiohttpSession(api=api, json_loads=loads, json_dumps=dumps)
    return AiohttpSession(api=api)


async def _streamed(stream: Any, bot: Bot, message: Message, *, drafts: bool, interval: float) -> str:
    """The reply's text as it streams in; with drafts (private chats), a draft every ``interval``."""
    parts: list[str] = []
    last_draft = 0.0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
            if drafts and message.chat.type == "private" and time.monotonic() - last_draft >= interval:
                last_draft = time.monotonic()
                await bot.send_message_draft(message.chat.id, draft_id=message.message_id, text="".join(parts))
    return "".join(parts)


def make_app(env: dict[str, str], *, fast: bool) -> web.Application:
    bot = Bot(env["BOT_TOKEN"], session=_session(env, fast=fast))
    llm = AsyncOpenAI(api_key=env["OPENAI_API_KEY"], base_url=env["OPENAI_BASE_URL"], max_retries=0)
    redis = Redis.from_url(env["REDIS_URL"])
    model = env.get("OPENAI_MODEL", "gpt-4o-mini")
    drafts = env.get("DRAFTS_ENABLED", "true").lower() == "true"
    interval = float(env.get("DRAFT_INTERVAL_SECONDS", "0.7"))
    instruction = default_registry().get("support_chat").render(company="Acme", handoff="", knowledge="")
    dispatcher = Dispatcher()

    @dispatcher.message()
    async def on_text(message: Message) -> None:
        if not message.text:
            return
        chat_id, key = message.chat.id, f"naive:{message.chat.id}"
        history: list[Any] = [json.loads(m) for m in await redis.lrange(key, -HISTORY, -1)]
        content = f"<customer_message>\n{message.text}\n</customer_message>"
        user: ChatCompletionUserMessageParam = {"role": "user", "content": content}
        async with ChatActionSender.typing(bot=bot, chat_id=chat_id):
            stream = await llm.chat.completions.create(
                model=model, messages=[{"role": "system", "content": instruction}, *history, user], stream=True
            )
            reply = await _streamed(stream, bot, message, drafts=drafts, interval=interval)
        await bot.send_message(chat_id, reply)
        await redis.rpush(key, json.dumps(user), json.dumps({"role": "assistant", "content": reply}))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    SimpleRequestHandler(dispatcher=dispatcher, bot=bot, secret_token=env["WEBHOOK_SECRET"]).register(
        app, path=env.get("WEBHOOK_PATH", "/telegram/webhook")
    )

    async def close(_: web.Application) -> None:
        await bot.session.close()
        await llm.close()
        await redis.aclose()

    async def freeze(_: web.Application) -> None:
        freeze_startup_heap()

    if fast:
        app.on_startup.append(freeze)
    app.on_cleanup.append(close)
    return app


if __name__ == "__main__":
    environment = dict(os.environ)
    fast = environment.get("NAIVE_FASTPATHS", "off").lower() == "on"
    if fast:
        install_event_loop()
    web.run_app(
        make_app(environment, fast=fast),
        host=environment.get("WEBHOOK_HOST", "127.0.0.1"),
        port=int(environment["WEBHOOK_PORT"]),
        print=None,
    )

"""Runs the real aiogram Bot + Dispatcher in polling mode against the stub servers, in-process."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from aiogram import Bot, Dispatcher
from redis.asyncio import Redis

from bot.factory import Settings, build_bot, build_dispatcher, build_engine
from bot.settings import BotSettings
from services.backends.memory import InMemorySessionStore
from services.backends.redis.keys import KeySpace
from services.backends.redis.store import RedisSessionStore
from services.engine.chat import ChatService
from services.ports import SessionStore
from services.settings import LLMSettings, MemorySettings, RedisSettings

TOKEN = "123456:TEST-token-secret"


def make_settings(telegram_url: str, openai_url: str, redis_url: str | None, **memory: object) -> Settings:
    return Settings(
        bot=BotSettings(
            _env_file=None,
            bot_token=TOKEN,
            telegram_api_url=telegram_url,  # type: ignore[call-arg]
            draft_interval_seconds=0.1,
        ),
        llm=LLMSettings(
            _env_file=None,
            openai_api_key="sk-test-secret",
            openai_base_url=openai_url,  # type: ignore[call-arg]
            openai_model="stub-chat",
            openai_max_retries=0,
            openai_instruction_role="system",
        ),
        memory=MemorySettings(_env_file=None, **memory),  # type: ignore[call-arg]
        redis=RedisSettings(_env_file=None, redis_url=redis_url),  # type: ignore[call-arg]
    )


@dataclass
class RunningBot:
    settings: Settings
    chat: ChatService
    bot: Bot
    dispatcher: Dispatcher
    task: asyncio.Task[None] | None = None
    store: SessionStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = self.chat.store

    async def start(self) -> None:
        self.task = asyncio.create_task(
            self.dispatcher.start_polling(self.bot, handle_signals=False, close_bot_session=True, polling_timeout=1)
        )
        await asyncio.sleep(0)

    async def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            await self.dispatcher.stop_polling()
        if self.task is not None:
            await asyncio.wait_for(self.task, 10)


async def start_bot(settings: Settings, store: SessionStore | None = None) -> RunningBot:
    chat = build_engine(settings, store)
    running = RunningBot(settings, chat, build_bot(settings.bot), build_dispatcher(chat, settings.bot))
    await running.start()
    return running


def redis_store_for(url: str) -> RedisSessionStore:
    return RedisSessionStore(redis=Redis.from_url(url), keys=KeySpace("sb", "123456"))


def memory_store() -> InMemorySessionStore:
    return InMemorySessionStore()

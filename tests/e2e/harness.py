"""Runs the real aiogram Bot + Dispatcher in polling mode against the stub servers, in-process."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from aiogram import Bot, Dispatcher

from bot.backends import open_backend
from bot.factory import Settings, build_app
from bot.modes.inprocess import watch_handoffs
from bot.provider_health import ProviderWatch
from bot.settings import BotSettings
from services.engine.chat import ChatService
from services.knowledge.library import KnowledgeLibrary
from services.ports.backend import Backend
from services.ports.sessions import SessionStore
from services.settings import KnowledgeSettings, LLMSettings, MediaSettings, MemorySettings, RedisSettings

TOKEN = "123456:TEST-token-secret"


def make_settings(
    telegram_url: str,
    openai_url: str,
    redis_url: str | None,
    *,
    bot: dict[str, object] | None = None,
    knowledge: dict[str, object] | None = None,
    media: dict[str, object] | None = None,
    **memory: object,
) -> Settings:
    return Settings(
        bot=BotSettings(
            _env_file=None,
            bot_token=TOKEN,
            telegram_api_url=telegram_url,  # type: ignore[call-arg]
            draft_interval_seconds=0.1,
            **(bot or {}),  # type: ignore[arg-type]
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
        knowledge=KnowledgeSettings(_env_file=None, **(knowledge or {})),  # type: ignore[arg-type]
        # the stub bills images as gpt-4o does; its model name is one no rule knows
        media=MediaSettings(_env_file=None, **({"image_tokens_rule": "gpt-4o"} | (media or {}))),  # type: ignore[arg-type]
    )


@dataclass
class RunningBot:
    settings: Settings
    backend: Backend
    chat: ChatService
    bot: Bot
    dispatcher: Dispatcher
    task: asyncio.Task[None] | None = None
    knowledge: KnowledgeLibrary | None = None
    refresh: asyncio.Task[None] | None = None
    provider: ProviderWatch | None = None

    @property
    def store(self) -> SessionStore:
        return self.backend.store

    async def start(self) -> None:
        self.task = asyncio.create_task(
            self.dispatcher.start_polling(self.bot, handle_signals=False, close_bot_session=True, polling_timeout=1)
        )
        await asyncio.sleep(0)

    async def stop(self) -> None:
        if self.refresh is not None:
            self.refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.refresh
        with contextlib.suppress(RuntimeError):
            await self.dispatcher.stop_polling()
        if self.task is not None:
            await asyncio.wait_for(self.task, 10)


async def start_bot(settings: Settings) -> RunningBot:
    """The bot in this process with the backend its settings choose (Redis with a REDIS_URL)."""
    app = build_app(settings, await open_backend(settings))
    running = RunningBot(settings, app.backend, app.chat, app.bot, app.dispatcher, provider=app.provider)
    watch_handoffs(app, every=0.1)  # as run_polling does
    if app.knowledge is not None:  # as run_beside runs it
        running.knowledge = app.knowledge
        running.refresh = asyncio.create_task(app.knowledge.run())
    await running.start()
    return running

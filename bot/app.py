"""The composition root: settings → store, LLM client, chat service, aiogram Bot and Dispatcher."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.fsm.storage.memory import SimpleEventIsolation
from aiogram.types import BotCommand
from redis.asyncio import Redis

from bot.access import AccessMiddleware
from bot.flood import RetryAfterMiddleware
from bot.handlers import all_routers
from bot.settings import BotSettings
from bot.settings import Settings as Settings  # re-exported: importers of bot.app.Settings keep working
from services.chat import ChatService
from services.engine import build_chat_service, build_llm_client
from services.ratelimit import InMemoryRateLimiter, RateLimiter, RedisRateLimiter
from services.store import InMemorySessionStore, RedisSessionStore
from services.store.base import SessionStore

log = logging.getLogger(__name__)

COMMANDS = {
    "en": [
        BotCommand(command="new", description="Start a new conversation"),
        BotCommand(command="forget", description="Delete everything stored about this chat"),
        BotCommand(command="help", description="What I can do"),
    ],
    "ru": [
        BotCommand(command="new", description="Начать новый разговор"),
        BotCommand(command="forget", description="Удалить всё, что хранится об этом чате"),
        BotCommand(command="help", description="Что я умею"),
    ],
}


def redis_client(url: str) -> Redis:
    """A client whose calls fail (and are retried by their callers) instead of hanging on a dead link."""
    return Redis.from_url(
        url, health_check_interval=30, socket_timeout=15, socket_connect_timeout=5, socket_keepalive=True
    )


def build_store(settings: Settings) -> SessionStore:
    ttl = settings.memory.session_ttl_seconds
    if settings.redis.redis_url is None:
        log.warning(
            "REDIS_URL is unset: using the in-process session store (one process only; sessions are "
            "lost on restart). Set REDIS_URL for production and for more than one worker."
        )
        return InMemorySessionStore(ttl_seconds=ttl)
    client = redis_client(settings.redis.redis_url.get_secret_value())
    log.info("session store: Redis (key prefix %r)", settings.redis.redis_key_prefix)
    return RedisSessionStore(redis=client, ttl_seconds=ttl, key_prefix=settings.redis.redis_key_prefix)


def build_engine(settings: Settings, store: SessionStore | None = None) -> ChatService:
    return build_chat_service(
        llm=build_llm_client(settings.llm, settings.memory),
        store=store or build_store(settings),
        memory=settings.memory,
        instruction_role=settings.llm.openai_instruction_role,
    )


def build_bot(settings: BotSettings) -> Bot:
    if settings.telegram_api_url:
        session = AiohttpSession(api=TelegramAPIServer.from_base(settings.telegram_api_url.rstrip("/")))
    else:
        session = AiohttpSession()
    session.middleware(
        RetryAfterMiddleware(retries=settings.flood_retries, max_wait=settings.flood_max_wait_seconds)
    )
    return Bot(settings.require_token(), session=session, default=DefaultBotProperties(parse_mode=None))


def build_limiter(chat: ChatService, settings: BotSettings) -> RateLimiter:
    """Shared through Redis when the sessions are, else per process."""
    store = chat.store
    if isinstance(store, RedisSessionStore):
        return RedisRateLimiter(
            redis=store.redis,
            per_minute=settings.rate_limit_per_minute,
            key_prefix=store.key_prefix,
            ttl_seconds=store.ttl_seconds,
        )
    return InMemoryRateLimiter(per_minute=settings.rate_limit_per_minute)


def build_dispatcher(
    chat: ChatService, settings: BotSettings, *, erasers: Sequence[Callable[[int], Awaitable[None]]] = ()
) -> Dispatcher:
    """``erasers``: extra per-chat records /forget must delete (e.g. the work queue's dedup set)."""
    limiter = build_limiter(chat, settings)
    # SimpleEventIsolation: updates of one chat are handled one at a time, in order, within this process
    # (across processes the work queue's per-chat lease does the same)
    dispatcher = Dispatcher(
        events_isolation=SimpleEventIsolation(),
        chat=chat,
        settings=settings,
        limiter=limiter,
        erasers=[limiter.forget, *erasers],
    )
    dispatcher.message.outer_middleware(AccessMiddleware())
    dispatcher.include_routers(*all_routers())

    async def on_shutdown() -> None:
        await chat.close()

    dispatcher.shutdown.register(on_shutdown)
    return dispatcher


async def set_commands(bot: Bot) -> None:
    await bot.set_my_commands(COMMANDS["en"])
    await bot.set_my_commands(COMMANDS["ru"], language_code="ru")

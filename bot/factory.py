"""The composition root: settings → store, LLM client, chat service, aiogram Bot and Dispatcher."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.fsm.storage.memory import SimpleEventIsolation
from aiogram.types import BotCommand

from bot.runtime.fastpath import json_codec
from bot.runtime.startup import with_startup_retries
from bot.settings import BotSettings
from bot.settings import Settings as Settings  # re-exported: importers of bot.factory.Settings keep working
from bot.telegram.handlers import all_routers
from bot.telegram.middlewares.access import AccessMiddleware
from bot.telegram.middlewares.flood import RetryAfterMiddleware
from services.backends.memory import InMemorySessionStore
from services.backends.redis.connection import choose_cluster, redis_client
from services.backends.redis.deadletters import DeadLetterStore
from services.backends.redis.keys import KeySpace, bot_id_of
from services.backends.redis.ratelimit import InMemoryRateLimiter, RateLimiter, RedisRateLimiter
from services.backends.redis.scripts import AnyRedis, redis_errors
from services.backends.redis.store import RedisSessionStore
from services.engine.builders import build_chat_service, build_llm_client
from services.engine.chat import ChatService
from services.metrics import LLM_IN_FLIGHT, PrometheusObserver
from services.ports import SessionStore

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


def key_space(settings: Settings) -> KeySpace:
    """Every key of this bot lives under ``<REDIS_KEY_PREFIX>:<bot id>``."""
    return KeySpace(settings.redis.redis_key_prefix, bot_id_of(settings.bot.bot_token.get_secret_value()))


@dataclass
class Backend:
    """Everything that keeps state, built once from the settings: the session store, the rate limiter
    and, with Redis, the one client the queue, the poller and the dead letters share."""

    store: SessionStore
    limiter: RateLimiter
    keys: KeySpace
    ttl_seconds: int
    redis: AnyRedis | None = None
    cluster: bool = False

    def need_redis(self) -> AnyRedis:
        if self.redis is None:
            raise ValueError("this needs REDIS_URL")
        return self.redis

    def dead_letters(self) -> DeadLetterStore:
        return DeadLetterStore(redis=self.need_redis(), keys=self.keys)

    async def ping(self) -> None:
        """Raise StoreUnavailableError if the backend cannot be reached."""
        await self.store.ping()

    async def forget_chat(self, chat_id: int) -> None:
        """What /forget deletes besides the session: the rate-limit window and the chat's dead letters."""
        await self.limiter.forget(chat_id)
        if self.redis is not None:
            await self.dead_letters().drop_chat(chat_id)

    async def close(self) -> None:
        await self.store.close()
        if self.redis is not None:
            with redis_errors("closing"):
                await self.redis.aclose()


async def open_backend(settings: Settings) -> Backend:
    """``build_backend`` after resolving ``REDIS_CLUSTER`` (``auto`` asks the server once, retrying
    while it cannot be reached; StartupError if it never answers)."""
    if settings.redis.redis_url is None:
        return build_backend(settings)
    url = settings.redis.redis_url.get_secret_value()
    mode = settings.redis.redis_cluster
    cluster = await with_startup_retries("connecting to Redis", lambda: choose_cluster(url, mode))
    return build_backend(settings, cluster=cluster)


def build_backend(settings: Settings, *, cluster: bool = False) -> Backend:
    """Everything that keeps state; with ``REDIS_URL``, one client (a cluster client if ``cluster``)."""
    ttl = settings.memory.session_ttl_seconds
    keys = key_space(settings)
    per_minute = settings.bot.rate_limit_per_minute
    if settings.redis.redis_url is None:
        log.warning(
            "REDIS_URL is unset: using the in-process session store (one process only; sessions are "
            "lost on restart). Set REDIS_URL for production and for more than one worker."
        )
        return Backend(InMemorySessionStore(ttl_seconds=ttl), InMemoryRateLimiter(per_minute=per_minute), keys, ttl)
    client = redis_client(settings.redis.redis_url.get_secret_value(), cluster=cluster)
    log.info("session store: Redis%s (keys under %r)", " Cluster" if cluster else "", keys.namespace)
    return Backend(
        RedisSessionStore(redis=client, ttl_seconds=ttl, keys=keys),
        RedisRateLimiter(redis=client, per_minute=per_minute, keys=keys, ttl_seconds=ttl),
        keys,
        ttl,
        client,
        cluster,
    )


def build_store(settings: Settings) -> SessionStore:
    return build_backend(settings).store


def build_engine(settings: Settings, store: SessionStore | None = None) -> ChatService:
    """The engine as the bot runs it: every turn and every LLM call in flight lands in the metrics."""
    llm = build_llm_client(settings.llm, settings.memory)
    llm.on_in_flight = LLM_IN_FLIGHT.set
    return build_chat_service(
        llm=llm,
        store=store or build_store(settings),
        memory=settings.memory,
        instruction_role=settings.llm.openai_instruction_role,
        observer=PrometheusObserver(drift_warn_ratio=settings.bot.token_drift_warn_ratio),
    )


def build_bot(settings: BotSettings) -> Bot:
    loads, dumps, codec = json_codec()
    log.info("Bot API JSON codec: %s", codec)
    if settings.telegram_api_url:
        api = TelegramAPIServer.from_base(settings.telegram_api_url.rstrip("/"))
        session = AiohttpSession(api=api, json_loads=loads, json_dumps=dumps)
    else:
        session = AiohttpSession(json_loads=loads, json_dumps=dumps)
    session.middleware(RetryAfterMiddleware(retries=settings.flood_retries, max_wait=settings.flood_max_wait_seconds))
    return Bot(settings.require_token(), session=session, default=DefaultBotProperties(parse_mode=None))


def build_dispatcher(
    chat: ChatService,
    settings: BotSettings,
    *,
    limiter: RateLimiter | None = None,
    erasers: Sequence[Callable[[int], Awaitable[None]]] = (),
) -> Dispatcher:
    """``erasers``: extra per-chat records /forget must delete (see ``Backend.forget_chat``)."""
    limiter = limiter or InMemoryRateLimiter(per_minute=settings.rate_limit_per_minute)
    # SimpleEventIsolation: updates of one chat are handled one at a time, in order, within this process
    # (across processes the work queue's per-chat lease does the same)
    dispatcher = Dispatcher(
        events_isolation=SimpleEventIsolation(),
        chat=chat,
        settings=settings,
        limiter=limiter,
        erasers=list(erasers),
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

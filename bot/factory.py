"""The only composition root: ``build_app`` turns the settings and a backend into the application
(``App``: knowledge, model client, chat engine, media reader, provider watch, aiogram Bot and
Dispatcher), every observer given to its component's constructor; the modes only start, wait and stop
it. The backend comes from ``bot/backends.py``; queued mode's own parts (workers, intake, poller) are
built by ``bot/queueing/process.py`` around the app."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar, overload

from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.telegram import TelegramAPIServer
from aiogram.fsm.storage.memory import SimpleEventIsolation

from bot.backends import build_backend
from bot.knowledge_setup import build_knowledge
from bot.metrics import (
    LLM_IN_FLIGHT,
    PrometheusObserver,
    count_summary_attempt,
    show_summary_breaker,
)
from bot.provider_health import ProviderWatch, probe_while_refused
from bot.serving.deadlines import watch_deadlines
from bot.serving.fastpath import json_codec
from bot.serving.gaps_digest import GapsDigest
from bot.serving.startup import with_startup_retries
from bot.settings import BotSettings
from bot.settings import Settings as Settings  # re-exported: importers of bot.factory.Settings keep working
from bot.telegram.albums import AlbumDispatcher
from bot.telegram.desk import HandoffDesk
from bot.telegram.download_notice import DownloadNoticeMiddleware
from bot.telegram.feedback import Feedback
from bot.telegram.handlers import all_routers
from bot.telegram.link_hosts import LinkPolicy
from bot.telegram.middlewares.access import AccessMiddleware
from bot.telegram.middlewares.flood import RetryAfterMiddleware
from bot.telegram.middlewares.language import LanguageMiddleware
from bot.telegram.middlewares.response_types import KeepResponseTypes
from bot.telegram.optional import BestEffort, OptionalCallFailed
from bot.telegram.poll_pacing import PaceEmptyPolls
from bot.telegram.session import FencedSession
from bot.telegram.texts import bot_commands
from services.backends.memory import InMemoryBackend
from services.backends.redis.backend import RedisBackend
from services.core.errors import ConfigurationError
from services.core.tokens import TokenCounter
from services.engine.builders import (
    SummaryObservers,
    build_chat_service,
    build_image_notes,
    build_llm_client,
    build_media_reader,
    instruction_role,
)
from services.engine.chat import ChatService
from services.media.reader import MediaReader
from services.memory.handoff_memory import HandoffMemory
from services.ports.actions import ActionTools
from services.ports.backend import Backend
from services.ports.knowledge import KnowledgeSource

if TYPE_CHECKING:
    from services.actions.catalog import Catalog
    from services.knowledge.library import KnowledgeLibrary

log = logging.getLogger(__name__)

AppBackend = TypeVar("AppBackend", bound=Backend, covariant=True)
BackendT = TypeVar("BackendT", bound=Backend)


@dataclass(frozen=True)
class Core:
    """What answers a customer, Telegram aside (the console runs it alone): the knowledge library (None
    without KNOWLEDGE_DIR), the chat engine, the media reader, and the provider watch they report to."""

    provider: ProviderWatch
    knowledge: KnowledgeLibrary | None
    chat: ChatService
    media: MediaReader
    actions: Catalog | None = None

    async def close(self) -> None:
        await self.media.close()
        await self.chat.close()
        if self.actions is not None:
            await self.actions.close()


@dataclass(frozen=True)
class App(Generic[AppBackend]):
    """One bot process's application, built by ``build_app``. The modes start, wait for and stop it;
    in-process, the dispatcher's shutdown closes the engine, the media reader and the backend; queued
    mode's ``QueuedProcess.stop`` closes them in its own order."""

    settings: Settings
    backend: AppBackend
    core: Core
    bot: Bot
    dispatcher: Dispatcher

    @property
    def chat(self) -> ChatService:
        return self.core.chat

    @property
    def knowledge(self) -> KnowledgeLibrary | None:
        return self.core.knowledge

    @property
    def provider(self) -> ProviderWatch:
        return self.core.provider

    @property
    def desk(self) -> HandoffDesk:
        desk: HandoffDesk = self.dispatcher["desk"]
        return desk

    def probe(self) -> Callable[[], Awaitable[None]]:
        """The provider probe, a background task of every mode (``provider_probe``)."""
        return provider_probe(self.settings, self.provider)

    def background_tasks(
        self, overdue: Callable[[int], Awaitable[None]], *, every: float = 1.0
    ) -> dict[str, Callable[[], Awaitable[None]]]:
        """Every mode's background tasks, by name, for its runner to supervise: the provider probe,
        with KNOWLEDGE_DIR the knowledge refresh (each process reads the folder and swaps its own
        index), with handoff on the handoff deadlines, checked each ``every`` s (``overdue``: what is
        done with a due one: handled at once in-process, queued in queued mode), the gaps digest."""
        tasks = {"provider-probe": self.probe()}
        if self.knowledge is not None:
            tasks["knowledge-refresh"] = self.knowledge.run
        if self.desk.enabled:
            handoffs = self.backend.handoffs
            tasks["handoff-deadlines"] = lambda: watch_deadlines(handoffs, overdue, every)
        if self.desk.enabled and self.settings.bot.gaps_digest_hour is not None:
            tasks["gaps-digest"] = GapsDigest.of(self).run
        return tasks

    async def connect(self) -> None:
        """Every mode's start-up with Telegram: ``getMe`` and the command menu, each with the start-up
        retries (StartupError when Telegram never answers)."""
        await with_startup_retries("connecting to Telegram", self.bot.get_me)
        await with_startup_retries("registering the bot commands", lambda: set_commands(self.bot, self.settings.bot))


def build_core(settings: Settings, backend: Backend) -> Core:
    """Knowledge (its full-text index loaded: a folder mistake is a ConfigurationError here), then the
    engine and the media reader on the backend's store, records and memos, with one provider watch."""
    provider = ProviderWatch()
    knowledge = build_knowledge(settings, backend)
    actions = build_actions_catalog(settings)
    chat = build_engine(
        settings,
        backend,
        provider=provider,
        knowledge=knowledge,
        actions=actions,
    )
    media = build_media(settings, backend, knowledge)
    return Core(provider=provider, knowledge=knowledge, chat=chat, media=media, actions=actions)


def build_actions_catalog(settings: Settings) -> Catalog | None:
    """With ``ACTIONS_FILE``: the operator's tools, loaded and checked (every mistake of the file in one
    ConfigurationError, a line each); None otherwise (YAML, RE2 and JSON Schema never imported)."""
    options = settings.actions
    if not options.actions_file:
        return None
    from services.actions.catalog import audit_key
    from services.actions.loading import ActionsFileError, load_catalog

    try:
        return load_catalog(
            options.actions_file,
            operator_chat_configured=settings.bot.handoff_enabled,
            timeout=options.actions_timeout_seconds,
            max_bytes=options.actions_max_response_bytes,
            audit_key=audit_key(settings.bot.bot_token.get_secret_value()),
        )
    except ActionsFileError as exc:
        what = "\n".join(exc.lines)
        raise ConfigurationError(f"ACTIONS_FILE={options.actions_file} cannot be used:\n{what}") from exc


@overload
def build_app(settings: Settings) -> App[InMemoryBackend | RedisBackend]: ...
@overload
def build_app(settings: Settings, backend: BackendT) -> App[BackendT]: ...
def build_app(settings: Settings, backend: Backend | None = None) -> App[Backend]:
    """The application from the settings: on ``backend``, or without one the in-process backend (with
    REDIS_URL a ConfigurationError: ``bot.backends.open_backend`` opens Redis first, resolving
    REDIS_CLUSTER, and its backend is passed in), the core, the aiogram Bot (no request made yet) and
    the Dispatcher with its handlers, middlewares and the core's components."""
    if backend is None:
        if settings.redis.redis_url is not None:
            raise ConfigurationError("with REDIS_URL the backend is opened first (open_backend) and passed in")
        backend = build_backend(settings)
    core = build_core(settings, backend)
    bot = build_bot(settings.bot)
    dispatcher = build_dispatcher(
        core.chat,
        settings.bot,
        backend=backend,
        media=core.media,
        knowledge=core.knowledge,
        provider=core.provider,
    )
    if core.actions is not None:  # in-process mode closes on the dispatcher's shutdown; queued mode by core.close
        dispatcher.shutdown.register(core.actions.close)
    return App(settings=settings, backend=backend, core=core, bot=bot, dispatcher=dispatcher)


def cache_key_secret(settings: Settings) -> bytes:
    """The secret of the chats' prompt_cache_key hashes: derived from the bot token, which the model
    provider never sees, and the same in every worker."""
    return hashlib.sha256(b"prompt-cache-key\0" + settings.bot.bot_token.get_secret_value().encode()).digest()


def build_engine(
    settings: Settings,
    backend: Backend,
    *,
    provider: ProviderWatch,
    knowledge: KnowledgeSource | None = None,
    actions: ActionTools | None = None,
) -> ChatService:
    """The engine as the bot runs it, on the backend's store: every turn and every LLM call in flight
    lands in the metrics, a refused summary call in ``provider`` (the app's one watch), and every
    request the provider accepts clears its refusal (a turn that made no model call clears nothing).
    With ``OPERATOR_CHAT_ID`` the model is offered the handoff tool; with ``actions`` (ACTIONS_FILE) the
    operator's tools too, their outcomes kept in the backend's ledger."""
    store, gaps, memos = backend.store, backend.gaps, backend.memos
    llm = build_llm_client(
        settings.llm,
        settings.memory,
        cache_key_secret=cache_key_secret(settings),
        on_in_flight=LLM_IN_FLIGHT.set,
        on_accepted=provider.accepted,
    )
    role = instruction_role(llm)
    counter = TokenCounter.for_encoding(settings.memory.tokenizer_encoding)
    notes = (
        build_image_notes(llm=llm, counter=counter, role=role, memos=memos) if settings.media.images_enabled else None
    )
    return build_chat_service(
        llm=llm,
        store=store,
        memory=settings.memory,
        instruction_role=role,
        observer=PrometheusObserver(
            drift_warn_ratio=settings.bot.token_drift_warn_ratio,
            tools=actions.names() if actions is not None else None,  # any other name is labelled unknown
        ),
        handoff=settings.bot.handoff_enabled,
        summary_response_format=settings.llm.summary_response_format,
        summary_observers=summary_observers(provider),
        knowledge=knowledge,
        knowledge_settings=settings.knowledge,
        gaps=gaps,
        counter=counter,
        notes=notes,
        actions=actions,
        ledger=backend.actions if actions is not None else None,
        actions_max_calls=settings.actions.actions_max_calls_per_turn,
        actions_confirm_seconds=settings.actions.actions_confirm_seconds,
        actions_approval_seconds=settings.actions.actions_approval_seconds,
    )


def summary_observers(provider: ProviderWatch) -> SummaryObservers:
    """Summary requests in the metrics; a refused one in ``provider``, and an accepted one clears it."""

    def refused(status: int | None, detail: str) -> None:
        provider.refused("summary", status, detail)

    def accepted() -> None:
        provider.accepted("summary")

    return SummaryObservers(
        attempt=count_summary_attempt, refused=refused, accepted=accepted, breaker=show_summary_breaker
    )


def provider_probe(settings: Settings, provider: ProviderWatch) -> Callable[[], Awaitable[None]]:
    """The background task of both modes that probes a refusing provider (``probe_while_refused``), on
    a client of its own (same settings; closed when the task ends), so it never waits for a turn's slot."""

    async def run() -> None:
        llm = build_llm_client(settings.llm, settings.memory)
        try:
            await probe_while_refused(provider, llm, every=settings.llm.llm_probe_interval_seconds)
        finally:
            await llm.close()

    return run


def build_bot(settings: BotSettings) -> Bot:
    loads, dumps, codec = json_codec()
    log.info("Bot API JSON codec: %s", codec)
    if settings.telegram_api_url:
        api = TelegramAPIServer.from_base(settings.telegram_api_url.rstrip("/"))
        session = FencedSession(api=api, json_loads=loads, json_dumps=dumps)
    else:
        session = FencedSession(json_loads=loads, json_dumps=dumps)
    session.middleware(BestEffort(timeout=settings.optional_call_timeout_seconds))  # outermost: bounds the rest
    session.middleware(PaceEmptyPolls(min_interval=settings.polling_min_interval_seconds))
    session.middleware(KeepResponseTypes())
    session.middleware(RetryAfterMiddleware(retries=settings.flood_retries, max_wait=settings.flood_max_wait_seconds))
    return Bot(settings.require_token(), session=session, default=DefaultBotProperties(parse_mode=None))


def build_media(settings: Settings, backend: Backend, knowledge: KnowledgeSource | None = None) -> MediaReader:
    """The reader of customers' photos, voice notes and documents (MEDIA settings), on the backend's memos."""
    counter = TokenCounter.for_encoding(settings.memory.tokenizer_encoding)
    return build_media_reader(settings.media, settings.llm, counter=counter, memos=backend.memos, knowledge=knowledge)


def build_dispatcher(
    chat: ChatService,
    settings: BotSettings,
    *,
    backend: Backend,
    provider: ProviderWatch,
    media: MediaReader | None = None,
    knowledge: KnowledgeSource | None = None,
) -> Dispatcher:
    """Handlers get ``chat`` (the engine), ``settings``, ``limiter`` and ``backend`` (for /forget,
    which deletes every record of the chat through ``backend.forget_chat``), ``desk`` (handoff to an
    operator; off without ``OPERATOR_CHAT_ID``), ``links`` (the hosts replies may link to:
    SAFE_LINK_HOSTS and the documents' own links of ``knowledge``), ``provider`` (the error handler
    reports a refused chat call to it), ``faq`` (learned entries), ``knowledge``, ``say`` (language middleware)."""
    # SimpleEventIsolation: updates of one chat are handled one at a time, in order, within this process
    # (across processes the work queue's per-chat lease does the same)
    dispatcher = AlbumDispatcher(
        events_isolation=SimpleEventIsolation(),
        chat=chat,
        settings=settings,
        limiter=backend.limiter,
        backend=backend,
        desk=build_desk(chat, settings, backend),
        media_reader=media,
        albums=backend.albums,
        links=LinkPolicy(settings.safe_link_hosts, knowledge),
        provider=provider,
        faq=backend.faq,
        knowledge=knowledge,
    )
    dispatcher.update.outer_middleware(DownloadNoticeMiddleware())
    dispatcher.message.outer_middleware(LanguageMiddleware(settings))
    dispatcher.message.outer_middleware(AccessMiddleware())
    dispatcher.include_routers(*all_routers())

    async def on_shutdown() -> None:
        await chat.close()
        if media is not None:
            await media.close()
        await backend.close()

    dispatcher.shutdown.register(on_shutdown)
    return dispatcher


def build_desk(chat: ChatService, settings: BotSettings, backend: Backend) -> HandoffDesk:
    """Handoff to an operator; without ``OPERATOR_CHAT_ID`` a desk that is off (no summaries made)."""
    memory = HandoffMemory(store=backend.store, summarizer=chat.summarizer) if settings.handoff_enabled else None
    feedback = Feedback.from_settings(backend.conversations, settings)
    return HandoffDesk(store=backend.handoffs, memory=memory, settings=settings, feedback=feedback)


async def set_commands(bot: Bot, settings: BotSettings) -> None:
    """The command menu in every language the bot speaks (descriptions live with the texts);
    /operator only when handoff is on. Best effort: a server that cannot set it leaves the bot without
    a menu (BestEffort logged why), not without service."""
    for language, commands in bot_commands(handoff=settings.handoff_enabled).items():
        try:
            await bot.set_my_commands(commands, language_code=None if language == "en" else language)
        except OptionalCallFailed:
            return

"""In-process mode (REDIS_URL unset): aiogram's own polling or webhook server, one process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiogram import Dispatcher
from aiohttp import web

from bot.factory import App, Settings, build_app
from bot.provider_health import ProviderWatch
from bot.serving.fastpath import freeze_startup_heap
from bot.serving.feedback import watch_feedback
from bot.serving.ops import ReadyCheck, add_health_routes, start_ops_server
from bot.serving.startup import cannot_listen, metrics_port_error
from bot.serving.webhook import build_webhook_app
from services.core.errors import StoreError, SupportBotError
from services.ports.backend import Backend

log = logging.getLogger("bot")


def at_once(app: App[Backend]) -> Callable[[int], Awaitable[None]]:
    """In-process mode (one process, no leases): an overdue handoff is handled at once."""
    desk, bot = app.desk, app.bot

    async def act(chat_id: int) -> None:
        await desk.overdue(bot, chat_id, None)

    return act


def watch_handoffs(app: App[Backend], every: float = 1.0) -> None:
    """Only the handoff reply deadlines (of ``App.background_tasks``), watched while the dispatcher runs."""
    run = app.background_tasks(at_once(app), every=every).get("handoff-deadlines")
    if run is not None:
        run_beside(app.dispatcher, "handoff-deadlines", run, every)


def run_beside(dispatcher: Dispatcher, name: str, run: Callable[[], Awaitable[None]], backoff: float = 1.0) -> None:
    """Run ``run()`` while the dispatcher runs, supervised: whatever escapes it, it starts again."""
    tasks: list[asyncio.Task[None]] = []

    async def keep() -> None:
        while True:
            try:
                await run()
            except Exception:
                log.exception("%s: the task failed; restarting it", name)
            await asyncio.sleep(backoff)

    async def start() -> None:
        tasks.append(asyncio.create_task(keep(), name=name))

    async def stop() -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        tasks.clear()

    dispatcher.startup.register(start)
    dispatcher.shutdown.register(stop)


def run_alongside(app: App[Backend], *, every: float = 1.0) -> None:
    """The background tasks of every mode (``App.background_tasks``: provider probe, knowledge refresh,
    handoff deadlines handled at once), run while the dispatcher runs; and the feedback questions,
    asked at once when due."""
    for name, run in app.background_tasks(at_once(app), every=every).items():
        run_beside(app.dispatcher, name, run, every)
    feedback, bot = app.desk.feedback, app.bot
    if feedback is not None and feedback.enabled:

        async def ask(chat_id: int, _due_ms: int) -> None:
            await feedback.ask(bot, chat_id, None)

        conversations = feedback.conversations
        run_beside(
            app.dispatcher, "feedback", lambda: watch_feedback(conversations, ask, hold=30.0, every=every), every
        )


def readiness(backend: Backend, running: Callable[[], bool], provider: ProviderWatch) -> ReadyCheck:
    async def ready() -> dict[str, bool]:
        try:
            await backend.ping()
            store_ok = True
        except StoreError:
            store_ok = False
        return {"store": store_ok, "consuming": running(), "model_provider": provider.healthy}

    return ready


async def connect(app: App[Backend]) -> None:
    """``App.connect`` (getMe, the command menu); the bot's session is closed when Telegram never answers."""
    try:
        await app.connect()
    except SupportBotError:
        await app.bot.session.close()
        raise


async def run_polling(settings: Settings) -> None:
    app = build_app(settings)
    bot, dispatcher = app.bot, app.dispatcher
    await connect(app)
    run_alongside(app)
    await bot.delete_webhook(drop_pending_updates=False)  # getUpdates is refused while a webhook is set
    polling = asyncio.Event()
    dispatcher.startup.register(polling.set)
    dispatcher.shutdown.register(polling.clear)
    try:
        ops = await start_ops_server(
            host=settings.bot.metrics_host,
            port=settings.bot.metrics_port,
            ready=readiness(app.backend, polling.is_set, app.provider),
            tries=settings.bot.metrics_port_tries,
        )
    except OSError as exc:
        await bot.session.close()
        raise metrics_port_error(settings.bot, exc) from None
    freeze_startup_heap()
    log.info("starting in polling mode")
    try:
        await dispatcher.start_polling(bot, allowed_updates=dispatcher.resolve_used_update_types())
    finally:
        if ops is not None:
            await ops.cleanup()


def run_webhook(settings: Settings) -> None:
    app = build_app(settings)
    bot = app.bot
    run_alongside(app)

    async def on_startup() -> None:
        await connect(app)
        freeze_startup_heap()
        log.info(
            "webhook server on %s:%s%s", settings.bot.webhook_host, settings.bot.webhook_port, settings.bot.webhook_path
        )

    app.dispatcher.startup.register(on_startup)
    web_app = build_webhook_app(bot=bot, dispatcher=app.dispatcher, settings=settings.bot)
    ready = readiness(app.backend, lambda: True, app.provider)
    add_health_routes(web_app, ready)
    serve_ops(web_app, settings, ready)
    try:
        web.run_app(web_app, host=settings.bot.webhook_host, port=settings.bot.webhook_port, print=None)
    except OSError as exc:  # the port is taken (at start: run_app binds before serving)
        raise cannot_listen("WEBHOOK_PORT", settings.bot.webhook_host, settings.bot.webhook_port, exc) from None


def serve_ops(web_app: web.Application, settings: Settings, ready: ReadyCheck) -> None:
    """The ops server (metrics, health) runs while ``web_app`` runs."""
    ops: list[web.AppRunner] = []

    async def start_ops(_app: web.Application) -> None:
        try:
            runner = await start_ops_server(
                host=settings.bot.metrics_host,
                port=settings.bot.metrics_port,
                ready=ready,
                tries=settings.bot.metrics_port_tries,
            )
        except OSError as exc:
            raise metrics_port_error(settings.bot, exc) from None
        ops.extend([runner] if runner else [])

    async def stop_ops(_app: web.Application) -> None:
        for runner in ops:
            await runner.cleanup()

    web_app.on_startup.append(start_ops)
    web_app.on_cleanup.append(stop_ops)

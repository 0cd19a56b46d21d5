"""Queued mode (REDIS_URL set): durable intake (webhook server or leader poller) + queue worker, in one
process; run as many processes as needed against one Redis."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable

from aiogram import Bot
from aiohttp import web

from bot.factory import (
    Settings,
    build_bot,
    build_dispatcher,
    build_engine,
    build_knowledge,
    build_media,
    open_redis_backend,
    provider_probe,
    set_commands,
)
from bot.metrics import DEAD_LETTERS_WAITING, HANDOFFS_OPEN, QUEUE_DUE, QUEUE_OLDEST_AGE
from bot.provider_health import PROVIDER
from bot.queueing.giving_up import tell_given_up
from bot.queueing.intake import Intake, Poller, operator_route, webhook_handler
from bot.queueing.supervisor import Supervisor
from bot.queueing.worker import Worker, worker_identity
from bot.serving.deadlines import OVERDUE_PREFIX, enqueue_overdue, watch_deadlines
from bot.serving.fastpath import freeze_startup_heap
from bot.serving.ops import ReadyCheck, add_health_routes, start_ops_server
from bot.serving.startup import StartupError, cannot_listen, with_startup_retries
from bot.telegram.desk import HandoffDesk
from services.errors import TransientError
from services.fence import Fence
from services.ports.backend import QueuedBackend
from services.ports.deadletters import DeadLetters
from services.ports.handoffs import HandoffStore
from services.ports.queue import WorkQueue

log = logging.getLogger(__name__)


async def run_queued(settings: Settings) -> None:
    backend = await open_redis_backend(settings)
    bot = build_bot(settings.bot)
    try:
        await _run(settings, backend, bot)
    finally:
        with contextlib.suppress(Exception):
            await bot.session.close()
        with contextlib.suppress(Exception):
            await backend.close()


async def _run(settings: Settings, backend: QueuedBackend, bot: Bot) -> None:
    workers = settings.workers
    identity = worker_identity()
    lease_ms = int(workers.worker_lease_seconds * 1000)
    await with_startup_retries("connecting to Redis", backend.ping)
    await with_startup_retries("connecting to Telegram", bot.get_me)
    knowledge = build_knowledge(settings, backend)
    chat = build_engine(settings, backend.store, knowledge=knowledge, gaps=backend.gaps, memos=backend.memos)
    queue = backend.queue(lease_ms=lease_ms)
    dead_letters = backend.dead_letters
    route = operator_route(settings.bot.operator_chat_id, backend.handoffs)
    dispatcher = build_dispatcher(
        chat, settings.bot, backend=backend, media=build_media(settings, backend, knowledge), knowledge=knowledge
    )
    desk: HandoffDesk = dispatcher["desk"]

    async def internal(chat_id: int, item_id: str, fence: Fence) -> None:
        if item_id.startswith(OVERDUE_PREFIX) and desk.enabled:
            await desk.overdue(bot, chat_id, fence)

    worker = Worker(
        queue=queue,
        dead_letters=dead_letters,
        dispatcher=dispatcher,
        bot=bot,
        identity=identity,
        concurrency=workers.worker_concurrency,
        idle_wait=workers.worker_idle_wait_seconds,
        grace=workers.shutdown_grace_seconds,
        max_attempts=workers.worker_max_attempts,
        give_up_seconds=workers.worker_give_up_seconds,
        internal=internal,
        giving_up=tell_given_up(bot, desk, settings.bot),
        max_model_requests=workers.llm_max_requests_per_question,
        download_give_up_seconds=workers.media_download_give_up_seconds,
    )
    serve_received = settings.bot.bot_mode == "webhook" and workers.webhook_serve_received
    intake = Intake(
        queue=queue,
        dead_letters=dead_letters,
        identity=identity,
        route=route,
        serve=worker if serve_received else None,
        albums=backend.albums,
    )
    await with_startup_retries("registering the bot commands", lambda: set_commands(bot, settings.bot))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)

    supervisor = Supervisor()

    async def ready() -> dict[str, bool]:
        checks = {"worker": worker.alive, **supervisor.health()}
        try:
            await backend.ping()
            checks["redis"] = True
        except TransientError:
            checks["redis"] = False
        checks["model_provider"] = PROVIDER.healthy
        return checks

    ops: web.AppRunner | None = None
    runner: web.AppRunner | None = None
    setting, host, port = "METRICS_PORT", settings.bot.metrics_host, settings.bot.metrics_port
    try:  # listen first: a port in use is a start-up error, before any work is taken
        ops = await start_ops_server(host=host, port=port, ready=ready, tries=settings.bot.metrics_port_tries)
        if settings.bot.bot_mode == "webhook":
            setting, host, port = "WEBHOOK_PORT", settings.bot.webhook_host, settings.bot.webhook_port
            runner = await _start_webhook(settings, intake, ready)
    except OSError as exc:
        for started in (runner, ops):
            if started is not None:
                await started.cleanup()
        tries = settings.bot.metrics_port_tries if setting == "METRICS_PORT" else 1
        raise cannot_listen(setting, host, port, exc, tries=tries) from None
    supervisor.start("worker", worker.run)
    handoffs = backend.handoffs if desk.enabled else None
    supervisor.start("gauges", lambda: _queue_gauges(queue, dead_letters, handoffs))
    supervisor.start("provider-probe", provider_probe(settings))
    if knowledge is not None:  # every worker reads the folder itself and swaps its own index
        supervisor.start("knowledge-refresh", knowledge.run)
    if desk.enabled:  # every worker watches (each due handoff is queued once: its deadline goes)
        supervisor.start("handoff-deadlines", lambda: watch_deadlines(backend.handoffs, enqueue_overdue(queue)))
    poller: Poller | None = None
    if runner is not None:
        log.info(
            "webhook server on %s:%s%s (queued mode, worker %s)",
            settings.bot.webhook_host,
            settings.bot.webhook_port,
            settings.bot.webhook_path,
            identity,
        )
    else:
        poller = Poller(
            lease=backend.polling_lease(token=identity, lease_ms=lease_ms),
            bot=bot,
            intake=intake,
            poll_timeout=workers.polling_timeout_seconds,
            allowed_updates=dispatcher.resolve_used_update_types(),
        )
        supervisor.start("poller", poller.run)
        log.info("starting in polling mode (queued mode, worker %s)", identity)

    freeze_startup_heap()
    stopped_by = await _first(stop.wait(), supervisor.failed.wait())
    if stopped_by == 1:
        log.critical("stopping: %s", supervisor.failure)
    log.info("stopping: no new work is taken")
    if runner is not None:
        await runner.cleanup()  # stop intake first: Telegram retries elsewhere
    await supervisor.stop("gauges")
    await supervisor.stop("provider-probe")
    if knowledge is not None:
        await supervisor.stop("knowledge-refresh")
    if desk.enabled:
        await supervisor.stop("handoff-deadlines")
    if poller is not None:
        poller.stop()
    worker.stop()
    await supervisor.wait("worker", *(["poller"] if poller is not None else []))
    await chat.close()
    if ops is not None:
        await ops.cleanup()
    log.info("stopped")
    if stopped_by == 1:
        raise StartupError(f"a task kept failing: {supervisor.failure}")


async def _start_webhook(settings: Settings, intake: Intake, ready: ReadyCheck) -> web.AppRunner:
    assert settings.bot.webhook_secret is not None
    app = web.Application()
    app.router.add_post(
        settings.bot.webhook_path, webhook_handler(intake, settings.bot.webhook_secret.get_secret_value())
    )
    add_health_routes(app, ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.bot.webhook_host, settings.bot.webhook_port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


async def _first(*waits: Awaitable[object]) -> int:
    """Index of the first of ``waits`` to finish (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return next(i for i, t in enumerate(tasks) if t in done)


def dump_tasks() -> None:
    """SIGUSR1: log where every asyncio task of this worker is waiting (for diagnosing a stuck chat)."""
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=12)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.warning("task %s: %s", task.get_name(), where)


async def _queue_gauges(
    queue: WorkQueue, dead_letters: DeadLetters, handoffs: HandoffStore | None, every: float = 5.0
) -> None:
    while True:
        try:
            due, age = await queue.stats()
            QUEUE_DUE.set(due)
            QUEUE_OLDEST_AGE.set(age)
            DEAD_LETTERS_WAITING.set(await dead_letters.count())
            if handoffs is not None:
                HANDOFFS_OPEN.set(await handoffs.open_count())
        except TransientError:
            pass
        await asyncio.sleep(every)

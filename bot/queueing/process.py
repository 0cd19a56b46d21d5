"""One process of queued mode around the application (``bot.factory.App``): the intake (a webhook
server or the leader's poller), the queue worker and their background tasks under a supervisor.
``start`` connects and listens before any work is taken, ``wait`` returns on SIGTERM/SIGINT or a task
that keeps failing, ``stop`` stops the intake first and the worker last (its turns finish)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from aiohttp import web

from bot.factory import App
from bot.metrics import DEAD_LETTERS_WAITING, HANDOFFS_OPEN, QUEUE_DUE, QUEUE_OLDEST_AGE
from bot.queueing.giving_up import tell_given_up
from bot.queueing.intake import Intake, Poller, operator_route, webhook_handler
from bot.queueing.supervisor import Supervisor
from bot.queueing.worker import Worker, worker_identity
from bot.serving.deadlines import OVERDUE_PREFIX, enqueue_overdue
from bot.serving.fastpath import freeze_startup_heap
from bot.serving.feedback import FEEDBACK_PREFIX, enqueue_feedback, watch_feedback
from bot.serving.ops import ReadyCheck, add_health_routes, start_ops_server
from bot.serving.startup import cannot_listen, with_startup_retries
from bot.settings import BotSettings
from services.core.errors import TransientError
from services.core.fence import Fence
from services.ports.backend import QueuedBackend
from services.ports.deadletters import DeadLetters
from services.ports.handoffs import HandoffStore
from services.ports.queue import WorkQueue

log = logging.getLogger(__name__)


class QueuedProcess:
    """The queue's intake and worker of one process; ``failure`` names a task that kept failing."""

    def __init__(self, app: App[QueuedBackend]) -> None:
        workers = app.settings.workers
        self.app = app
        self.identity = worker_identity()
        self._lease_ms = int(workers.worker_lease_seconds * 1000)
        self.queue = app.backend.queue(lease_ms=self._lease_ms)
        self.worker = self._worker()
        serve_received = app.settings.bot.bot_mode == "webhook" and workers.webhook_serve_received
        self.intake = Intake(
            queue=self.queue,
            dead_letters=app.backend.dead_letters,
            identity=self.identity,
            route=operator_route(app.settings.bot.operator_chat_id, app.backend.handoffs, app.backend.faq),
            serve=self.worker if serve_received else None,
            albums=app.backend.albums,
        )
        self.supervisor = Supervisor()
        self._stop = asyncio.Event()
        self._ops: web.AppRunner | None = None
        self._webhook: web.AppRunner | None = None
        self._poller: Poller | None = None
        self._beside: list[str] = []

    @property
    def failure(self) -> str | None:
        return self.supervisor.failure

    def _worker(self) -> Worker:
        app, workers, desk = self.app, self.app.settings.workers, self.app.desk

        async def internal(chat_id: int, item_id: str, fence: Fence) -> None:
            if item_id.startswith(OVERDUE_PREFIX) and desk.enabled:
                await desk.overdue(app.bot, chat_id, fence)
            elif item_id.startswith(FEEDBACK_PREFIX) and desk.feedback is not None:
                await desk.feedback.ask(app.bot, chat_id, fence)

        return Worker(
            queue=self.queue,
            dead_letters=app.backend.dead_letters,
            dispatcher=app.dispatcher,
            bot=app.bot,
            identity=self.identity,
            concurrency=workers.worker_concurrency,
            idle_wait=workers.worker_idle_wait_seconds,
            grace=workers.shutdown_grace_seconds,
            max_attempts=workers.worker_max_attempts,
            give_up_seconds=workers.worker_give_up_seconds,
            internal=internal,
            giving_up=tell_given_up(app.bot, desk, app.settings.bot),
            max_model_requests=workers.llm_max_requests_per_question,
            download_give_up_seconds=workers.media_download_give_up_seconds,
        )

    async def ready(self) -> dict[str, bool]:
        """/readyz: the worker loop, every supervised task, Redis and the model provider."""
        checks = {"worker": self.worker.alive, **self.supervisor.health()}
        try:
            await self.app.backend.ping()
            checks["redis"] = True
        except TransientError:
            checks["redis"] = False
        checks["model_provider"] = self.app.provider.healthy
        return checks

    async def start(self) -> None:
        """Redis and Telegram (with the start-up retries), the command menu, the signals, the ports
        (a port in use is a start-up error, before any work is taken), then the tasks."""
        app = self.app
        await with_startup_retries("connecting to Redis", app.backend.ping)
        await app.connect()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        await self._listen(app.settings.bot)
        self._start_tasks()
        freeze_startup_heap()

    async def _listen(self, settings: BotSettings) -> None:
        setting, host, port = "METRICS_PORT", settings.metrics_host, settings.metrics_port
        try:
            tries = settings.metrics_port_tries
            self._ops = await start_ops_server(host=host, port=port, ready=self.ready, tries=tries)
            if settings.bot_mode == "webhook":
                setting, host, port = "WEBHOOK_PORT", settings.webhook_host, settings.webhook_port
                self._webhook = await start_webhook(settings, self.intake, self.ready)
        except OSError as exc:
            for started in (self._webhook, self._ops):
                if started is not None:
                    await started.cleanup()
            self._webhook = self._ops = None  # cleaned up: ``stop`` has nothing of them left to stop
            tries = tries if setting == "METRICS_PORT" else 1
            raise cannot_listen(setting, host, port, exc, tries=tries) from None

    def _start_tasks(self) -> None:
        app, queue, desk = self.app, self.queue, self.app.desk
        self.supervisor.start("worker", self.worker.run)
        handoffs = app.backend.handoffs if desk.enabled else None
        self._beside_task("gauges", lambda: queue_gauges(queue, app.backend.dead_letters, handoffs))
        # every worker runs them (each due handoff is queued once: its deadline goes)
        for name, run in app.background_tasks(enqueue_overdue(queue)).items():
            self._beside_task(name, run)
        if desk.feedback is not None and desk.feedback.enabled:  # each due question is queued once
            conversations, act, hold = desk.feedback.conversations, enqueue_feedback(queue), self._lease_ms / 1000
            self._beside_task("feedback", lambda: watch_feedback(conversations, act, hold=hold))
        settings = app.settings.bot
        if self._webhook is not None:
            log.info(
                "webhook server on %s:%s%s (queued mode, worker %s)",
                settings.webhook_host,
                settings.webhook_port,
                settings.webhook_path,
                self.identity,
            )
            return
        self._poller = Poller(
            lease=app.backend.polling_lease(token=self.identity, lease_ms=self._lease_ms),
            bot=app.bot,
            intake=self.intake,
            poll_timeout=app.settings.workers.polling_timeout_seconds,
            allowed_updates=app.dispatcher.resolve_used_update_types(),
        )
        self.supervisor.start("poller", self._poller.run)
        log.info("starting in polling mode (queued mode, worker %s)", self.identity)

    def _beside_task(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        self._beside.append(name)
        self.supervisor.start(name, factory)

    async def wait(self) -> bool:
        """Until SIGTERM/SIGINT (False) or a task that keeps failing (True)."""
        stopped_by = await first(self._stop.wait(), self.supervisor.failed.wait())
        if stopped_by == 1:
            log.critical("stopping: %s", self.supervisor.failure)
        return stopped_by == 1

    async def stop(self) -> None:
        """The intake first (Telegram retries elsewhere), the background tasks, then the worker's turns
        finish; the engine, the media reader and the ops server last. Also after a ``start`` that
        failed part way: what it started is stopped."""
        log.info("stopping: no new work is taken")
        if self._webhook is not None:
            await self._webhook.cleanup()
        for name in self._beside:
            await self.supervisor.stop(name)
        if self._poller is not None:
            self._poller.stop()
        self.worker.stop()
        await self.supervisor.wait("worker", *(["poller"] if self._poller is not None else []))
        await self.app.core.close()  # the engine and the media reader (the dispatcher's shutdown never runs here)
        if self._ops is not None:
            await self._ops.cleanup()
        log.info("stopped")


async def start_webhook(settings: BotSettings, intake: Intake, ready: ReadyCheck) -> web.AppRunner:
    assert settings.webhook_secret is not None
    app = web.Application()
    app.router.add_post(settings.webhook_path, webhook_handler(intake, settings.webhook_secret.get_secret_value()))
    add_health_routes(app, ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.webhook_host, settings.webhook_port).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


async def first(*waits: Awaitable[object]) -> int:
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


async def queue_gauges(
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

"""Queued mode (REDIS_URL set): durable intake (webhook server or leader poller) + queue worker, in one
process; run as many processes as needed against one Redis."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from aiohttp import web
from redis.exceptions import RedisError

from bot.app import Settings, build_bot, build_dispatcher, build_engine, redis_client, set_commands
from bot.intake import Poller, webhook_handler
from bot.ops import add_health_routes, start_ops_server
from bot.settings import WorkerSettings
from bot.worker import Worker
from services.metrics import QUEUE_DUE, QUEUE_OLDEST_AGE
from services.queue import ChatWorkQueue, worker_identity

log = logging.getLogger(__name__)


async def run_queued(settings: Settings, workers: WorkerSettings) -> None:
    assert settings.redis.redis_url is not None
    url = settings.redis.redis_url.get_secret_value()
    prefix = settings.redis.redis_key_prefix
    identity = worker_identity()
    lease_ms = int(workers.worker_lease_seconds * 1000)

    chat = build_engine(settings)
    await chat.store.ping()
    redis = redis_client(url)
    queue = ChatWorkQueue(
        redis=redis,
        key_prefix=prefix,
        lease_ms=lease_ms,
        ttl_seconds=max(settings.memory.session_ttl_seconds, 0) or 7 * 24 * 3600,
    )
    bot = build_bot(settings.bot)
    dispatcher = build_dispatcher(chat, settings.bot, erasers=[queue.forget])
    worker = Worker(
        queue=queue,
        dispatcher=dispatcher,
        bot=bot,
        identity=identity,
        concurrency=workers.worker_concurrency,
        idle_wait=workers.worker_idle_wait_seconds,
        grace=workers.shutdown_grace_seconds,
    )
    await set_commands(bot)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)

    poller: Poller | None = None
    runner: web.AppRunner | None = None
    tasks = [asyncio.create_task(worker.run(), name="worker"), asyncio.create_task(_queue_gauges(queue))]

    async def ready() -> dict[str, bool]:
        checks = {"worker": worker.alive}
        try:
            await redis.ping()
            checks["redis"] = True
        except RedisError:
            checks["redis"] = False
        if poller is not None:
            checks["poller"] = not tasks[-1].done()
        return checks

    ops = await start_ops_server(host=settings.bot.metrics_host, port=settings.bot.metrics_port, ready=ready)
    if settings.bot.bot_mode == "webhook":
        assert settings.bot.webhook_secret is not None
        app = web.Application()
        app.router.add_post(
            settings.bot.webhook_path, webhook_handler(queue, settings.bot.webhook_secret.get_secret_value())
        )
        add_health_routes(app, ready)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.bot.webhook_host, settings.bot.webhook_port).start()
        log.info(
            "webhook server on %s:%s%s (queued mode, worker %s)",
            settings.bot.webhook_host,
            settings.bot.webhook_port,
            settings.bot.webhook_path,
            identity,
        )
    else:
        poller = Poller(
            redis=redis,
            bot=bot,
            queue=queue,
            key_prefix=prefix,
            identity=identity,
            lease_ms=lease_ms,
            poll_timeout=workers.polling_timeout_seconds,
            allowed_updates=dispatcher.resolve_used_update_types(),
        )
        tasks.append(asyncio.create_task(poller.run(), name="poller"))
        log.info("starting in polling mode (queued mode, worker %s)", identity)

    await stop.wait()
    log.info("stopping: no new work is taken")
    if runner is not None:
        await runner.cleanup()  # stop intake first: Telegram retries elsewhere
    for task in tasks[1:2]:
        task.cancel()
    if poller is not None:
        poller.stop()
    worker.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    with contextlib.suppress(Exception):
        await bot.session.close()
    await chat.close()
    await redis.aclose()
    if ops is not None:
        await ops.cleanup()
    log.info("stopped")


def dump_tasks() -> None:
    """SIGUSR1: log where every asyncio task of this worker is waiting (for diagnosing a stuck chat)."""
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=12)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.warning("task %s: %s", task.get_name(), where)


async def _queue_gauges(queue: ChatWorkQueue, every: float = 5.0) -> None:
    while True:
        try:
            due, age = await queue.stats()
            QUEUE_DUE.set(due)
            QUEUE_OLDEST_AGE.set(age)
        except RedisError:
            pass
        await asyncio.sleep(every)

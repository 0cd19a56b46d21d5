"""Builders shared by the queue worker's tests (tests/unit/bot/queueing/test_worker.py and
test_serving_faults.py); their ``bot`` fixture is in tests/conftest.py."""

from __future__ import annotations

import json
from typing import Any

from aiogram import Bot, Dispatcher

from bot.queueing.worker import Worker
from services.backends.redis.deadletters import RedisDeadLetters
from services.backends.redis.queue import RedisWorkQueue


def update(update_id: int, chat_id: int, text: str) -> dict[str, Any]:
    """A Telegram update: a text message ``update_id`` (also its message id) in private chat ``chat_id``,
    as the webhook intake receives it."""
    return {
        "update_id": update_id,
        "message": {"message_id": update_id, "date": 0, "chat": {"id": chat_id, "type": "private"}, "text": text},
    }


def update_json(update_id: int, chat_id: int, text: str) -> str:
    """``update(...)`` as a queue item's payload."""
    return json.dumps(update(update_id, chat_id, text))


def make_worker(
    queue: RedisWorkQueue,
    dispatcher: Dispatcher,
    bot: Bot,
    *,
    concurrency: int = 4,
    idle_wait: float = 0.05,
    grace: float = 1,
    **options: Any,
) -> Worker:
    """A worker "w1" on ``queue`` (its dead letters in the queue's key space); ``options`` go to Worker
    (max_attempts, give_up_seconds, ...)."""
    return Worker(
        queue=queue,
        dead_letters=RedisDeadLetters(redis=queue._redis, keys=queue._keys),
        dispatcher=dispatcher,
        bot=bot,
        identity="w1",
        concurrency=concurrency,
        idle_wait=idle_wait,
        grace=grace,
        **options,
    )

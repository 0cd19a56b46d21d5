"""Media through the durable queue: two real webhook workers on one redis-server. The photos of one
album, posted to different workers, are one turn (one model request with every image, one reply)
answered before the text sent right after the album; a redelivered photo update changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from redis.asyncio import Redis

from services.backends.redis.store import RedisSessionStore
from tests.conftest import RedisServer
from tests.e2e.processes import BotProcess, start_webhook_workers
from tests.e2e.test_faults import KEYS, post, worker_env
from tests.e2e.test_media import jpeg
from tests.stubs.openai_server import StubOpenAI
from tests.stubs.telegram_server import StubTelegram
from tests.stubs.vision import images_in

CHAT = 777


async def test_an_album_across_two_workers_is_one_turn_before_the_text_after_it(
    telegram: StubTelegram,
    stub_llm: StubOpenAI,
    redis_server: RedisServer,
    real_redis: Redis,
    tmp_path: Path,
    processes: list[BotProcess],
) -> None:
    env = worker_env(telegram, stub_llm, redis_server.url, IMAGE_TOKENS_RULE="gpt-4o")
    url_a, url_b = await start_webhook_workers(env, tmp_path, processes, 2)
    photos = [jpeg(color=(200, 10, 10)), jpeg(color=(10, 200, 10)), jpeg(color=(10, 10, 200))]
    album = telegram.album(CHAT, photos, caption="3 boxes")
    for n, update in enumerate(album):
        assert await post((url_a, url_b)[n % 2], update) == 200
    assert await post(url_b, album[1]) == 200  # Telegram delivers one photo again
    assert await post(url_a, telegram.message_update(CHAT, "thanks")) == 200
    await telegram.wait_messages(CHAT, 2, within=30)
    album_request, thanks_request = stub_llm.chat_requests
    assert len(images_in(album_request)) == 3 and images_in(thanks_request) == []
    assert "thanks" in json.dumps(thanks_request["messages"][-1]) and "thanks" not in json.dumps(album_request)
    session = await RedisSessionStore(redis=real_redis, keys=KEYS).load(CHAT)
    user, _, thanks, _ = (m.content for m in session.messages)
    assert user.count("[photo") == 3 and user.endswith("3 boxes") and thanks == "thanks"
    assert len(telegram.texts_to(CHAT)) == 2

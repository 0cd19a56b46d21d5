"""Dead-letter records, over every shared backend (the ``queued_backend`` fixture)."""

from __future__ import annotations

import pytest

from services.ports.backend import QueuedBackend
from services.ports.deadletters import DeadLetters
from tests.conftest import TEST_KEYS

KEYS = TEST_KEYS


@pytest.fixture
def dead(queued_backend: QueuedBackend) -> DeadLetters:
    return queued_backend.dead_letters


async def add(dead: DeadLetters, chat_id: int, item_id: str) -> str:
    letter = await dead.add(
        chat_id=chat_id, item_id=item_id, order=int(item_id), payload='{"n":1}', error="boom", attempts=3, worker="w1"
    )
    return letter.id


async def test_add_list_get_drop(dead: DeadLetters) -> None:
    ids = [await add(dead, chat, str(n)) for n, chat in enumerate((1, 2, 1, 3))]
    assert await dead.count() == 4
    assert sorted(letter.id for letter in await dead.list()) == sorted(ids)
    found = await dead.get(ids[0])
    assert found is not None and found.payload == '{"n":1}' and found.attempts == 3
    assert await dead.drop(ids[1]) == 1
    assert await dead.get(ids[1]) is None and await dead.count() == 3


async def test_drop_chat_deletes_only_that_chat(dead: DeadLetters) -> None:
    for n, chat in enumerate((1, 2, 1, 3)):
        await add(dead, chat, str(n))
    await dead.drop_chat(1)
    assert sorted(letter.chat_id for letter in await dead.list()) == [2, 3]

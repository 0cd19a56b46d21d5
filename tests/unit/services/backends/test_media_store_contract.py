"""What every backend promises of media records: a transcript or note is kept by file, an album's
photos are taken by one turn only (again by that turn when it is redelivered), /forget removes both.
Runs over every backend through the ``backend`` fixture (tests/conftest.py)."""

from __future__ import annotations

import asyncio

import pytest

from services.ports.backend import Backend
from services.ports.media import AlbumItem


def photo(message_id: int, caption: str = "") -> AlbumItem:
    return AlbumItem(message_id, f"file-{message_id}", f"uniq-{message_id}", caption, 1234, 1280, 960)


async def test_a_memo_is_kept_by_chat_kind_and_file(backend: Backend) -> None:
    memos = backend.memos
    assert await memos.get(1, "transcript", "u1") is None
    await memos.put(1, "transcript", "u1", "my order 7718 has not arrived")
    await memos.put(1, "note", "u1", "photo: a cracked stand")
    assert await memos.get(1, "transcript", "u1") == "my order 7718 has not arrived"
    assert await memos.get(1, "note", "u1") == "photo: a cracked stand"
    assert await memos.get(2, "transcript", "u1") is None, "chats are independent"
    await memos.put(1, "transcript", "u1", "replaced")
    assert await memos.get(1, "transcript", "u1") == "replaced"


async def test_an_album_counts_each_photo_once_and_is_taken_by_one_turn(backend: Backend) -> None:
    albums = backend.albums
    assert await albums.count(1, "g1") == 0
    assert [await albums.add(1, "g1", photo(n)) for n in (12, 10, 11)] == [1, 2, 3]
    assert await albums.add(1, "g1", photo(10, "redelivered")) == 3, "a redelivered photo is not added twice"
    assert await albums.count(1, "g2") == 0 and await albums.count(2, "g1") == 0
    taken = await albums.take(1, "g1", "turn-a")
    assert [item.message_id for item in taken] == [10, 11, 12]
    assert taken[0] == photo(10), "the first recording stands"
    assert await albums.take(1, "g1", "turn-b") == (), "another turn finds them taken"
    assert await albums.take(1, "g1", "turn-a") == taken, "the same turn, redelivered, gets them again"


async def test_a_photo_arriving_after_the_take_goes_to_the_next_turn(backend: Backend) -> None:
    albums = backend.albums
    await albums.add(1, "g1", photo(1))
    assert len(await albums.take(1, "g1", "turn-a")) == 1
    await albums.add(1, "g1", photo(2))
    assert [item.message_id for item in await albums.take(1, "g1", "turn-b")] == [2]
    assert [item.message_id for item in await albums.take(1, "g1", "turn-a")] == [1]


async def test_concurrent_takes_share_the_album_without_overlap(backend: Backend) -> None:
    albums = backend.albums
    for n in range(10):
        await albums.add(1, "g1", photo(n))
    results = await asyncio.gather(*(albums.take(1, "g1", f"turn-{k}") for k in range(5)))
    ids = [item.message_id for result in results for item in result]
    assert sorted(ids) == list(range(10)), "every photo taken exactly once"


async def test_an_album_id_that_could_forge_a_field_is_refused(backend: Backend) -> None:
    with pytest.raises(ValueError):
        await backend.albums.add(1, "g:1", photo(1))


async def test_forget_chat_removes_memos_and_taken_album_photos(backend: Backend) -> None:
    await backend.memos.put(1, "transcript", "u1", "the secret order 7718")
    await backend.memos.put(2, "transcript", "u1", "another chat")
    await backend.albums.add(1, "g1", photo(1, "the old album"))
    await backend.albums.take(1, "g1", "turn-a")
    await backend.albums.add(1, "g2", photo(5))
    await backend.albums.add(1, "g2", photo(6))
    await backend.albums.take(1, "g2", "turn-b")
    await backend.albums.add(1, "g2", photo(7, "queued after"))  # its update still waits in the queue
    await backend.forget_chat(1)
    assert await backend.memos.get(1, "transcript", "u1") is None
    assert await backend.albums.count(1, "g1") == 0
    assert await backend.albums.take(1, "g1", "turn-a") == ()
    assert await backend.albums.count(1, "g2") == 1, "a photo no turn took yet stays for its turn"
    assert [item.caption for item in await backend.albums.take(1, "g2", "turn-c")] == ["queued after"]
    assert await backend.memos.get(2, "transcript", "u1") == "another chat", "other chats stay"


async def test_an_album_recorded_before_a_forget_ran_is_still_one_turn(backend: Backend) -> None:
    """The intake records the album's photos as they arrive; a /forget queued before them runs first."""
    for n in (1, 2, 3):
        await backend.albums.add(1, "g1", photo(n))
    await backend.forget_chat(1)
    assert [item.message_id for item in await backend.albums.take(1, "g1", "turn-1")] == [1, 2, 3]

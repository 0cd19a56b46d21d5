from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.stubs.telegram_server import StubTelegram


@pytest.fixture
async def telegram() -> AsyncIterator[StubTelegram]:
    stub = StubTelegram()
    await stub.start()
    yield stub
    await stub.stop()

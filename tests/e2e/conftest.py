from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.e2e.processes import BotProcess


@pytest.fixture
async def processes() -> AsyncIterator[list[BotProcess]]:
    """Bot processes started by a test; any still running at the end are killed."""
    started: list[BotProcess] = []
    yield started
    for process in started:
        if process.process is not None and process.process.returncode is None:
            process.process.kill()
            await process.process.wait()

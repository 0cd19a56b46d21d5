"""The in-process backend, one module per contract as the Redis backend: the session store (store.py),
the rate limiter (ratelimit.py), handoffs (handoffs.py), knowledge gaps (gaps.py), media memos and
albums (media.py), the actions' ledger (actions.py), and InMemoryBackend that holds them
(backend.py). The names are re-exported here."""

from services.backends.memory.actions import InMemoryActionLedger
from services.backends.memory.backend import InMemoryBackend
from services.backends.memory.gaps import InMemoryKnowledgeGaps
from services.backends.memory.handoffs import InMemoryHandoffStore
from services.backends.memory.media import InMemoryAlbums, InMemoryMediaMemos
from services.backends.memory.ratelimit import InMemoryRateLimiter
from services.backends.memory.store import InMemorySessionStore

__all__ = [
    "InMemoryActionLedger",
    "InMemoryAlbums",
    "InMemoryBackend",
    "InMemoryHandoffStore",
    "InMemoryKnowledgeGaps",
    "InMemoryMediaMemos",
    "InMemoryRateLimiter",
    "InMemorySessionStore",
]

"""Session stores: a Protocol and one module per backend."""

from services.store.base import CommitResult, SessionStore
from services.store.memory import InMemorySessionStore
from services.store.redis import RedisSessionStore

__all__ = ["CommitResult", "InMemorySessionStore", "RedisSessionStore", "SessionStore"]

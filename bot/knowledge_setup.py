"""The knowledge part of the composition root: the embedder (with its shared or on-disk cache) and the
library of KNOWLEDGE_DIR, built and loaded before the bot serves; the knowledge packages are imported
only when the settings ask for them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from openai import AsyncOpenAI

from bot.cli.progress import progress_sink
from bot.metrics import count_embedding_request, watch_knowledge
from bot.settings import Settings
from services.backends.redis.backend import RedisBackend
from services.core.errors import ConfigurationError
from services.core.tokens import TokenCounter
from services.ports.backend import Backend

if TYPE_CHECKING:
    from services.knowledge.embedder import Embedder
    from services.knowledge.library import KnowledgeLibrary
    from services.knowledge.progress import ProgressSink
    from services.ports.embeddings import EmbeddingCache


def build_embedder(settings: Settings, backend: Backend) -> Embedder | None:
    """With ``EMBEDDING_MODEL``: embeddings on the chat model's endpoint, cached in Redis (shared by
    every worker) or, in-process, on disk in ``KNOWLEDGE_CACHE_DIR``."""
    options = settings.knowledge
    if not options.embedding_model:
        return None
    from services.backends.embeddings_disk import DiskEmbeddingCache
    from services.backends.redis.embeddings import RedisEmbeddingCache
    from services.knowledge.embedder import Embedder

    cache: EmbeddingCache = (
        RedisEmbeddingCache(redis=backend.redis, keys=backend.keys)
        if isinstance(backend, RedisBackend)
        else DiskEmbeddingCache(directory=Path(options.knowledge_cache_dir))
    )
    client = AsyncOpenAI(
        api_key=settings.llm.openai_api_key.get_secret_value().strip() or "unset",
        base_url=settings.llm.openai_base_url,
        timeout=settings.llm.openai_timeout_seconds,
        max_retries=0,
    )
    return Embedder(
        client=client,
        model=options.embedding_model,
        cache=cache,
        batch_size=options.embedding_batch_size,
        timeout_seconds=options.embedding_timeout_seconds,
        on_request=count_embedding_request,
    )


def build_knowledge(
    settings: Settings, backend: Backend, *, progress: ProgressSink | None = None
) -> KnowledgeLibrary | None:
    """With ``KNOWLEDGE_DIR``: the library, its full-text index built before the bot serves (its refresh
    loop, which also adds the vectors, is the caller's to run beside the bot); None otherwise (the
    knowledge packages are then never imported). ``progress``: told of every file read and batch
    embedded (default: a log line every few seconds, a bar when stderr is a terminal)."""
    options = settings.knowledge
    if not options.knowledge_dir:
        return None
    from services.knowledge.library import KnowledgeLibrary

    root = Path(options.knowledge_dir)
    if not root.is_dir():  # a typo or a volume not mounted: the bot would answer without its documents
        raise ConfigurationError(
            f"KNOWLEDGE_DIR={options.knowledge_dir} is not a folder ({root.absolute()}): fix the path (relative "
            "paths start at the working directory) or unset KNOWLEDGE_DIR to run without documents"
        )
    library = KnowledgeLibrary(
        root=root,
        counter=TokenCounter.for_encoding(settings.memory.tokenizer_encoding),
        passage_tokens=options.knowledge_passage_tokens,
        max_file_bytes=options.knowledge_max_file_bytes,
        min_score=options.knowledge_min_score,
        refresh_seconds=options.knowledge_refresh_seconds,
        embedder=build_embedder(settings, backend),
        min_similarity=options.embedding_min_similarity,
        progress=progress if progress is not None else progress_sink(),
        learned=backend.faq,
    )
    library.load()
    if not library.documents:
        raise ConfigurationError(
            f"KNOWLEDGE_DIR={options.knowledge_dir} holds no readable document: add Markdown, text, HTML or PDF "
            "files (the log above names each file skipped and why) or unset KNOWLEDGE_DIR"
        )
    watch_knowledge(library)
    return library

"""The threads media work runs in: images decoded and documents read off the event loop, in a pool
of their own, so files waiting for a decode or an extraction slot never hold the loop's default
executor (which DNS look-ups, the knowledge refresh and the disk caches share): one customer's
burst of files cannot stall another chat's answer."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from services.media.customer_documents import MAX_EXTRACTIONS
from services.media.images import MAX_CONCURRENT_DECODES

P = ParamSpec("P")
T = TypeVar("T")

MEDIA_THREADS = MAX_CONCURRENT_DECODES + MAX_EXTRACTIONS
"""As many threads as can work at once; more files wait in the pool's queue, holding no thread."""
_POOL = ThreadPoolExecutor(max_workers=MEDIA_THREADS, thread_name_prefix="media")


async def in_media_pool(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` in the media threads; the caller's loop stays free."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, functools.partial(function, *args, **kwargs))

"""Optional speed-ups from the ``fast`` extra (``pip install '.[fast]'``; the lock files install it):
uvloop as the event loop, orjson as aiogram's JSON codec, and hiredis, the C reply parser redis-py
uses by itself whenever it is installed. uvloop and orjson are used when installed;
``EVENT_LOOP=asyncio`` and ``JSON_CODEC=json`` turn them off, e.g. to measure what they bring
(``benchmarks/load.py --variant``). Besides, the start-up heap is frozen out of the cyclic garbage
collector's way (``GC_FREEZE=off`` turns that off). The three are bot.settings.RuntimeSettings, read
by each function when called (the event loop is chosen before the other settings matter)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Callable
from typing import Any

from bot.settings import RuntimeSettings

log = logging.getLogger(__name__)

JsonLoads = Callable[..., Any]
JsonDumps = Callable[..., str]


def install_event_loop(settings: RuntimeSettings | None = None) -> str:
    """Make uvloop the event loop of every loop created from now on, if installed and not turned off;
    returns the loop in use. Must run before the bot starts its loop."""
    if (settings or RuntimeSettings()).event_loop == "asyncio":
        return "asyncio"
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def json_codec(settings: RuntimeSettings | None = None) -> tuple[JsonLoads, JsonDumps, str]:
    """(loads, dumps, name) for aiogram's session: orjson if installed and not turned off."""
    if (settings or RuntimeSettings()).json_codec != "json":
        try:
            import orjson
        except ImportError:
            pass
        else:

            def dumps(value: Any) -> str:
                try:
                    return orjson.dumps(value).decode()
                except orjson.JSONEncodeError:  # e.g. a lone surrogate in a string
                    return json.dumps(value)

            def loads(raw: str | bytes) -> Any:
                try:
                    return orjson.loads(raw)
                except orjson.JSONDecodeError:
                    # orjson refuses lone UTF-16 surrogates ("\ud800"), which are valid JSON and which
                    # Telegram sends; the standard parser reads them (see bot/queueing/intake.py)
                    return json.loads(raw)

            return loads, dumps, "orjson"
    return json.loads, json.dumps, "json"


def freeze_startup_heap(settings: RuntimeSettings | None = None) -> int:
    """Collect once, then move every object alive now (imported modules, pydantic models and their
    validators, the wired services) into the collector's permanent generation; returns how many.
    Call it once, when the process is wired and about to serve. A full collection walks every tracked
    object, the start-up ones included, with the event loop stopped, and every turn in flight waits
    (``benchmarks/load.py --variant no-freeze:GC_FREEZE=off`` shows it in p99). Frozen objects are
    still freed by reference counting; only cycles among them stay. Logs the count."""
    if not (settings or RuntimeSettings()).gc_freeze:
        return 0
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up objects frozen out of the garbage collector's way: %d", frozen)
    return frozen

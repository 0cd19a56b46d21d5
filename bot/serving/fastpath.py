"""Optional speed-ups from the ``fast`` extra (``pip install '.[fast]'``; the lock files install it):
uvloop as the event loop, orjson as aiogram's JSON codec, and hiredis, the C reply parser redis-py
uses by itself whenever it is installed. uvloop and orjson are used when installed;
``EVENT_LOOP=asyncio`` and ``JSON_CODEC=json`` (environment variables) turn them off, e.g. to measure
what they bring (``benchmarks/load.py --variant``). Besides, the start-up heap is frozen out of the cyclic
garbage collector's way (``GC_FREEZE=off`` turns that off)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

JsonLoads = Callable[..., Any]
JsonDumps = Callable[..., str]


def install_event_loop() -> str:
    """Make uvloop the event loop of every loop created from now on, if installed and not turned off;
    returns the loop in use. Must run before the bot starts its loop."""
    if os.environ.get("EVENT_LOOP", "auto").lower() == "asyncio":
        return "asyncio"
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def json_codec() -> tuple[JsonLoads, JsonDumps, str]:
    """(loads, dumps, name) for aiogram's session: orjson if installed and not turned off."""
    if os.environ.get("JSON_CODEC", "auto").lower() != "json":
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


def freeze_startup_heap() -> int:
    """Collect once, then move every object alive now (imported modules, pydantic models and their
    validators, the wired services) into the collector's permanent generation; returns how many.
    Call it once, when the process is wired and about to serve. A full collection walks every tracked
    object, the start-up ones included, with the event loop stopped, and every turn in flight waits
    (``benchmarks/load.py --variant no-freeze:GC_FREEZE=off`` shows it in p99). Frozen objects are
    still freed by reference counting; only cycles among them stay. Logs the count."""
    if os.environ.get("GC_FREEZE", "on").lower() in ("off", "0", "false", "no"):
        return 0
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up objects frozen out of the garbage collector's way: %d", frozen)
    return frozen

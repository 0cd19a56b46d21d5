"""Optional speed-ups from the ``fast`` extra (``pip install '.[fast]'``): uvloop as the event loop and
orjson as aiogram's JSON codec. Each is used when installed; ``EVENT_LOOP=asyncio`` and
``JSON_CODEC=json`` (environment variables) turn them off, e.g. to measure what they bring
(benchmarks/RESULTS.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

JsonLoads = Callable[..., Any]
JsonDumps = Callable[..., str]


def running_as_bot() -> bool:
    """True in a ``python -m bot`` process (not in tests or tools that import the package)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "bot.__main__"


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
                return orjson.dumps(value).decode()

            return orjson.loads, dumps, "orjson"
    return json.loads, json.dumps, "json"

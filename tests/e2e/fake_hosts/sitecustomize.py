"""Put on a child's PYTHONPATH, answers the names of ``PROOF_FAKE_HOSTS`` (``name=address,...``) with
those addresses, as an /etc/hosts line would (the test machine's resolver knows no dotted name that
resolves to loopback, and /etc/hosts is not the tests' to edit); every other name goes to the system
resolver."""

from __future__ import annotations

import os
import socket
from typing import Any

_FAKE = dict(pair.split("=", 1) for pair in os.environ.get("PROOF_FAKE_HOSTS", "").split(",") if "=" in pair)
_system = socket.getaddrinfo


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.lower().rstrip(".") in _FAKE:
        return _system(_FAKE[name.lower().rstrip(".")], port, *args, **kwargs)
    return _system(host, port, *args, **kwargs)


if _FAKE:
    socket.getaddrinfo = _getaddrinfo

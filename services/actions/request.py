"""One request to the operator's API as the bot will send it, the hosts it may go to, and what came
back: the seam between rendering a tool's call (``catalog``) and sending it (``http``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

HttpKind = Literal["ok", "http_error", "timeout", "refused", "oversize", "unreachable"]


@dataclass(frozen=True, slots=True)
class HostRule:
    """A host the file declares: ``host`` as written (a name or an address), its port (None: the
    scheme's), and whether a private address or plain http is allowed for it (``private: true``)."""

    host: str
    port: int | None = None
    private: bool = False


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request ready to send: every placeholder filled (path and query parts percent-encoded, the
    body JSON-encoded), secrets only in ``headers`` (never logged: ``redacted`` is what a log shows)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    secret_headers: frozenset[str] = frozenset()
    """Header names whose values came from ``${ENV}``: never in a log line, an error or a result."""


@dataclass(frozen=True, slots=True)
class HttpResult:
    """What sending gave: ``ok`` (2xx, the whole body), ``http_error`` (another status, a 3xx
    redirect included: never followed; or a body that cannot be decoded), ``timeout``, ``refused``
    (not sent: an undeclared host, a forbidden address or URL), ``oversize`` (the body passed
    ACTIONS_MAX_RESPONSE_BYTES), ``unreachable`` (DNS, connection or TLS failure). ``reason`` is
    short, for the model and the log, and never holds a secret."""

    kind: HttpKind
    status: int | None = None
    body: bytes = b""
    reason: str = ""
    seconds: float = 0.0
    content_type: str = ""

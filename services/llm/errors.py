"""The model provider's failures as the engine's LLMError kinds, classified once at the client's edge.

openai's status errors keep the provider's HTTP status and Retry-After; whatever else can break while
an answer is read (the SDK's bare json.JSONDecodeError on a malformed chunk, a body that is not
UTF-8, the transport's errors when a connection is cut mid-answer) is LLMIncompleteReplyError."""

from __future__ import annotations

import importlib
import json
import socket
import ssl

import aiohttp
import openai

from services.core.errors import (
    LLMBadReplyError,
    LLMConfigurationError,
    LLMError,
    LLMIncompleteReplyError,
    LLMRequestRejectedError,
    LLMUnavailableError,
)
from services.core.retry import retry_after_of

_CONFIGURATION_STATUSES = frozenset({401, 402, 403, 404})
_REJECTED_STATUSES = frozenset({400, 409, 413, 422})
_CONFIGURATION_CODES = frozenset({"invalid_api_key", "model_not_found", "insufficient_quota"})
"""Error codes that name the bot's own setup, whatever the status (some providers send them with 400)."""


def translate_openai_error(exc: openai.OpenAIError) -> LLMError:
    """Map an openai exception to the engine's error kinds (the provider's Retry-After kept)."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        what = f"LLM provider answered HTTP {status} ({type(exc).__name__}{_code_of(exc)})"
        if status in _CONFIGURATION_STATUSES or (status < 500 and exc.code in _CONFIGURATION_CODES):
            return LLMConfigurationError(what, status=status)
        if status == 429 or status >= 500 or status == 408:
            return LLMUnavailableError(what, status=status, retry_after=retry_after_of(exc.response.headers))
        if status in _REJECTED_STATUSES:
            return LLMRequestRejectedError(what, status=status)
        return LLMBadReplyError(what, status=status)
    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        why = connect_failure(exc)
        return LLMUnavailableError(f"LLM provider unreachable: {type(exc).__name__}{f' ({why})' if why else ''}")
    if isinstance(exc, openai.APIResponseValidationError):
        return LLMIncompleteReplyError(f"LLM provider sent an unreadable answer: {type(exc).__name__}")
    return LLMUnavailableError(f"LLM call failed: {type(exc).__name__}")


def connect_failure(exc: BaseException) -> str | None:
    """Why no connection was made, read from the exception chain (never its text: it may hold a URL):
    the aiohttp transport reports a refused connection as APITimeoutError, which misleads."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "no such host"
        seen = seen.__cause__ or seen.__context__
    return None


def _code_of(exc: openai.APIStatusError) -> str:
    return f", code {exc.code}" if isinstance(exc.code, str) and exc.code else ""


def _http_errors(*names: str) -> list[type[BaseException]]:
    """Error classes of httpx2 (openai 3) and httpx (older openai), those installed."""
    errors: list[type[BaseException]] = []
    for module_name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        errors.extend(getattr(module, name) for name in names)
    return errors


_CUT_ANSWER: tuple[type[BaseException], ...] = (
    aiohttp.ClientPayloadError,
    *_http_errors("ReadError", "RemoteProtocolError"),
)
"""Under an openai.APIConnectionError: the connection broke while the answer was being read."""


READ_FAILURES: tuple[type[BaseException], ...] = (
    json.JSONDecodeError,
    UnicodeDecodeError,
    aiohttp.ClientError,
    ConnectionError,
    ssl.SSLError,
    *_http_errors("HTTPError"),
)
"""Raised past the SDK while an answer is read: each means the answer did not arrive whole."""


def incomplete_reply(exc: BaseException, *, mid_answer: bool) -> LLMError | None:
    """The engine's error for what a call raised, None when it is not a provider failure (a bug). Once
    the answer began (``mid_answer``), a connection error of the SDK is a cut answer, not "unreachable"."""
    what = f"{type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(exc, READ_FAILURES):
        return LLMIncompleteReplyError(f"the LLM answer could not be read whole ({what})")
    if isinstance(exc, openai.OpenAIError):
        cut = isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, _CUT_ANSWER)
        if cut or (mid_answer and not isinstance(exc, openai.APIStatusError)):
            return LLMIncompleteReplyError(f"the LLM answer broke off ({what})")
        return translate_openai_error(exc)
    return None

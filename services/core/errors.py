"""The one exception hierarchy of the conversation engine.

Library errors (openai, redis, pydantic) are translated into these at the edge of the service that
calls the library; the bot's error router turns each kind into user-facing text.
"""

from __future__ import annotations


class SupportBotError(Exception):
    """Base class for every error the engine raises on purpose."""


class TransientError(SupportBotError):
    """Something outside the bot is unavailable for now (Redis, the network): the work is retried with
    backoff, never answered as a failure and never dropped."""


class ConfigurationError(SupportBotError):
    """A setting or a bundled file is unusable (bad tokenizer file, unknown encoding...)."""


class MessageTooLongError(SupportBotError):
    """A required part of the prompt alone does not fit the input budget."""

    def __init__(self, *, tokens: int, limit: int, unit: str = "tokens") -> None:
        super().__init__(f"message too long: {tokens} {unit}, limit {limit}")
        self.tokens = tokens
        self.limit = limit
        self.unit = unit


class CorruptHistoryError(SupportBotError):
    """Stored history does not alternate user/assistant in whole turns."""


class LLMError(SupportBotError):
    """Base class for failures of a language-model call. ``status``: the provider's HTTP status (None
    when no HTTP answer came); ``requests``: how many model requests the failed call made."""

    def __init__(self, message: str, *, status: int | None = None, requests: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.requests = requests


class LLMUnavailableError(LLMError, TransientError):
    """The provider could not be reached, timed out, or kept answering 429/5xx. ``retry_after``: the
    seconds the provider asked to wait (Retry-After / retry-after-ms), None when it did not say."""

    def __init__(
        self, message: str, *, status: int | None = None, requests: int = 1, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, requests=requests)
        self.retry_after = retry_after


class LLMIncompleteReplyError(LLMUnavailableError):
    """The provider's answer could not be read whole: a stream that ended without a finish reason, a
    chunk or body that is not valid JSON, a connection cut mid-answer. Never sent as an answer and
    never stored; retried like any provider failure."""


class LLMConfigurationError(LLMUnavailableError):
    """The provider refuses the bot, not the question: a rejected or revoked key (401), no access (403),
    a model it does not know (404), no credit or quota (402, 429 ``insufficient_quota``). An operator
    must act: logged as an error, counted, /readyz degraded; the customer's question waits."""


class LLMReplyTruncatedError(LLMError):
    """The model stopped because of the output-token limit (finish_reason == "length")."""


class LLMBadReplyError(LLMError):
    """The model answered with nothing usable (empty text, refusal, content filter)."""


class LLMRequestRejectedError(LLMBadReplyError):
    """The provider refused the request itself as invalid (400, 409, 413, 422): e.g. a parameter this
    endpoint does not support, or a prompt over the model's context."""


class ResponseFormatRejectedError(LLMRequestRejectedError):
    """The endpoint refused the summary call's ``response_format``: an HTTP error (4xx or 5xx) whose body
    names it (services.llm.dialect.refusal_of). Never retried: the next format is tried."""


class SummaryError(SupportBotError):
    """The summarizer failed or returned something that is not a valid summary."""


class SummaryUnavailableError(SummaryError, TransientError):
    """A handoff transcript could not be folded into the summary: the ending is retried (not done
    without it)."""


class StoreError(SupportBotError):
    """The session store failed."""


class StoreUnavailableError(StoreError, TransientError):
    """The store (Redis) could not be reached or timed out."""


class ConcurrentUpdateError(StoreError):
    """The session changed since it was loaded; the write was refused and nothing was written."""


class CorruptSessionError(StoreError):
    """A stored session cannot be decoded (damaged entry, written by another release): it is
    quarantined, never retried."""


class LeaseLostError(SupportBotError):
    """This worker no longer holds the chat's lease: the write was refused (fencing) and nothing may be
    sent; the turn is abandoned to the worker that took the chat over."""


class MediaError(SupportBotError):
    """A photo, voice note or document the bot cannot use: too big or too long, unreadable, of a kind
    it does not read, or refused by the model's endpoint. ``kind``: image, voice or document;
    ``reason``: what the customer is told (services.core.media_reasons); ``limit``: the limit it broke, if
    any. Answered, never retried, nothing stored."""

    def __init__(self, message: str, *, kind: str, reason: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.reason = reason
        self.limit = limit

"""When a failed update is tried again, and when it is given up. Stateless: everything it reads is on
the item's record (failures, how long it has been failing, model requests, vanished attempts), so any
worker continues where another stopped. Transient failures (Redis, the network, Telegram 5xx/429, the
provider) are retried with backoff for up to ``give_up_seconds``, others ``max_attempts`` times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.core.errors import LLMConfigurationError, LLMUnavailableError
from services.ports.queue import QueueItem

MAX_BACKOFF = 30.0
BASE_BACKOFF = 0.2
VANISHED_ALLOWANCE = 2
"""Attempts that vanish (worker killed, or paused past its lease) are also what an ordinary crash or
failover looks like, so they are allowed a little more often than outright failures."""
Outcome = Literal["done", "retry", "transient", "abandon"]
"""How one attempt at an item ended: processed, failed, failed transiently, or its lease was lost."""
GiveUpReason = tuple[str, bool]
"""(why, whether its customer is still to be told)."""


@dataclass(frozen=True)
class AttemptRules:
    """The limits of one worker (``max_attempts``, ``give_up_seconds``, LLM_MAX_REQUESTS_PER_QUESTION)."""

    max_attempts: int = 3
    give_up_seconds: float = 600.0
    max_model_requests: int = 10
    download_give_up_seconds: float = 60.0
    """A customer's file that cannot be downloaded is retried this long, not ``give_up_seconds``: the
    chat's later messages wait behind it (MEDIA_DOWNLOAD_GIVE_UP_SECONDS)."""

    def give_up_reason(self, item: QueueItem) -> GiveUpReason | None:
        """Why ``item`` is given up now, and whether its customer is still to be told (a customer whose
        update failed outright was told on its final attempt), or None."""
        if item.failures >= self.max_attempts:
            return f"failed {item.failures} times", False
        if item.vanished_attempts >= self.max_attempts + VANISHED_ALLOWANCE:
            return f"{item.vanished_attempts} attempts ended with their worker dead or cut off", True
        if item.model_requests >= self.max_model_requests:
            return f"the model was asked {item.model_requests} times (LLM_MAX_REQUESTS_PER_QUESTION)", True
        if item.transient_failures and item.failing_for + item.retry_in > self.give_up_seconds:
            waited = f"transient failures for {item.failing_for:.0f}s ({item.transient_failures} attempts)"
            return (
                waited
                if item.failing_for > self.give_up_seconds
                else f"{waited}; the next try is past the give-up time"
            ), True
        return None

    def next_try(
        self, item: QueueItem, outcome: Outcome, failure: BaseException | None, *, requests_made: int = 0
    ) -> tuple[int, float]:
        """(model requests the failed attempt made, seconds before the next): the backoff grows with how
        long the item has been failing (stateless: any worker continues it), never sooner than the
        provider's Retry-After. A provider that refuses the bot (its key, its quota) is not counted
        against the question: the question waits for the operator's fix, up to the give-up time."""
        if outcome == "transient":
            wait = min(max(BASE_BACKOFF, item.failing_for), MAX_BACKOFF, max(self.give_up_seconds, BASE_BACKOFF))
        else:
            wait = min(BASE_BACKOFF * 2**item.failures, MAX_BACKOFF)
        requests = 0 if isinstance(failure, LLMConfigurationError) else requests_made
        if isinstance(failure, LLMUnavailableError) and failure.retry_after is not None:
            wait = max(wait, failure.retry_after)
        return requests, wait

    @staticmethod
    def provider_wait(failure: BaseException | None) -> float:
        """The wait the provider asked for (Retry-After) when an attempt was ``failure``, also under an
        error raised while handling it (a lease found lapsed as the 429 was being told): 0 if none."""
        seen, hops = failure, 0
        while seen is not None and hops < 8:
            if isinstance(seen, LLMUnavailableError) and seen.retry_after is not None:
                return seen.retry_after
            seen, hops = seen.__cause__ or seen.__context__, hops + 1
        return 0.0

    def is_last_download_attempt(self, item: QueueItem) -> bool:
        """Whether a download failing in the attempt about to start gives the item up (the handler then
        asks the customer to send the file again, and the item is done): it has failed transiently for
        ``download_give_up_seconds`` already."""
        return item.transient_failures > 0 and item.failing_for >= self.download_give_up_seconds

    def is_final_attempt(self, item: QueueItem) -> bool:
        """Whether the attempt about to start is the item's last before it is given up as failed."""
        return item.failures + 1 >= self.max_attempts

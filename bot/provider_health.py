"""Whether the model provider accepts the bot: a refusal (LLMConfigurationError: key, access, model,
quota) is an outage only an operator can end, so it is an ERROR line naming what to fix (once a minute
per cause), the ``sb_llm_provider_refusing`` gauge and /readyz's ``model_provider`` check. The next
request the provider accepts clears them (the LLM client reports it); while refused, a 1-token probe
(``probe_while_refused``) asks every LLM_PROBE_INTERVAL_SECONDS, so a fix shows without customer
traffic. One watch per application, built with it (``bot.factory.build_app``) and handed to the
LLM client, the summarizer, the error handler, /readyz and the probe."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from prometheus_client import Counter, Gauge

from bot.metrics import LLM_PROVIDER_REFUSALS, LLM_PROVIDER_REFUSING
from services.core.errors import LLMConfigurationError, LLMError
from services.llm.client import Call, LLMClient

log = logging.getLogger(__name__)

LOG_EVERY_SECONDS = 60.0

FIXES = {
    401: "the provider rejected OPENAI_API_KEY (wrong, revoked or expired): set a valid key",
    402: "the provider account has no credit: add credit or change OPENAI_API_KEY",
    403: "OPENAI_API_KEY has no access to this model or endpoint: check the key's project and permissions",
    404: "the provider does not know the model or endpoint: check OPENAI_MODEL and OPENAI_BASE_URL",
    429: "the provider account's quota is used up (insufficient_quota): raise the quota or add credit",
}


class ProviderWatch:
    """Refusals per call kind ("chat", "summary"); ``healthy`` is False while any is refused."""

    def __init__(
        self,
        *,
        refusing: Gauge = LLM_PROVIDER_REFUSING,
        refusals: Counter = LLM_PROVIDER_REFUSALS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._refusing = refusing
        self._refusals = refusals
        self._clock = clock
        self._refused: dict[Call, int | None] = {}
        self._logged: dict[tuple[Call, int | None], float] = {}

    @property
    def healthy(self) -> bool:
        return not self._refused

    @property
    def refusing(self) -> tuple[Call, ...]:
        """The call kinds refused now."""
        return tuple(self._refused)

    def refused(self, call: Call, status: int | None, detail: str) -> None:
        """The provider refused a ``call``: count it, raise the gauge, log what to fix (throttled)."""
        self._refused[call] = status
        self._refusing.labels(call).set(1)
        self._refusals.labels(call, str(status)).inc()
        now = self._clock()
        last = self._logged.get((call, status))
        if last is None or now - last >= LOG_EVERY_SECONDS:
            self._logged[(call, status)] = now
            fix = FIXES.get(status or 0, "check OPENAI_API_KEY, OPENAI_MODEL and OPENAI_BASE_URL")
            meanwhile = "questions wait"
            if call == "summary":
                fix = fix.replace("OPENAI_MODEL", "SUMMARY_MODEL (else OPENAI_MODEL)")
                meanwhile = "old turns are kept by their identifiers only"
            log.error("the model provider refuses the bot's %s calls (%s): %s; %s", call, detail, fix, meanwhile)

    def accepted(self, call: Call) -> None:
        """A ``call`` went through: the refusal, if any, is over."""
        if self._refused.pop(call, "none") != "none":
            log.warning("the model provider accepts the bot's %s calls again", call)
            self._logged = {cause: at for cause, at in self._logged.items() if cause[0] != call}
        self._refusing.labels(call).set(0)


async def probe_while_refused(watch: ProviderWatch, llm: LLMClient, *, every: float) -> None:
    """Every ``every`` seconds, each refused call kind is probed (``LLMClient.probe``): accepted clears
    it, refused keeps it (and counts); anything else (429, 5xx, unreachable) says nothing either way."""
    while True:
        await asyncio.sleep(every)
        for call in watch.refusing:
            try:
                await llm.probe(call)
            except LLMConfigurationError as exc:
                watch.refused(call, exc.status, str(exc))
            except LLMError as exc:
                log.info("model provider probe of %s calls: no verdict (%s)", call, exc)
            else:
                watch.accepted(call)

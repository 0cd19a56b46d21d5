"""Folds old turns into the structured running summary with a separate LLM call (its response format
detected per endpoint: services.memory.summary_format), or, while no summary can be made,
extractively: the identifiers of the folded turns kept as key facts."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prompts import PromptTemplate
from prompts.summary import PLAIN_JSON
from services.core.errors import LLMConfigurationError, LLMError, ResponseFormatRejectedError, SummaryError
from services.core.prompt_format import ACTIONS_TAG, fence, summary_block, wrap
from services.core.records import Completion, PromptPart, StoredMessage, Usage
from services.core.summary_state import SummaryFormat, SummaryState, merge_summaries, render_summary
from services.core.tokens import TokenCounter
from services.memory.breaker import CircuitBreaker
from services.memory.identifiers import Identifier, extract_identifiers, mentions, restore_identifiers, summary_text
from services.memory.summary_format import FormatChoice, FormatSetting, read_summary

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    summary: SummaryState
    block_tokens: int
    """Tokens of the summary block as it is sent in the chat prompt (framing included)."""
    usage: list[Usage] = field(default_factory=list)
    restored: list[Identifier] = field(default_factory=list)
    calls: int = 0


def with_action_lines(summary: SummaryState, messages: Sequence[StoredMessage]) -> SummaryState:
    """``summary`` with the lines of the actions the folded turns took in ``actions_taken`` (kept by
    code, whatever the summarizer wrote: an order's status or a cancellation survives compaction)."""
    kept = {" ".join(item.casefold().split()) for item in summary.actions_taken}
    lines: list[str] = []
    for line in (line for message in messages for line in message.actions):
        key = " ".join(line.casefold().split())
        if key and key not in kept:
            kept.add(key)
            lines.append(line.strip())
    if not lines:
        return summary
    return summary.model_copy(update={"actions_taken": [*summary.actions_taken, *lines]})


class SummaryModel(Protocol):
    """The summary call of the language model (services.llm.client.LLMClient)."""

    async def summarize(
        self, messages: Sequence[PromptPart], *, schema: dict[str, Any], response_format: SummaryFormat | None = None
    ) -> Completion: ...


class Summarizer:
    """Previous summary + the turns being folded → new structured summary (validated, merged, with
    every identifier of the folded turns guaranteed present, and re-compressed if over its cap).
    Every model request is reported to ``on_attempt`` with its outcome (ok, invalid, rejected,
    failed); a refusal of the bot (LLMConfigurationError: key, access, model, quota) also to
    ``on_refused`` (status, detail) and each answer to ``on_accepted``, so the operator sees it as
    for chat calls; every fold's success or failure to ``breaker``."""

    def __init__(
        self,
        *,
        llm: SummaryModel,
        counter: TokenCounter,
        prompt: PromptTemplate,
        max_tokens: int,
        instruction_role: str = "system",
        response_format: FormatSetting = "auto",
        breaker: CircuitBreaker | None = None,
        on_attempt: Callable[[str], None] | None = None,
        on_refused: Callable[[int | None, str], None] | None = None,
        on_accepted: Callable[[], None] | None = None,
    ) -> None:
        self._llm = llm
        self._counter = counter
        self._prompt = prompt
        self._max_tokens = max_tokens
        self._instruction_role = instruction_role
        self.formats = FormatChoice(response_format)
        self.breaker = breaker or CircuitBreaker()
        self.on_attempt: Callable[[str], None] = on_attempt or (lambda _outcome: None)
        self.on_refused: Callable[[int | None, str], None] = on_refused or (lambda _status, _detail: None)
        self.on_accepted: Callable[[], None] = on_accepted or (lambda: None)

    def block_part(self, summary: SummaryState, *, tokens: int | None = None) -> PromptPart:
        """The summary as the user-role data block of the chat prompt (``tokens``: its known cost)."""
        content = summary_block(render_summary(summary))
        if tokens is None:
            tokens = self._counter.count_message("user", content)
        return PromptPart("user", content, tokens)

    async def fold(self, previous: SummaryState | None, messages: Sequence[StoredMessage]) -> SummaryOutcome:
        """Raises SummaryError if the model fails or answers without a valid summary twice. Any
        exception is a failure for the breaker; a cancelled fold has no outcome (its trial is released)."""
        try:
            outcome = await self._fold(previous, messages)
        except Exception:
            self.breaker.failed()
            raise
        except BaseException:
            self.breaker.release()
            raise
        self.breaker.succeeded()
        return outcome

    def extractive(self, previous: SummaryState | None, messages: Sequence[StoredMessage]) -> SummaryOutcome:
        """No model: the previous summary plus each identifier of ``messages`` (order numbers, e-mails...)
        as a key fact with its phrase, bare if over the cap (then the oldest facts go first). A later
        real summary starts from it."""
        base = with_action_lines(previous or SummaryState(), messages)
        summary, restored = restore_identifiers(base, messages=messages)
        block = self.block_part(summary)
        if block.tokens > self._max_tokens:
            facts, text = list(base.key_facts), summary_text(base)
            for message in messages:
                for identifier in extract_identifiers(message.content):
                    if not mentions(text, identifier.value):
                        who = "customer" if message.role == "user" else "support"
                        facts.append(f"{identifier.value} ({who})")
                        text += "\n" + identifier.value
            summary = base.model_copy(update={"key_facts": facts})
            block = self.block_part(summary)
            while block.tokens > self._max_tokens and len(facts) > 1:
                facts = facts[1:]
                summary = base.model_copy(update={"key_facts": facts})
                block = self.block_part(summary)
            log.warning("extractive summary over its cap: kept the identifiers only, the newest that fit")
        return SummaryOutcome(summary, block.tokens, [], restored, 0)

    async def _fold(self, previous: SummaryState | None, messages: Sequence[StoredMessage]) -> SummaryOutcome:
        usage: list[Usage] = []
        fresh = await self._ask(previous, messages, usage)
        merged = with_action_lines(merge_summaries(previous, fresh), messages)
        summary, restored = restore_identifiers(merged, messages=messages, previous=previous)
        calls = len(usage) or 1
        block = self.block_part(summary)
        if block.tokens > self._max_tokens:
            summary, block, more_restored = await self._recompress(summary, usage)
            restored += more_restored
            calls = len(usage) or calls
        if restored:
            log.info("summary restored %d identifier(s) the summarizer dropped", len(restored))
        return SummaryOutcome(summary, block.tokens, usage, restored, calls)

    async def _recompress(
        self, summary: SummaryState, usage: list[Usage]
    ) -> tuple[SummaryState, PromptPart, list[Identifier]]:
        try:
            shorter = await self._ask(summary, (), usage, compress=True)
        except SummaryError as exc:
            log.warning("summary over its cap and re-compression failed (%s); keeping it whole", exc)
            return summary, self.block_part(summary), []
        shorter, restored = restore_identifiers(shorter, previous=summary)
        # what was done stays on record (the actions' lines above all): re-compression never drops it
        shorter = shorter.model_copy(update={"actions_taken": merge_summaries(summary, shorter).actions_taken})
        block = self.block_part(shorter)
        if block.tokens > self._max_tokens:
            log.warning("summary still %d tokens after re-compression (cap %d)", block.tokens, self._max_tokens)
        return shorter, block, restored

    def request_messages(
        self, previous: SummaryState | None, messages: Sequence[StoredMessage], compress: bool, plain: bool = False
    ) -> list[PromptPart]:
        """The summarizer's prompt: its instruction, then previous summary and turns as data blocks
        (``plain``: the instruction also spells out the JSON, for endpoints without structured output)."""
        instruction = self._prompt.render(max_tokens=str(self._max_tokens))
        if plain:
            instruction += "\n" + PLAIN_JSON
        if compress:
            instruction += (
                "\nThere are no new turns: the previous summary is over its size limit. Rewrite it "
                "shorter: merge duplicates, drop what is settled, keep every identifier and number."
            )
        turns = "\n".join(
            wrap("customer_message" if m.role == "user" else "support_reply", m.content)
            + (f"\n{wrap(ACTIONS_TAG, chr(10).join(m.actions))}" if m.actions else "")
            for m in messages
        )
        previous_json = previous.to_json() if previous is not None else "{}"
        body = f"{wrap('previous_summary', previous_json)}\n{fence('conversation_turns', turns)}"
        return [PromptPart(self._instruction_role, instruction, 0), PromptPart("user", body, 0)]

    async def _ask(
        self,
        previous: SummaryState | None,
        messages: Sequence[StoredMessage],
        usage: list[Usage],
        *,
        compress: bool = False,
    ) -> SummaryState:
        """One summary: a format the endpoint refuses (an HTTP error naming it) or ignores (no bare JSON
        back) is given up for the next one (auto only); an invalid answer in the same format is asked
        again once."""
        problem, invalid = "", 0
        while True:
            kind = self.formats.current
            request = self.request_messages(previous, messages, compress, plain=kind == "plain")
            try:
                completion = await self._llm.summarize(
                    request, schema=SummaryState.json_schema_for_llm(), response_format=kind
                )
            except ResponseFormatRejectedError as exc:
                self.on_attempt("rejected")
                if self.formats.downgrade(kind, f"HTTP {exc.status} naming response_format"):
                    continue
                raise SummaryError(f"summarizer call rejected: {exc}") from exc
            except LLMError as exc:
                self.on_attempt("failed")
                if isinstance(exc, LLMConfigurationError):
                    self.on_refused(exc.status, str(exc))
                raise SummaryError(f"summarizer call failed: {exc}") from exc
            self.on_accepted()
            usage.append(completion.usage or Usage())
            summary, bare, problem = read_summary(completion.text)
            downgraded = not bare and self.formats.downgrade(kind, "the reply is not bare JSON")
            self.on_attempt("ok" if summary is not None else "invalid")
            if summary is not None:
                if not downgraded:
                    self.formats.confirm()
                return summary
            if downgraded:
                continue
            invalid += 1
            log.warning("summarizer returned no valid summary (%s)", problem)
            if invalid >= 2:
                raise SummaryError(f"summarizer returned no valid summary twice ({problem})")

"""Folds old turns into the structured running summary with a separate LLM call."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from prompts import PromptTemplate
from services.engine.identifiers import Identifier, restore_identifiers
from services.engine.models import PromptPart, StoredMessage, Usage
from services.engine.prompt_format import fence, summary_block, wrap
from services.engine.summary_state import SummaryState, merge_summaries, render_summary
from services.engine.tokens import TokenCounter
from services.errors import LLMError, SummaryError
from services.ports.chat_model import ChatModel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    summary: SummaryState
    block_tokens: int
    """Tokens of the summary block as it is sent in the chat prompt (framing included)."""
    usage: list[Usage] = field(default_factory=list)
    restored: list[Identifier] = field(default_factory=list)
    calls: int = 0


class Summarizer:
    """Previous summary + the turns being folded → new structured summary (validated, merged, with
    every identifier of the folded turns guaranteed present, and re-compressed if over its cap)."""

    def __init__(
        self,
        *,
        llm: ChatModel,
        counter: TokenCounter,
        prompt: PromptTemplate,
        max_tokens: int,
        instruction_role: str = "system",
    ) -> None:
        self._llm = llm
        self._counter = counter
        self._prompt = prompt
        self._max_tokens = max_tokens
        self._instruction_role = instruction_role

    def block_part(self, summary: SummaryState, *, tokens: int | None = None) -> PromptPart:
        """The summary as the user-role data block of the chat prompt (``tokens``: its known cost)."""
        content = summary_block(render_summary(summary))
        if tokens is None:
            tokens = self._counter.count_message("user", content)
        return PromptPart("user", content, tokens)

    async def fold(self, previous: SummaryState | None, messages: Sequence[StoredMessage]) -> SummaryOutcome:
        """Raises SummaryError if the model fails or answers with invalid JSON twice."""
        usage: list[Usage] = []
        fresh = await self._ask(previous, messages, usage)
        merged = merge_summaries(previous, fresh)
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
        block = self.block_part(shorter)
        if block.tokens > self._max_tokens:
            log.warning("summary still %d tokens after re-compression (cap %d)", block.tokens, self._max_tokens)
        return shorter, block, restored

    def request_messages(
        self, previous: SummaryState | None, messages: Sequence[StoredMessage], compress: bool
    ) -> list[PromptPart]:
        """The summarizer's prompt: its instruction, then previous summary and turns as data blocks."""
        instruction = self._prompt.render(max_tokens=str(self._max_tokens))
        if compress:
            instruction += (
                "\nThere are no new turns: the previous summary is over its size limit. Rewrite it "
                "shorter: merge duplicates, drop what is settled, keep every identifier and number."
            )
        turns = "\n".join(
            wrap("customer_message" if m.role == "user" else "support_reply", m.content) for m in messages
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
        request = self.request_messages(previous, messages, compress)
        problem = ""
        for _attempt in range(2):
            try:
                completion = await self._llm.summarize(request, schema=SummaryState.json_schema_for_llm())
            except LLMError as exc:
                raise SummaryError(f"summarizer call failed: {exc}") from exc
            if completion.usage is not None:
                usage.append(completion.usage)
            else:
                usage.append(Usage())
            try:
                return SummaryState.model_validate(json.loads(completion.text))
            except (json.JSONDecodeError, ValidationError, TypeError) as exc:
                problem = f"{type(exc).__name__}: {str(exc)[:200]}"
                log.warning("summarizer returned invalid JSON (%s)", problem)
        raise SummaryError(f"summarizer returned invalid JSON twice ({problem})")

"""The chat model contract: the language model as the engine uses it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from services.core.records import Completion, OnDelta, PromptPart


class ChatModel(Protocol):
    """The language model as the engine uses it (services.llm.client.LLMClient over AsyncOpenAI)."""

    async def chat(
        self,
        messages: Sequence[PromptPart],
        *,
        on_delta: OnDelta | None = None,
        tools: Sequence[dict[str, Any]] = (),
        chat_id: int | None = None,
        tool_choice: str | None = None,
    ) -> Completion:
        """The reply to ``messages`` (or calls of ``tools``: ``tool_choice`` "none" asks for text);
        raises LLMError subclasses. ``chat_id`` lets the provider keep one chat's prompts on one cache
        (prompt_cache_key)."""
        ...

    async def describe(self, messages: Sequence[PromptPart], *, max_tokens: int) -> Completion:
        """A short plain completion of the chat model (an image's note); not streamed, no tools."""
        ...

    async def summarize(self, messages: Sequence[PromptPart], *, schema: dict[str, Any]) -> Completion:
        """A structured (JSON) completion for the summarizer."""
        ...

    async def close(self) -> None: ...

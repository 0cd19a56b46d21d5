"""What a sequence of prompts costs with provider prompt caching.

Each prompt's cacheable part is its longest common prefix (in tokens, laid out as the chat API bills
messages) with the previous prompt of the same sequence, counted as cached if it reaches 1024 tokens,
in OpenAI's granularity (1024 + k·128; see ``tests.stubs.prompt_cache``). Effective input cost =
uncached + cached × price ratio, in tokens at the full input price."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.stubs.prompt_cache import Message, PromptTokens, cacheable, common_prefix

RATIOS = (0.5, 0.1)


@dataclass
class CacheMeter:
    """Feed it the prompts of one chat (or of one chat's summary calls) in order."""

    tokens: PromptTokens
    billed: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    _previous: array[int] = field(default_factory=lambda: array("i"))

    def add(self, messages: Iterable[Message]) -> tuple[int, int]:
        prompt = self.tokens.prompt(messages)
        cached = cacheable(common_prefix(self._previous, prompt))
        self._previous = prompt
        self.billed.append(self.tokens.billed(prompt))
        self.cached.append(cached)
        return self.billed[-1], cached

    @property
    def total(self) -> int:
        return sum(self.billed)

    @property
    def total_cached(self) -> int:
        return sum(self.cached)

    def effective(self, ratio: float) -> float:
        """Input cost in full-price tokens: uncached + cached × ratio."""
        return self.total - self.total_cached + self.total_cached * ratio

    @property
    def cached_share(self) -> float:
        return self.total_cached / self.total if self.total else 0.0

"""Prompt-prefix caching the way OpenAI reports it, for the stub model server and the token benchmark.

A prompt is laid out as tokens the way the chat API bills it: per message ``<start> role <sep>
content <end>`` (3 framing tokens + role + content, as ``services.core.tokens`` counts), then 3 tokens of
reply primer. OpenAI caches prompts of at least 1024 tokens, in blocks: a hit covers the first 1024
tokens plus whole 128-token blocks after them (``cached_tokens`` is always 0 or 1024 + k·128). The
stub follows that rule exactly (not the "exact prefix" alternative), so its figures are never more
generous than a real provider's."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Sequence

from services.core.tokens import REPLY_PRIMER_TOKENS, TokenCounter

MIN_CACHED = 1024
BLOCK = 128
# Framing token ids outside o200k's vocabulary (they only need to differ from real tokens).
_START, _SEP, _END = 1_000_001, 1_000_002, 1_000_003

ImagePart = tuple[int, int]
"""An image in a prompt: a token id standing for its bytes, and how many tokens the image costs."""
Content = str | Sequence[str | ImagePart]
"""A message's content: text, or text and image parts in order (the stub model server's image input)."""
Message = tuple[str, Content]


def cacheable(common_prefix_tokens: int) -> int:
    """What a provider reports as cached for a prefix of this many tokens already seen."""
    if common_prefix_tokens < MIN_CACHED:
        return 0
    return MIN_CACHED + (common_prefix_tokens - MIN_CACHED) // BLOCK * BLOCK


class PromptTokens:
    """Token ids of chat prompts (per-message encodings are memoized: history repeats every turn)."""

    def __init__(self, counter: TokenCounter | None = None, *, memo_size: int = 20_000) -> None:
        self._counter = counter or TokenCounter.for_encoding()
        self._memo: dict[str, list[int]] = {}
        self._memo_size = memo_size

    def _encode(self, text: str) -> list[int]:
        tokens = self._memo.get(text)
        if tokens is None:
            if len(self._memo) >= self._memo_size:
                self._memo.clear()
            tokens = self._counter.encode(text)
            self._memo[text] = tokens
        return tokens

    def message(self, role: str, content: Content) -> list[int]:
        if isinstance(content, str):
            return [_START, *self._encode(role), _SEP, *self._encode(content), _END]
        body = [t for part in content for t in (self._encode(part) if isinstance(part, str) else [part[0]] * part[1])]
        return [_START, *self._encode(role), _SEP, *body, _END]

    def prompt(self, messages: Iterable[Message]) -> array[int]:
        """The prompt's tokens without the reply primer (which is never part of a cached prefix)."""
        out: array[int] = array("i")
        for role, content in messages:
            out.extend(self.message(role, content))
        return out

    @staticmethod
    def billed(prompt: Sequence[int]) -> int:
        """Prompt tokens as the provider bills them (reply primer included)."""
        return len(prompt) + REPLY_PRIMER_TOKENS


def common_prefix(a: array[int], b: array[int]) -> int:
    """Length of the longest common prefix of two token arrays (binary search on C-level compares)."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while low < high:  # invariant: a[:low] == b[:low] and a[:high + 1] != b[:high + 1]
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class PrefixCache:
    """Remembers the cacheable prefixes (1024, 1152, 1280... tokens) of every prompt it has seen, per
    model, by hash; ``lookup_and_store`` answers what a provider would report as ``cached_tokens``."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def lookup_and_store(self, model: str, prompt: array[int]) -> int:
        raw = prompt.tobytes()
        width = prompt.itemsize
        digest = hashlib.blake2b(model.encode(), digest_size=16)
        done, cached, hit = 0, 0, True
        for end in range(MIN_CACHED, len(prompt) + 1, BLOCK):
            digest.update(raw[done * width : end * width])
            done = end
            key = digest.copy().digest()
            if hit and key in self._seen:
                cached = end
            else:
                hit = False  # prefixes nest: once one is unseen, no longer one was seen
                self._seen.add(key)
        return cached

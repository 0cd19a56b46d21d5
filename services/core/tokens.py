"""Token counting on tiktoken, loaded offline from the BPE file bundled with the project.

Pure code: after construction, counting does no I/O.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken.load import check_hash

from services.core.errors import ConfigurationError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

# OpenAI chat accounting (gpt-4o family): every message costs 3 tokens of framing on top of its role
# and content, and the reply is primed with 3 more.
TOKENS_PER_MESSAGE = 3
REPLY_PRIMER_TOKENS = 3


@dataclass(frozen=True, slots=True)
class EncodingSpec:
    """What tiktoken needs to build an encoding, besides the BPE ranks file."""

    file_name: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


# Same values as tiktoken_ext.openai_public.o200k_base(); that function would download the ranks,
# so they are restated here. tests/unit/services/core/test_tokens.py proves equality against tiktoken's own loader.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

KNOWN_ENCODINGS: dict[str, EncodingSpec] = {
    "o200k_base": EncodingSpec(
        file_name="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}


def parse_ranks(contents: bytes) -> dict[bytes, int]:
    """Parse a .tiktoken file (``base64-token rank`` per line), as tiktoken.load does."""
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if not line:
            continue
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=4)
def load_encoding(name: str = "o200k_base", data_dir: Path = DATA_DIR) -> tiktoken.Encoding:
    """Build a tiktoken encoding from the bundled, hash-checked BPE file. Never touches the network."""
    spec = KNOWN_ENCODINGS.get(name)
    if spec is None:
        known = ", ".join(sorted(KNOWN_ENCODINGS))
        raise ConfigurationError(f"unknown tokenizer encoding {name!r}; bundled encodings: {known}")
    path = data_dir / spec.file_name
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise ConfigurationError(f"cannot read tokenizer file {path}: {exc}") from exc
    if not check_hash(raw, spec.sha256):
        raise ConfigurationError(f"tokenizer file {path} does not match the expected sha256 {spec.sha256}")
    return tiktoken.Encoding(
        name,
        pat_str=spec.pat_str,
        mergeable_ranks=parse_ranks(raw),
        special_tokens=spec.special_tokens,
    )


class TokenCounter:
    """Counts tokens of texts and chat messages the way the OpenAI chat API bills them."""

    def __init__(self, *, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding

    @classmethod
    def for_encoding(cls, name: str = "o200k_base") -> TokenCounter:
        return cls(encoding=load_encoding(name))

    @property
    def encoding_name(self) -> str:
        return self._encoding.name

    def encode(self, text: str) -> list[int]:
        # disallowed_special=() : customer text like "<|endoftext|>" is counted as plain text, not refused.
        return self._encoding.encode(text, disallowed_special=())

    def decode(self, tokens: list[int]) -> str:
        """Text of ``tokens`` (a cut between bytes of one character becomes U+FFFD)."""
        return self._encoding.decode(tokens, errors="replace")

    def count_text(self, text: str) -> int:
        return len(self.encode(text))

    def count_message(self, role: str, content: str) -> int:
        """Tokens one message adds to a prompt (framing + role + content), without the reply primer."""
        return TOKENS_PER_MESSAGE + self.count_text(role) + self.count_text(content)

    def count_messages(self, messages: Iterable[tuple[str, str]]) -> int:
        """Tokens of a whole prompt given as (role, content) pairs, reply primer included."""
        return sum(self.count_message(role, content) for role, content in messages) + REPLY_PRIMER_TOKENS


# The OpenAI cookbook's rule for the tokens of a ``tools`` block (gpt-4o family): "How to count
# tokens with tiktoken", num_tokens_for_tools.
FUNCTION_INIT, PROPERTY_INIT, PROPERTY_KEY, ENUM_INIT, ENUM_ITEM, FUNCTIONS_END = 7, 3, 3, -3, 3, 12


def count_tools(counter: TokenCounter, tools: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens a ``tools`` block adds, by the cookbook's function-token rule (0 for none)."""
    total, any_tool = 0, False
    for tool in tools:
        any_tool = True
        function = tool.get("function") or {}
        description = str(function.get("description") or "").removesuffix(".")
        total += FUNCTION_INIT + counter.count_text(f"{function.get('name', '')}:{description}")
        properties = (function.get("parameters") or {}).get("properties") or {}
        if properties:
            total += PROPERTY_INIT
        for key, spec in properties.items():
            spec = spec if isinstance(spec, Mapping) else {}
            total += PROPERTY_KEY
            for item in spec.get("enum") or ():
                total += ENUM_ITEM + counter.count_text(str(item))
            if spec.get("enum"):
                total += ENUM_INIT
            description = str(spec.get("description") or "").removesuffix(".")
            total += counter.count_text(f"{key}:{spec.get('type', '')}:{description}")
    return total + FUNCTIONS_END if any_tool else 0


def count_calls(counter: TokenCounter, calls: Iterable[tuple[str, str, str]]) -> int:
    """Tokens of an assistant message's tool calls (id, name, arguments): their texts and a framing
    of TOKENS_PER_MESSAGE each (the cookbook gives no rule for them; this errs on the high side)."""
    return sum(TOKENS_PER_MESSAGE + sum(counter.count_text(text) for text in call) for call in calls)

import gzip
import hashlib
from pathlib import Path

import pytest
import tiktoken
from tiktoken_ext import openai_public

from services.core.errors import ConfigurationError
from services.core.tokens import DATA_DIR, KNOWN_ENCODINGS, REPLY_PRIMER_TOKENS, TokenCounter, load_encoding

SAMPLES = [
    "Hello, my order 7718 has not arrived yet!",
    "Здравствуйте! Заказ №ORD-55231 пришёл повреждённым, коробка смята.",
    "Error E-042 on firmware 2.4.1 — see https://example.com/kb/42?x=1",
    "  multiple   spaces\n\nand newlines\r\n\ttabs",
    "emoji 🙂🚀 and CJK 你好世界 and <|endoftext|> as plain text",
]


def test_bundled_file_matches_the_hash_tiktoken_expects() -> None:
    raw = gzip.decompress((DATA_DIR / "o200k_base.tiktoken.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == KNOWN_ENCODINGS["o200k_base"].sha256
    assert KNOWN_ENCODINGS["o200k_base"].sha256 == "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def test_offline_encoding_equals_tiktokens_own_o200k_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Feed tiktoken's own loader through its cache (the official path, hash-checked by tiktoken itself)
    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    raw = gzip.decompress((DATA_DIR / "o200k_base.tiktoken.gz").read_bytes())
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(raw)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    official = tiktoken.Encoding(**openai_public.o200k_base())
    ours = load_encoding("o200k_base")
    for text in SAMPLES:
        assert ours.encode(text, disallowed_special=()) == official.encode(text, disallowed_special=())
    assert ours.n_vocab == official.n_vocab


def test_count_messages_follows_openai_chat_accounting(counter: TokenCounter) -> None:
    messages = [("system", "You are helpful."), ("user", "Where is order 7718?")]
    expected = sum(3 + counter.count_text(r) + counter.count_text(c) for r, c in messages) + REPLY_PRIMER_TOKENS
    assert counter.count_messages(messages) == expected
    assert counter.count_message("user", "") == 3 + counter.count_text("user")


def test_special_token_text_is_counted_not_refused(counter: TokenCounter) -> None:
    assert counter.count_text("<|endoftext|>") > 1


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="bundled encodings: o200k_base"):
        load_encoding("cl100k_base")


def test_tampered_file_is_rejected(tmp_path: Path) -> None:
    raw = gzip.decompress((DATA_DIR / "o200k_base.tiktoken.gz").read_bytes())
    (tmp_path / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(raw[:-10] + b"AAAA 99\n"))
    with pytest.raises(ConfigurationError, match="sha256"):
        load_encoding("o200k_base", tmp_path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read tokenizer file"):
        load_encoding("o200k_base", tmp_path)

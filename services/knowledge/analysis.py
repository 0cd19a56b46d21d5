"""Text to search terms, per word: Cyrillic words through the Russian Snowball stemmer and stop list,
Latin words through the English ones, identifiers with digits (order numbers) kept whole. Pure code."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS, STOPWORDS_RUSSIAN

_WORD = re.compile(r"[^\W_]+(?:[-/][^\W_]+)*")
_JOINERS = re.compile(r"[-/]")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\ufeff]")  # soft hyphen, zero-width: inside words
# Ranking drops only Lucene's 33 English stop words: "how", "which", "can", "what" are words a
# customer's question shares with an FAQ heading (benchmarks/knowledge.py measures both lists).
# The relevance floor ignores NLTK's wider list too: "do you" absent from the documents must not
# make a question look uncovered.
_STOP_EN = frozenset(STOPWORDS_EN)
# bm25s's Russian list (NLTK's) misses a few words customers use in nearly every question
_STOP_RU_MORE = (
    *("это", "этот", "эта", "эти", "этого", "этой", "мой", "моя", "мое", "мои", "свой", "еще", "пожалуйста"),
    *("который", "которая", "которое", "которые", "которого", "которой", "котором", "которому", "которую"),
    *("которых", "которым", "которыми"),
)
_STOP_RU = frozenset(word.replace("ё", "е") for word in (*STOPWORDS_RUSSIAN, *_STOP_RU_MORE))
_RU = Stemmer.Stemmer("russian")
_EN = Stemmer.Stemmer("english")
_FUNCTION_RU = (
    "сколько",
    "какой",
    "какая",
    "какое",
    "какие",
    "каком",
    "какую",
    "каких",
    "когда",
    "где",
    "куда",
    "откуда",
    "почему",
    "зачем",
    "можно",
    "нужно",
    "надо",
    "ли",
    "а",
    "скажите",
    "подскажите",
    "здравствуйте",
)
_FUNCTION = (frozenset(str(_EN.stemWord(word)) for word in STOPWORDS_EN_PLUS) - frozenset(STOPWORDS_EN)) | frozenset(
    str(_RU.stemWord(word)) for word in _FUNCTION_RU
)


@lru_cache(maxsize=200_000)
def _term(word: str) -> str | None:
    if any(ch.isdigit() for ch in word):
        return word  # A-12345, 12345, v2: an identifier, matched whole
    if _CYRILLIC.search(word):
        return None if word in _STOP_RU else str(_RU.stemWord(word))
    return None if word in _STOP_EN or len(word) < 2 else str(_EN.stemWord(word))


def terms(text: str) -> list[str]:
    """The search terms of ``text`` in order (repeats kept: they weigh in BM25)."""
    folded = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text)).casefold().replace("ё", "е")
    found: list[str] = []
    for match in _WORD.finditer(folded):
        word = match.group()
        parts = [word] if any(ch.isdigit() for ch in word) else _JOINERS.split(word)
        for part in parts:
            term = _term(part)
            if term:
                found.append(term)
    return found


def content_terms(found: list[str]) -> list[str]:
    """``found`` without the function words the ranking keeps ("how", "do", "you"): what a question
    is about, for the relevance floor and for telling a follow-up from a question."""
    return [term for term in found if term not in _FUNCTION]


PREFIX_CHARS = 5
"""A stem's first characters: what inflections the stemmer leaves apart ("кодировок"/"кодировка",
"строчек"/"строка"), typos past the fifth letter ("recursivly") and compounds' heads share."""


def prefixes(found: list[str]) -> list[str]:
    """The PREFIX_CHARS-character heads of the longer terms of ``found`` (identifiers with digits
    excluded: an order number matches whole or not at all)."""
    return [t[:PREFIX_CHARS] for t in found if len(t) > PREFIX_CHARS and not any(ch.isdigit() for ch in t)]

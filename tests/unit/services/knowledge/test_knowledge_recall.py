"""Recall on documents the ranking was never tuned on: each tokenisation case that lost a benchmark
question (benchmarks/corpus/manpages, the Debian FAQ) with that question, and the relevance floor
sending passages for a question made of a section's own words, on both corpora, in both languages."""

from __future__ import annotations

import asyncio
from functools import lru_cache
from pathlib import Path

import pytest

from services.core.knowledge import KnowledgeQuery, Passage
from services.core.tokens import TokenCounter
from services.knowledge.analysis import content_terms, prefixes, terms
from services.knowledge.corpus import read_corpus
from services.knowledge.snapshot import CONTEXT_WEIGHT, IndexSnapshot, follow_up_context
from services.settings import KnowledgeSettings

CORPORA = Path(__file__).resolve().parents[4] / "benchmarks" / "corpus"
DEFAULTS = KnowledgeSettings(_env_file=None)  # type: ignore[call-arg]


def passage(pid: str, heading: str, text: str, document: str = "page.html") -> Passage:
    return Passage(pid, document, document, (heading,), text, len(text.split()))


def ranked(passages: list[Passage], question: str, *, min_score: float | None = None) -> list[str]:
    floor = DEFAULTS.knowledge_min_score if min_score is None else min_score
    snapshot = IndexSnapshot.build(passages=passages, min_score=floor)
    return [s.passage.id for s in asyncio.run(snapshot.search(KnowledgeQuery(question), limit=3)).passages]


def test_a_typo_past_the_fifth_letter_still_finds_the_option() -> None:
    """Benchmark question: 'show what is inside every subfolder too, recursivly' (ls --recursive)."""
    assert terms("recursivly") != terms("recursively"), "Snowball alone leaves them apart"
    assert prefixes(terms("recursivly")) == prefixes(terms("recursively"))
    pages = [
        passage("ls-R", "ls", "-R, --recursive list subdirectories recursively"),
        passage("ls-r", "ls", "-r, --reverse reverse order while sorting"),
    ]
    assert ranked(pages, "show everything recursivly", min_score=0.0)[:1] == ["ls-R"]
    assert ranked(pages, "list the subdirectories recursivly")[:1] == ["ls-R"], "and it clears the floor"


def test_a_russian_plural_the_stemmer_leaves_apart_finds_its_singular() -> None:
    """Benchmark question: 'список всех кодировок, которые знает iconv' (iconv --list): Snowball
    stems «кодировок» to itself and «кодировки» to «кодировк»."""
    assert terms("кодировок") != terms("кодировки")
    pages = [
        passage("list", "iconv", "-l, --list: вывести все известные кодировки символов"),
        passage("files", "ls", "Список файлов выводится по алфавиту."),
    ]
    assert ranked(pages, "где посмотреть перечень кодировок", min_score=0.0)[:1] == ["list"]
    assert ranked(pages, "вывести список кодировок")[:1] == ["list"], "and it clears the floor"


def test_the_russian_relative_pronoun_is_a_stop_word() -> None:
    """Benchmark question: 'список всех кодировок, которые знает iconv': «которые» is no stop word in
    bm25s's (NLTK's) Russian list, and a page that says «который» often outranked the iconv page."""
    assert terms("которые который которых") == []
    pages = [
        passage("iconv", "iconv", "iconv --list выводит список кодировок."),
        passage("dots", "ls", "Файлы, которые начинаются с точки, которые скрыты, которые не видны: список."),
    ]
    assert ranked(pages, "список кодировок, которые знает iconv", min_score=0.0)[:1] == ["iconv"]


def test_function_words_do_not_outrank_the_subject_of_the_question() -> None:
    """Benchmark question: 'how to switch off the colours in the ls output': a page that shares "how"
    and "can" with the question must not outrank the one about colours."""
    pages = [
        passage("how", "df", "How you can see the space left: df."),
        passage("colour", "ls", "The colour of the output is set with --color=never."),
    ]
    assert ranked(pages, "how can I turn the colours off", min_score=0.0)[:1] == ["colour"]


def test_a_heading_that_holds_the_question_ranks_above_a_passage_repeating_its_words() -> None:
    """Benchmark question: 'which processors and hardware platforms does debian support' (FAQ 4.1):
    the section titled with them ranks above a passage that repeats them in its text."""
    pages = [
        passage(
            "mention",
            "Ports",
            "The hardware platforms list names the processors; each of the hardware platforms and processors "
            "has a port page.",
        ),
        passage("section", "On what hardware platforms and processors does Debian run?", "See the list of ports."),
    ]
    assert ranked(pages, "which processors and hardware platforms are supported", min_score=0.0)[:1] == ["section"]


def test_one_shared_word_of_three_is_a_coincidence_not_coverage() -> None:
    """At the default floor: "card" alone does not make a refund passage answer "gift cards" (the e2e
    grounding test's don't-know turn), while a question sharing two of its words is covered."""
    pages = [
        passage("refunds", "Refunds", "Refunds are paid to the original card within 14 days."),
        passage("delivery", "Delivery", "Standard delivery takes 3-5 working days."),
    ]
    assert ranked(pages, "do you sell gift cards?") == []
    assert ranked(pages, "how long do refunds to my card take?")[:1] == ["refunds"]


@lru_cache(maxsize=2)
def corpus_passages(name: str) -> tuple[Passage, ...]:
    corpus = read_corpus(
        CORPORA / name / "html",
        counter=TokenCounter.for_encoding(),
        passage_tokens=DEFAULTS.knowledge_passage_tokens,
        max_file_bytes=DEFAULTS.knowledge_max_file_bytes,
    )
    return corpus.passages


@pytest.mark.parametrize("name", ["debian-faq", "manpages"])
@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_floor_sends_passages_for_a_question_in_a_sections_own_words(name: str, lang: str) -> None:
    """At the default KNOWLEDGE_MIN_SCORE, on both corpora and in both languages: the first words of
    a section, asked as a question, get passages (the floor must not turn a covered question away)."""
    passages = corpus_passages(name)
    snapshot = IndexSnapshot.build(passages=passages, min_score=DEFAULTS.knowledge_min_score)
    own = [p for p in passages if f"/{lang}/" in f"/{p.document}" and len(p.text.split()) >= 12]
    asked = own[:: max(1, len(own) // 12)]
    assert len(asked) >= 10
    for section in asked:
        question = " ".join(section.text.split()[:12])
        found = asyncio.run(snapshot.search(KnowledgeQuery(question), limit=DEFAULTS.knowledge_top_k)).passages
        assert found, f"no passage for {question!r} ({section.source})"


@pytest.mark.parametrize(
    ("before", "follow_up"),
    [
        ("how do I show human-readable file sizes in the ls listing?", "and with powers of 1000 instead?"),
        ("как показать размеры файлов в списке ls в удобном виде?", "а в степенях 1000?"),
    ],
)
def test_a_follow_up_opening_with_and_is_searched_with_the_question_before(before: str, follow_up: str) -> None:
    """Benchmark follow-ups (man pages): no pronoun points back, the opening "and"/"а" does; searched
    alone, the page about disk usage, which says "powers of 1000" twice, wins."""
    pages = [
        passage("ls", "ls", "--si: list file sizes in powers of 1000 (ls) / --si: размеры в степенях 1000", "ls.html"),
        passage(
            "df",
            "df",
            "df --si shows disk usage in powers of 1000, powers of 1000 instead of 1024 / степенях 1000 степенях 1000",
            "df.html",
        ),
    ]
    snapshot = IndexSnapshot.build(passages=pages, min_score=0.0)
    alone = asyncio.run(snapshot.search(KnowledgeQuery(follow_up), limit=3)).passages
    assert [s.passage.id for s in alone][:1] == ["df"], "the control: alone, the follow-up finds the wrong page"
    found = asyncio.run(snapshot.search(KnowledgeQuery(follow_up, recent=(before,)), limit=3)).passages
    assert [s.passage.id for s in found][:1] == ["ls"]


def test_a_follow_up_is_searched_with_the_message_before_at_its_own_weight() -> None:
    """Benchmark follow-up (man pages, Russian): «а в степенях 1000?» after «как показать размеры
    файлов в удобочитаемом виде, типа 2G» ranked ls's --si second while the message before weighed
    half the follow-up's own words: «степенях 1000» alone points to another page. The message just
    before is the question asked again: it weighs as much; older messages and the topic weigh less."""
    query = KnowledgeQuery("а в степенях 1000?", recent=("first", "как показать размеры файлов"), topic="ls")
    context = follow_up_context(query, content_terms(terms(query.message)))
    assert context == [(terms("как показать размеры файлов"), 1.0), (terms("first ls"), CONTEXT_WEIGHT)]
    assert follow_up_context(KnowledgeQuery("как удалить пакет?", recent=("first",)), terms("удалить пакет")) == []
    snapshot = IndexSnapshot.build(passages=corpus_passages("manpages"), min_score=0.0)
    asked = KnowledgeQuery("а в степенях 1000?", recent=("как показать размеры файлов в удобочитаемом виде, типа 2G",))
    first = asyncio.run(snapshot.search(asked, limit=3)).passages[0].passage
    assert first.document.split("/")[-1].startswith("ls.") and "--si" in first.text, first.source

"""Russian follow-ups and web-export text in retrieval (snapshot.py, analysis.py), and a folder that
vanishes for a moment (library.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from services.core.knowledge import KnowledgeQuery
from services.core.tokens import TokenCounter
from services.knowledge.html_doc import parse_html
from services.knowledge.library import KnowledgeLibrary
from services.knowledge.markdown_doc import parse_markdown
from services.knowledge.passages import cut_passages
from services.knowledge.snapshot import IndexSnapshot

RU = (
    "# Доставка\n\nКурьерская доставка по Москве занимает один-два дня.\n\n"
    "# Возврат\n\nВернуть товар можно в течение 14 дней с момента покупки.\n\n"
    "# Оплата\n\nОплатить заказ можно картой или наличными курьеру.\n"
)


def ru_snapshot(counter: TokenCounter) -> IndexSnapshot:
    document = parse_markdown(RU, path="ru.md", fallback_title="ru")
    return IndexSnapshot.build(passages=cut_passages(document, counter=counter, max_tokens=220), min_score=0.15)


async def test_a_russian_follow_up_with_this_finds_the_earlier_topic(counter: TokenCounter) -> None:
    """The control (passes on main): with «это» the follow-up leans on the previous question."""
    for follow_up in ("А это долго?", "А это бесплатно?"):
        found = await ru_snapshot(counter).search(
            KnowledgeQuery(follow_up, recent=("Сколько идёт курьерская доставка?",)), limit=3
        )
        assert found.passages and found.passages[0].passage.headings == ("Доставка",), follow_up


async def test_a_russian_follow_up_with_a_personal_pronoun_finds_the_earlier_topic(counter: TokenCounter) -> None:
    """Russian refers back to a thing by gender: «доставка» → «она», «заказ» → «он», plural «они».
    snapshot._POINTING (snapshot.py:131) lists «его/её/их» but not «он/она/оно/они» (nor «него/неё/ней»),
    so the same follow-ups as the control are searched alone and find nothing: the don't-know path."""
    snapshot = ru_snapshot(counter)
    for follow_up in ("А она долгая?", "А она бесплатная?", "А они быстрые?"):
        found = await snapshot.search(KnowledgeQuery(follow_up, recent=("Сколько идёт курьерская доставка?",)), limit=3)
        assert found.passages, follow_up  # main: []
        assert found.passages[0].passage.headings == ("Доставка",), follow_up


async def test_a_russian_question_word_does_not_sink_a_follow_up_below_the_floor(counter: TokenCounter) -> None:
    """The floor's function-word list (analysis._FUNCTION) is built from English lists only ("how",
    "which" are left out of the floor); Russian question words such as «сколько» (not in NLTK's Russian
    stop words) count as content the documents lack: «А сколько это идёт?» scores 0.13 <
    KNOWLEDGE_MIN_SCORE 0.15 while «А это долго?» passes."""
    found = await ru_snapshot(counter).search(
        KnowledgeQuery("А сколько это идёт?", recent=("Сколько идёт курьерская доставка?",)), limit=3
    )
    assert found.passages and found.passages[0].passage.headings == ("Доставка",)


async def test_soft_hyphens_of_a_web_export_do_not_split_words(counter: TokenCounter) -> None:
    """Russian web pages are commonly hyphenated with &shy; (U+00AD). analysis.terms splits words at
    it («достав\u00adка» → «доста», «ка»), so the passage never matches the word."""
    page = "<h1>Доставка</h1><p>Курьерская достав&shy;ка по Москве зани&shy;мает один-два дня.</p>"
    document = parse_html(page, path="d.html", fallback_title="d")
    snapshot = IndexSnapshot.build(passages=cut_passages(document, counter=counter, max_tokens=220), min_score=0.15)
    question = KnowledgeQuery("Сколько времени занимает курьерская доставка?")
    found = await snapshot.search(question, limit=3)
    assert found.passages and found.passages[0].passage.text == "Курьерская доставка по Москве занимает один-два дня."
    plain = parse_html(page.replace("&shy;", ""), path="d.html", fallback_title="d")
    unhyphenated = IndexSnapshot.build(passages=cut_passages(plain, counter=counter, max_tokens=220), min_score=0.15)
    assert found.passages[0].score == (await unhyphenated.search(question, limit=3)).passages[0].score


async def test_a_folder_that_vanishes_for_a_moment_keeps_the_last_good_index(
    tmp_path: Path, counter: TokenCounter
) -> None:
    """A deploy that swaps the folder (rsync into a new dir and mv, an unmounted volume, a NFS blip):
    read_corpus reports the missing folder as one skipped file and returns no passages, and refresh()
    swaps that empty index in: every worker answers "the documents do not cover it" until the next look."""
    root = tmp_path / "knowledge"
    root.mkdir()
    (root / "returns.md").write_text("# Refunds\n\nRefunds are paid to the original card within 14 days.\n")
    library = KnowledgeLibrary(
        root=root, counter=counter, passage_tokens=220, max_file_bytes=10**6, min_score=0.15, refresh_seconds=15
    )
    library.load()
    assert len(library.current().passages) == 1
    shutil.move(root, tmp_path / "knowledge.old")
    await library.refresh()
    assert len(library.current().passages) == 1, "the last good index was replaced by an empty one"

"""benchmarks/media.py: the quick run prints both strategies, and its figures follow from how each one
remembers a photo (pixels on their turn only and a note after it, or the image parts resent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.media import STRATEGIES, TURNS, main, simulate
from services.core.tokens import TokenCounter
from tests.stubs.prompt_cache import PromptTokens

PHOTO_TURNS = [index for index, turn in enumerate(TURNS) if turn.photo is not None]


@pytest.fixture(scope="module")
def tokens() -> PromptTokens:
    return PromptTokens(TokenCounter.for_encoding())


def rows_of(out: str, model_header: str) -> dict[str, list[float]]:
    """The A, B and B / A rows under a model's header line, as their numbers."""
    block = out.split(model_header, 1)[1].splitlines()[1:4]
    rows = {}
    for line in block:
        label = next(name for name in (*STRATEGIES, "B / A") if line.strip().startswith(name))
        rows[label] = [float(cell.rstrip("%")) for cell in line.strip()[len(label) :].split() if "/" not in cell]
    return rows


def test_the_quick_run_prints_both_strategies_and_b_costs_more_for_gpt_4o(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = tmp_path / "media.txt"
    assert main(["--quick", "--out", str(written)]) == 0
    out = capsys.readouterr().out
    assert written.read_text(encoding="utf-8") == out
    assert "budget 6000" in out and "budget 20000" not in out, "--quick runs one budget"
    rows = rows_of(out, "gpt-4o, detail auto")
    a, b, ratio = rows[STRATEGIES[0]], rows[STRATEGIES[1]], rows["B / A"]
    assert b[0] > 2 * a[0], "chat prompt tokens: every later turn resends the images"
    # chat_in max image_in cached notes_in note_out eff@1.0 eff@0.5 eff@0.1 eff@own
    assert b[6] > a[6] and ratio[1] > 1.5, "uncached input cost, note calls included"
    assert a[4] > 0 and a[5] > 0 and b[4] == b[5] == 0, "only A makes note calls"
    assert a[3] == 0 and b[3] > 50, "A's prompts stay under the 1024 tokens a cache needs; B's do not"


def test_a_sends_each_photo_once_and_b_on_every_later_turn(tokens: PromptTokens) -> None:
    a = simulate(STRATEGIES[0], "gpt-4o", "auto", 20_000, tokens)
    b = simulate(STRATEGIES[1], "gpt-4o", "auto", 20_000, tokens)
    per_photo = 765  # the tile rule: 1024x768 after the shrink, 4 tiles
    assert [i for i, t in enumerate(a.image_tokens) if t] == PHOTO_TURNS
    assert set(a.image_tokens) == {0, per_photo}
    assert b.image_tokens[PHOTO_TURNS[1] :] == [2 * per_photo] * (len(TURNS) - PHOTO_TURNS[1])
    assert len(a.notes.billed) == 2 and all(billed > per_photo for billed in a.notes.billed)
    assert 60 <= a.note_output <= 100, "about 40 output tokens per note"
    # the images are inside B's cached prefix: more is cached than the text alone could be
    text_only = [prompt - image for prompt, image in zip(b.prompts, b.image_tokens, strict=True)]
    assert b.chat.cached[-1] > text_only[-1]
    assert a.chat.total < b.chat.total


def test_over_a_small_budget_b_drops_the_turns_of_images_that_do_not_fit(tokens: PromptTokens) -> None:
    a = simulate(STRATEGIES[0], "gpt-4o-mini", "low", 6000, tokens)
    b = simulate(STRATEGIES[1], "gpt-4o-mini", "low", 6000, tokens)
    assert a.kept[-1] == len(TURNS) - 1, "notes fit: the whole conversation stays"
    assert b.kept[-1] < len(TURNS) - 1 and max(b.prompts) <= 6000
    assert b.image_tokens[-1] == 2833, "the first photo's turn went, the second photo stays"


def test_a_photo_that_fits_no_budget_goes_at_low_detail_in_both(tokens: PromptTokens) -> None:
    for strategy in STRATEGIES:
        run = simulate(strategy, "gpt-4o-mini", "auto", 20_000, tokens)
        assert run.sent_details == ["low", "low"] and run.photo_tokens == [2833, 2833]

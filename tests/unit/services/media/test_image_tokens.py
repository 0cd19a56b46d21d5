"""Image-token rules against OpenAI's published examples, the edges, and properties over many sizes."""

from __future__ import annotations

import math
import random

import pytest

from services.media.image_tokens import (
    DEFAULT_RULE,
    MODEL_RULES,
    ConservativeRule,
    ImageCost,
    PatchRule,
    TileRule,
    image_cost,
    image_tokens,
    known_rule,
    parse_rule,
    resolve_rule,
    rule_for_model,
)

GPT_4O = TileRule(85, 170)
MINI_PATCH = PatchRule(1.62)


def sizes(count: int = 400, seed: int = 29) -> list[tuple[int, int]]:
    """Photos and screenshots of every shape: small, huge, square, panoramas, slivers, tile edges."""
    rng = random.Random(seed)
    fixed = [(1, 1), (512, 512), (513, 512), (768, 768), (769, 769), (1024, 1024), (2048, 2048), (2049, 1),
             (1800, 2400), (2400, 1800), (4096, 8192), (10000, 10), (10, 10000), (1, 100000), (100000, 1),
             (1280, 720), (1920, 1080), (1170, 2532), (32, 32), (33, 33), (1568, 1568)]  # fmt: skip
    drawn = [(rng.randint(1, 12000), rng.randint(1, 12000)) for _ in range(count)]
    drawn += [(rng.randint(1, 300), rng.randint(1, 20000)) for _ in range(count // 4)]
    return fixed + drawn


# --- the published examples ----------------------------------------------------------------------


def test_a_1024_square_at_high_detail_on_gpt_4o_is_765_tokens() -> None:
    assert image_tokens(1024, 1024, model="gpt-4o", detail="high") == 765  # 4 tiles * 170 + 85
    assert image_cost(1024, 1024, model="gpt-4o", detail="high") == ImageCost(765, 768, 768)


def test_a_2048_by_4096_image_at_high_detail_is_1105_tokens() -> None:
    cost = image_cost(2048, 4096, model="gpt-4o", detail="high")
    assert cost == ImageCost(1105, 768, 1536)  # 1024x2048, then 768x1536: 6 tiles


def test_any_image_at_low_detail_is_the_base_and_is_seen_at_512() -> None:
    assert image_cost(4096, 8192, model="gpt-4o", detail="low") == ImageCost(85, 256, 512)
    assert image_tokens(4096, 8192, model="gpt-4o-mini", detail="low") == 2833
    assert image_tokens(300, 200, model="gpt-4o", detail="low") == 85
    assert image_cost(300, 200, model="gpt-4o", detail="low") == ImageCost(85, 300, 200)  # never enlarged


def test_auto_is_counted_as_high() -> None:
    for width, height in sizes(50):
        assert GPT_4O.cost(width, height, "auto") == GPT_4O.cost(width, height, "high")


def test_gpt_4o_mini_has_its_own_base_and_tile() -> None:
    assert image_tokens(1024, 1024, model="gpt-4o-mini", detail="high") == 2833 + 4 * 5667


def test_1800_by_2400_is_1452_patches_shrunk_as_published() -> None:
    # 57*75 = 4275 > 1536; shrink sqrt(1536*32^2/(1800*2400)) = 0.603 → 1086 x 1448 → 33.94 x 45.25
    # patches; 33/33.94 fits the width in whole patches → 1056 x 1408 → 33 x 44 = 1452 patches
    assert MINI_PATCH.patches(1800, 2400) == ImageCost(1452, 1056, 1408)
    assert MINI_PATCH.patches(2400, 1800) == ImageCost(1452, 1408, 1056)
    assert image_cost(1800, 2400, model="gpt-4.1-mini") == ImageCost(math.ceil(1452 * 1.62), 1056, 1408)
    assert image_tokens(1800, 2400, model="gpt-4.1-mini") == 2353  # 2352.24 rounded up
    assert image_tokens(1800, 2400, model="gpt-4.1-nano") == math.ceil(1452 * 2.46)
    assert image_tokens(1800, 2400, model="o4-mini") == math.ceil(1452 * 1.72)


def test_a_1024_square_is_1024_patches_unshrunk() -> None:
    assert MINI_PATCH.patches(1024, 1024) == ImageCost(1024, 1024, 1024)
    assert image_tokens(1024, 1024, model="gpt-4.1-mini") == math.ceil(1024 * 1.62)  # 1658.88


def test_the_multiplier_is_applied_exactly_not_in_floating_point() -> None:
    # 50 patches * 1.62 is 81 exactly (81.00000000000001 in floats would round up to 82)
    assert PatchRule(1.62).cost(32 * 50, 32).tokens == 81
    assert PatchRule(1.5).cost(32 * 100, 32).tokens == 150


# --- edges ----------------------------------------------------------------------------------------


def test_a_one_pixel_image_is_one_tile_or_one_patch() -> None:
    assert image_cost(1, 1, model="gpt-4o", detail="high") == ImageCost(255, 1, 1)
    assert image_cost(1, 1, model="gpt-4.1-mini") == ImageCost(2, 1, 1)


def test_an_extreme_aspect_is_counted_on_its_fitted_size() -> None:
    # 10000x10 fits 2048 wide: 2048 x 2.048 → 3 px (rounded up) tall, 4 tiles
    assert image_cost(10000, 10, model="gpt-4o", detail="high") == ImageCost(85 + 4 * 170, 2048, 3)
    assert image_cost(10, 10000, model="gpt-4o", detail="high") == ImageCost(85 + 4 * 170, 3, 2048)
    assert MINI_PATCH.patches(10000, 10) == ImageCost(313, 10000, 10)  # 313 x 1 patches, under the cap


def test_a_sliver_thinner_than_a_patch_after_the_shrink_gets_the_cap() -> None:
    # the published shrink leaves 0 whole patches across (the formula would count 0): the cap instead
    assert MINI_PATCH.patches(100000, 10) == ImageCost(1536, 1536 * 32, 5)  # 10 px * 49152/100000 = 4.9, rounded up
    assert MINI_PATCH.patches(10, 100000) == ImageCost(1536, 5, 1536 * 32)


@pytest.mark.parametrize("size", [(0, 10), (10, 0), (-1, 10), (10, -5), (0, 0)])
def test_zero_and_negative_sizes_are_refused(size: tuple[int, int]) -> None:
    for rule in (GPT_4O, MINI_PATCH, DEFAULT_RULE):
        with pytest.raises(ValueError):
            rule.cost(*size)
    with pytest.raises(ValueError):
        image_tokens(*size, model="gpt-4o")


@pytest.mark.parametrize("size", [(1.5, 10), (True, 10), ("10", 10)])
def test_sizes_that_are_not_whole_numbers_are_refused(size: tuple[object, object]) -> None:
    with pytest.raises(ValueError):
        image_tokens(*size, model="gpt-4o")  # type: ignore[arg-type]


def test_an_unknown_detail_is_refused() -> None:
    with pytest.raises(ValueError):
        image_tokens(100, 100, model="gpt-4o", detail="medium")


# --- choosing the rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "rule"),
    [
        ("gpt-4o", GPT_4O),
        ("gpt-4o-2024-08-06", GPT_4O),
        ("GPT-4o", GPT_4O),
        ("openai/gpt-4o", GPT_4O),
        ("chatgpt-4o-latest", GPT_4O),
        ("gpt-4o-mini", TileRule(2833, 5667)),
        ("gpt-4o-mini-2024-07-18", TileRule(2833, 5667)),
        ("gpt-4.1", GPT_4O),
        ("gpt-4.1-2025-04-14", GPT_4O),
        ("gpt-4.1-mini", PatchRule(1.62)),
        ("gpt-4.1-mini-2025-04-14", PatchRule(1.62)),
        ("gpt-4.1-nano", PatchRule(2.46)),
        ("gpt-4.5-preview", GPT_4O),
        ("o1", TileRule(75, 150)),
        ("o1-pro", TileRule(75, 150)),
        ("o3-2025-04-16", TileRule(75, 150)),
        ("o4-mini", PatchRule(1.72)),
        ("gpt-5", TileRule(70, 140)),
        ("gpt-5-mini", PatchRule(1.62)),
        ("gpt-5-nano-2025-08-07", PatchRule(2.46)),
    ],
)
def test_a_model_gets_the_rule_of_its_longest_prefix(model: str, rule: object) -> None:
    assert known_rule(model) == rule
    assert rule_for_model(model) == rule


@pytest.mark.parametrize("model", ["stub-chat", "llama-3.2-vision", "gpt-5.4-mini", "gpt-4oo", "o10", ""])
def test_an_unknown_model_gets_the_conservative_default(model: str) -> None:
    assert known_rule(model) is None
    assert rule_for_model(model) is DEFAULT_RULE


def test_explicit_rules_parse() -> None:
    assert parse_rule("tile:85:170") == GPT_4O
    assert parse_rule(" TILE:2833:5667 ") == TileRule(2833, 5667)
    assert parse_rule("patch:1.62") == PatchRule(1.62)
    assert parse_rule("patch:2") == PatchRule(2.0)
    assert parse_rule("gpt-4.1-nano") == PatchRule(2.46)
    assert parse_rule("default") is DEFAULT_RULE
    for rule in (*MODEL_RULES.values(), DEFAULT_RULE):
        assert parse_rule(rule.name) == rule


MALFORMED = ["", "tile", "tile:85", "tile:85:0", "tile:-1:170", "tile:a:b", "tile:1:2:3", "patch:", "patch:0",
             "patch:-1", "patch:nan", "patch:inf", "patch:x", "no-such-model", "square:1"]  # fmt: skip


@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_rule_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rule(text)


def test_an_override_wins_over_the_model() -> None:
    assert resolve_rule("gpt-4o", "patch:1.62") == PatchRule(1.62)
    assert resolve_rule("gpt-4o", None) == GPT_4O
    assert resolve_rule("stub-chat", "tile:85:170") == GPT_4O
    assert image_tokens(1024, 1024, model="stub-chat", detail="high", rule="gpt-4o") == 765


# --- properties over many sizes -------------------------------------------------------------------

DETAIL_LEVELS = ("low", "high", "auto")


def test_the_unknown_model_default_never_counts_less_than_a_known_rule() -> None:
    known = set(MODEL_RULES.values())
    for width, height in sizes():
        for detail in DETAIL_LEVELS:
            default = DEFAULT_RULE.cost(width, height, detail)  # type: ignore[arg-type]
            for rule in known:
                assert default.tokens >= rule.cost(width, height, detail).tokens  # type: ignore[arg-type]
                # nor what a known model bills for the shrunk image the default sends
                assert default.tokens >= rule.cost(default.width, default.height, detail).tokens  # type: ignore[arg-type]


def test_the_default_over_one_rule_is_that_rule_at_the_tile_size() -> None:
    alone = ConservativeRule((GPT_4O,))
    for width, height in sizes(60):
        assert alone.cost(width, height, "high") == GPT_4O.cost(width, height, "high")


def test_sending_the_shrunk_size_costs_the_same_and_is_not_shrunk_again() -> None:
    for rule in set(MODEL_RULES.values()):
        for width, height in sizes(150):
            for detail in DETAIL_LEVELS:
                cost = rule.cost(width, height, detail)  # type: ignore[arg-type]
                assert 1 <= cost.width <= width and 1 <= cost.height <= height  # never enlarged
                again = rule.cost(cost.width, cost.height, detail)  # type: ignore[arg-type]
                assert again == cost, (rule, width, height, detail)


def test_patches_never_pass_the_cap_and_the_tile_size_stays_in_the_box() -> None:
    for width, height in sizes():
        covered = MINI_PATCH.patches(width, height)
        assert 1 <= covered.tokens <= 1536
        assert math.ceil(covered.width / 32) * math.ceil(covered.height / 32) == covered.tokens
        if math.ceil(width / 32) * math.ceil(height / 32) > 1536:  # shrunk: one side whole patches
            assert covered.width % 32 == 0 or covered.height % 32 == 0
        high = GPT_4O.cost(width, height, "high")
        assert max(high.width, high.height) <= 2048 and min(high.width, high.height) <= 768
        low = GPT_4O.cost(width, height, "low")
        assert max(low.width, low.height) <= 512


def test_the_shrink_keeps_the_aspect_within_a_pixel() -> None:
    for rule in (GPT_4O, MINI_PATCH):
        for width, height in sizes(150):
            cost = rule.cost(width, height, "high")
            if (cost.width, cost.height) != (width, height):
                # the side that was scaled exactly and the one rounded up differ from the ratio by < 1 px
                assert abs(cost.width * height - cost.height * width) < max(width, height) + 1

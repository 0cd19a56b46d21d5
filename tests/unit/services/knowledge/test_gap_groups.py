"""Unanswered questions grouped: inflected Russian and English paraphrases meet, near misses (one
different subject word) stay apart, groups sorted by their total count, the work capped."""

from __future__ import annotations

import numpy as np
import pytest

from services.knowledge.gap_groups import EXAMPLES, group_questions

ASKED = [
    ("сколько стоит доставка в казань", 5),
    ("сколько стоят доставки в казань?", 3),
    ("Сколько стоит доставка в Москву", 2),
    ("как вернуть деньги за заказ", 4),
    ("как вернуть деньги за заказы", 1),
    ("как отменить заказ", 3),
    ("Можно ли оплатить картой Мир?", 2),
    ("оплата картой мир возможна?", 1),
    ("How long does delivery take?", 4),
    ("how long will the deliveries take", 2),
    ("how do I return shoes", 3),
    ("How do I return my shoes?", 1),
    ("how do I return a laptop", 2),
    ("can I pay with paypal", 1),
    ("can I pay with bitcoin", 1),
]


def groups_of(asked: list[tuple[str, int]]) -> list[set[str]]:
    return [set(g.examples) for g in group_questions(asked).groups]


def together(a: str, b: str) -> bool:
    return any(a in g and b in g for g in groups_of(ASKED))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("сколько стоит доставка в казань", "сколько стоят доставки в казань?"),
        ("как вернуть деньги за заказ", "как вернуть деньги за заказы"),
        ("Можно ли оплатить картой Мир?", "оплата картой мир возможна?"),
        ("How long does delivery take?", "how long will the deliveries take"),
        ("how do I return shoes", "How do I return my shoes?"),
    ],
)
def test_paraphrases_and_inflections_meet(a: str, b: str) -> None:
    assert together(a, b), groups_of(ASKED)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("сколько стоит доставка в казань", "Сколько стоит доставка в Москву"),
        ("как вернуть деньги за заказ", "как отменить заказ"),
        ("how do I return shoes", "how do I return a laptop"),
        ("can I pay with paypal", "can I pay with bitcoin"),
        ("How long does delivery take?", "сколько стоит доставка в казань"),
    ],
)
def test_near_misses_stay_apart(a: str, b: str) -> None:
    assert not together(a, b), groups_of(ASKED)


def test_groups_sum_their_counts_most_asked_first_with_examples_most_asked_first() -> None:
    grouping = group_questions(ASKED)
    counts = [g.count for g in grouping.groups]
    assert counts == sorted(counts, reverse=True)
    assert sum(counts) == sum(n for _, n in ASKED) and grouping.questions == len(ASKED)
    first = grouping.groups[0]
    assert first.count == 8 and first.examples[0] == "сколько стоит доставка в казань"


def test_examples_are_capped_and_the_work_is_bounded() -> None:
    asked = [(f"where is my parcel number {n}? delivery tracking", 1) for n in range(50)]
    asked += [("where is my parcel? delivery tracking", 100)]
    grouping = group_questions(asked, cap=20)
    assert grouping.questions == 20 and grouping.left_out == 31
    assert all(len(g.examples) <= EXAMPLES for g in grouping.groups)
    assert grouping.groups[0].examples[0] == "where is my parcel? delivery tracking"


def test_hostile_input_is_grouped_in_time() -> None:
    asked = [("а" * 100_000, 1), ("x " * 50_000, 2), ("", 3), ("🙂" * 1000, 1)]
    grouping = group_questions(asked)
    assert sum(g.count for g in grouping.groups) == 7


def unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_with_vectors_questions_close_in_meaning_meet_though_they_share_no_word() -> None:
    asked = [("how do I get a refund?", 3), ("I want my money back", 2), ("is gift wrapping free?", 1)]
    vectors = {
        "how do I get a refund?": unit(1, 0.1, 0),
        "I want my money back": unit(0.95, 0.2, 0),
        "is gift wrapping free?": unit(0, 0.2, 1),
    }
    assert [g.examples for g in group_questions(asked).groups] == [[q] for q, _ in asked], "words alone: apart"
    grouped = group_questions(asked, vectors=vectors)
    assert [g.examples for g in grouped.groups] == [
        ["how do I get a refund?", "I want my money back"],
        ["is gift wrapping free?"],
    ]
    partial = group_questions(asked, vectors={"I want my money back": vectors["I want my money back"]})
    assert len(partial.groups) == 3, "a question without a vector is grouped by its words"

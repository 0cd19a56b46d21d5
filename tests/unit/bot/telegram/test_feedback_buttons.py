"""The feedback buttons' data: what the bot writes reads back, anything else (forged, hostile) is
nothing."""

from __future__ import annotations

import pytest

from bot.telegram.feedback import parse_press, person_button, question_buttons
from bot.telegram.texts import Texts


def test_the_buttons_read_back() -> None:
    say = Texts("ru")
    rows = question_buttons(say, 1796435110076).inline_keyboard
    assert [b.text for b in rows[0]] == ["Да", "Нет"]
    presses = [parse_press(b.callback_data) for b in rows[0]]
    assert [(p.conversation, p.choice) for p in presses if p] == [(1796435110076, "yes"), (1796435110076, "no")]
    (person,) = person_button(say, 7).inline_keyboard[0]
    assert parse_press(person.callback_data) == parse_press("fb:7:person")
    assert all(len((b.callback_data or "").encode()) <= 64 for b in rows[0])


@pytest.mark.parametrize(
    "data",
    [
        None,
        "",
        "fb:",
        "fb:1",
        "fb:1:maybe",
        "fb::yes",
        "fb:-1:yes",
        "fb:١٢:yes",
        "fb:1:yes:x",
        "xx:1:yes",
        "fb:" + "9" * 70 + ":no",
        "fb:1:yes\x00",
        "fb:1:YES",
    ],
)
def test_anything_else_is_nothing(data: str | None) -> None:
    assert parse_press(data) is None

"""Templates read by the scanner: the three kinds of placeholder, literal braces, and each mistake."""

from __future__ import annotations

import pytest

from services.actions.placeholders import Placeholder, TemplateError, fill, parse


def test_the_kinds_and_literal_braces() -> None:
    assert parse("a {b} {customer.phone} ${C_1} {{x}} $ }}") == [
        "a ",
        Placeholder("param", "b"),
        " ",
        Placeholder("customer", "phone"),
        " ",
        Placeholder("env", "C_1"),
        " {x} $ }",
    ]
    assert fill(parse("/o/{id}/x"), lambda found: f"<{found}>") == "/o/<{id}>/x"
    assert [str(p) for p in parse("{a}{customer.telegram_id}${B}") if isinstance(p, Placeholder)] == [
        "{a}",
        "{customer.telegram_id}",
        "${B}",
    ]


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("{a", "a { is not closed"),
        ("{a{b}", "a { is not closed"),
        ("a}", "a } is not opened"),
        ("{a b}", "is not a placeholder"),
        ("{1a}", "is not a placeholder"),
        ("{}", "is not a placeholder"),
        ("{customer.email}", "{customer.email} is not known"),
        ("${1X}", "is not a variable name"),
        ("${A-B}", "is not a variable name"),
        ("{я}", "is not a placeholder"),
    ],
)
def test_a_mistake_says_what_and_the_fix(template: str, said: str) -> None:
    with pytest.raises(TemplateError) as caught:
        parse(template)
    assert said in str(caught.value)


def test_a_long_template_is_read_whole() -> None:
    segments = parse("{{" * 50_000 + "{a}" * 10_000)
    assert segments[0] == "{" * 50_000 and len(segments) == 10_001

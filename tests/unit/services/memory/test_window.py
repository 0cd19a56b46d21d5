import pytest

from services.core.errors import ConfigurationError, CorruptHistoryError, MessageTooLongError
from services.core.records import PromptPart
from services.core.tokens import REPLY_PRIMER_TOKENS
from services.memory.window import build_window

INSTRUCTION = PromptPart("system", "instr", 50)
NEW = PromptPart("user", "new", 20)


def history(*costs: int) -> list[PromptPart]:
    return [PromptPart("user" if i % 2 == 0 else "assistant", f"m{i}", c) for i, c in enumerate(costs)]


def fixed() -> int:
    return INSTRUCTION.tokens + NEW.tokens + REPLY_PRIMER_TOKENS


def test_ten_stored_six_fit_four_removed() -> None:
    hist = history(*[10] * 10)
    window = build_window(instruction=INSTRUCTION, context=[], history=hist, new_message=NEW, budget=fixed() + 65)
    assert window.context_history_messages == 6
    assert window.removed_history_messages == 4
    assert window.messages == (INSTRUCTION, *hist[4:], NEW)
    assert window.estimated_tokens == fixed() + 60


def test_whole_turns_only_and_no_gaps() -> None:
    # newest turn (5+5) fits, the one before (100+1) does not, the oldest (1+1) would fit but must not be taken
    hist = history(1, 1, 100, 1, 5, 5)
    window = build_window(instruction=INSTRUCTION, context=[], history=hist, new_message=NEW, budget=fixed() + 50)
    assert [m.content for m in window.messages[1:-1]] == ["m4", "m5"]
    assert window.removed_history_messages == 4


def test_turn_is_taken_whole_or_not_at_all() -> None:
    hist = history(10, 10)
    window = build_window(instruction=INSTRUCTION, context=[], history=hist, new_message=NEW, budget=fixed() + 19)
    assert window.context_history_messages == 0
    assert window.removed_history_messages == 2


def test_context_counts_and_sits_after_instruction() -> None:
    summary = PromptPart("user", "<conversation_summary>...</conversation_summary>", 30)
    hist = history(10, 10, 10, 10)
    window = build_window(
        instruction=INSTRUCTION, context=[summary], history=hist, new_message=NEW, budget=fixed() + 30 + 20
    )
    assert window.messages == (INSTRUCTION, summary, hist[2], hist[3], NEW)
    assert window.estimated_tokens == fixed() + 50


def test_everything_fits() -> None:
    hist = history(3, 3, 3, 3)
    window = build_window(instruction=INSTRUCTION, context=[], history=hist, new_message=NEW, budget=10_000)
    assert window.removed_history_messages == 0
    assert window.messages == (INSTRUCTION, *hist, NEW)


@pytest.mark.parametrize(
    "roles",
    [["user"], ["user", "assistant", "user"], ["assistant", "user"], ["user", "user"], ["user", "system"]],
)
def test_corrupt_history_is_rejected(roles: list[str]) -> None:
    hist = [PromptPart(role, "x", 1) for role in roles]
    with pytest.raises(CorruptHistoryError):
        build_window(instruction=INSTRUCTION, context=[], history=hist, new_message=NEW, budget=10_000)


def test_message_too_long_reports_tokens_and_limit() -> None:
    big = PromptPart("user", "big", 500)
    with pytest.raises(MessageTooLongError) as info:
        build_window(instruction=INSTRUCTION, context=[], history=[], new_message=big, budget=300)
    assert info.value.tokens == 500
    assert info.value.limit == 300 - INSTRUCTION.tokens - REPLY_PRIMER_TOKENS
    assert "500 tokens, limit 247" in str(info.value)


def test_instruction_alone_over_budget_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        build_window(instruction=INSTRUCTION, context=[], history=[], new_message=NEW, budget=40)


def test_render_is_applied_to_included_history_only() -> None:
    hist = history(10, 10, 10, 10)
    seen: list[str] = []

    def render(part: PromptPart) -> PromptPart:
        seen.append(part.content)
        return PromptPart(part.role, part.content.upper(), part.tokens)

    window = build_window(
        instruction=INSTRUCTION, context=[], history=hist, new_message=NEW, budget=fixed() + 20, render=render
    )
    assert seen == ["m2", "m3"]
    assert [m.content for m in window.messages[1:-1]] == ["M2", "M3"]

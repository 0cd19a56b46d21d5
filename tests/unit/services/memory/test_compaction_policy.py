import pytest

from services.core.records import StoredMessage
from services.memory.policy import WaterMarkPolicy
from services.settings import MemorySettings


def history(turns: int, cost: int = 50) -> list[StoredMessage]:
    return [StoredMessage(i, "user" if i % 2 == 0 else "assistant", "x", cost) for i in range(turns * 2)]


def test_folds_down_to_low_water() -> None:
    policy = WaterMarkPolicy(high_water=0.85, low_water=0.5, min_verbatim_turns=2)
    hist = history(10)  # 1000 tokens
    fold = policy.plan_fold(hist, room=1000)
    assert fold % 2 == 0
    assert sum(m.tokens for m in hist[fold:]) <= 500
    assert sum(m.tokens for m in hist[fold - 2 :]) > 500  # not one turn more than needed


def test_keeps_min_verbatim_turns_when_they_fit() -> None:
    policy = WaterMarkPolicy(low_water=0.1, min_verbatim_turns=4)
    hist = history(10)
    assert policy.plan_fold(hist, room=1000) == 12  # 4 turns (400 tokens) stay although over 10 %


def test_min_verbatim_yields_when_turns_do_not_fit() -> None:
    policy = WaterMarkPolicy(low_water=0.1, min_verbatim_turns=4)
    hist = history(10)
    fold = policy.plan_fold(hist, room=1000, must_fit=150)
    assert sum(m.tokens for m in hist[fold:]) <= 100


def test_high_water() -> None:
    policy = WaterMarkPolicy(high_water=0.85)
    assert not policy.over_high_water(850, 1000)
    assert policy.over_high_water(851, 1000)


def test_nothing_to_fold_below_target() -> None:
    assert WaterMarkPolicy().plan_fold(history(2), room=1000) == 0


@pytest.mark.parametrize(("low", "high"), [(0.9, 0.5), (0.0, 0.5), (0.5, 1.2)])
def test_invalid_water_marks(low: float, high: float) -> None:
    with pytest.raises(ValueError):
        WaterMarkPolicy(low_water=low, high_water=high)


def test_defaults_match_settings() -> None:
    fields = MemorySettings.model_fields
    policy = WaterMarkPolicy()
    assert (policy.high_water, policy.low_water, policy.min_verbatim_turns) == (
        fields["history_high_water"].default,
        fields["history_low_water"].default,
        fields["history_min_verbatim_turns"].default,
    )


def test_proactive_compaction_waits_until_it_can_fold_two_turns() -> None:
    policy = WaterMarkPolicy(high_water=0.3, low_water=0.15, min_verbatim_turns=4)
    assert not policy.should_compact(900, stored_messages=10, room=1000)  # 5 turns: would fold only one
    assert policy.should_compact(900, stored_messages=12, room=1000)
    assert not policy.should_compact(300, stored_messages=40, room=1000)  # under the high-water mark

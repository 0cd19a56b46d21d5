"""The turn observer contract: told about every turn the engine handled."""

from __future__ import annotations

from typing import Protocol

from services.core.turns import TurnResult


class TurnObserver(Protocol):
    """Told about every turn the engine handled (Prometheus in the bot; a collector elsewhere)."""

    def turn_finished(self, result: TurnResult) -> None: ...

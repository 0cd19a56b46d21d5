"""The operator's tools for the composition root: ACTIONS_FILE loaded and checked into the Catalog
(services/actions/) with the settings the engine runs them by, or none when it is unset. The entry
point's preflight has refused a file with mistakes before; here one is a ConfigurationError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.core.errors import ConfigurationError
from services.ports.actions import ActionLedger

if TYPE_CHECKING:
    from bot.settings import Settings
    from services.actions.catalog import Catalog


@dataclass(frozen=True)
class EngineActions:
    """The tools, the ledger they record in, and the engine's limits (``build_chat_service``'s)."""

    catalog: Catalog | None = None
    ledger: ActionLedger | None = None
    max_calls: int = 4
    confirm_seconds: float = 600.0

    def options(self) -> dict[str, Any]:
        """``build_chat_service``'s keyword arguments for actions (none without a catalog)."""
        if self.catalog is None:
            return {}
        return {"actions": self.catalog, "ledger": self.ledger, "actions_max_calls": self.max_calls,
                "actions_confirm_seconds": self.confirm_seconds}  # fmt: skip

    async def close(self) -> None:
        """Close the catalog's HTTP sender (opened on the first call)."""
        if self.catalog is not None:
            await self.catalog.close()


NO_ACTIONS = EngineActions()


def build_actions(settings: Settings, ledger: ActionLedger) -> EngineActions:
    options = settings.actions
    if not options.actions_file:
        return NO_ACTIONS
    from services.actions.loading import ActionsFileError, load_catalog  # YAML, RE2, JSON Schema

    try:
        catalog = load_catalog(
            options.actions_file,
            operator_chat_configured=settings.bot.handoff_enabled,
            timeout=options.actions_timeout_seconds,
            max_bytes=options.actions_max_response_bytes,
        )
    except ActionsFileError as exc:
        raise ConfigurationError("ACTIONS_FILE: " + "; ".join(exc.lines)) from exc
    return EngineActions(catalog, ledger, options.actions_max_calls_per_turn, options.actions_confirm_seconds)

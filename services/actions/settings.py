"""The actions settings (ACTIONS_*), a pydantic-settings group beside the engine's (services/settings.py
is at its size limit), and the ``${NAME}`` variables ACTIONS_FILE uses, read the same way (the
environment, then .env). Nothing of the project is imported."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field, PositiveInt, create_model
from pydantic_settings import BaseSettings, SettingsConfigDict


class ActionsSettings(BaseSettings):
    """Actions: the operator's API called for the customer, as ACTIONS_FILE declares (docs/actions.md)."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)

    actions_file: str | None = Field(
        default=None,
        description="YAML file declaring the tools the model may call on the operator's API (docs/actions.md); "
        "unset: no actions. The bot refuses to start on an invalid file (`python -m bot actions check`)",
    )
    actions_max_calls_per_turn: int = Field(
        default=4, ge=1, le=16, description="most tool calls in one turn; then the model must answer"
    )
    actions_confirm_seconds: float = Field(
        default=600.0,
        gt=0,
        description="a write waits this long for the customer's confirm button; then it is dropped and the model told",
    )
    actions_approval_seconds: float = Field(
        default=86400.0,
        gt=0,
        description="an approval tool's call waits this long for an operator's Approve / Reject; "
        "then it is dropped and the model told",
    )
    actions_timeout_seconds: float = Field(
        default=15.0, gt=0, le=300, description="total time of one request to the operator's API (connect: 5 s)"
    )
    actions_max_response_bytes: PositiveInt = Field(
        default=1_000_000, description="a larger answer of the operator's API is cut and refused"
    )


def read_variables(names: Iterable[str]) -> dict[str, str]:
    """The ``${NAME}`` variables ACTIONS_FILE uses, read as every setting is (the environment, then
    .env); a variable unset or empty is left out. Not a settings group (the operator names them), so
    the class is made here, out of the configuration reference's sight."""

    class Variables(BaseSettings):
        model_config = SettingsConfigDict(
            env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True
        )

    wanted = sorted(set(names))
    fields: dict[str, Any] = {
        f"v{index}": (str | None, Field(default=None, validation_alias=name)) for index, name in enumerate(wanted)
    }
    values = create_model("ActionsFileVariables", __base__=Variables, **fields)()
    found = {name: getattr(values, f"v{index}") for index, name in enumerate(wanted)}
    return {name: value for name, value in found.items() if value}

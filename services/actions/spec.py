"""The ACTIONS_FILE format as pydantic models, every key known (``extra="forbid"``: a misspelt key is
an error, not ignored), and the rules for names: a tool's name, the identity names no parameter may
take (the customer's identity comes from code only), the handoff tool's name (taken)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.core.actions import Risk

HANDOFF_TOOL = "handoff_to_operator"
"""The handoff tool's name (prompts/support_chat.py's HANDOFF_TOOL; a test checks they agree)."""
TOOL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
TOOL_NAME_MAX = 64
PARAM_NAME_MAX = 64
STRING_MAX = 4096
"""The longest maxLength a string parameter may declare (every call's JSON is capped lower anyway)."""
DEFAULT_MAX_LENGTH = 256
"""A string parameter's maxLength when it declares none."""

IDENTITY_NAMES = frozenset(
    {
        "customer", "customerid", "telegramid", "tgid", "userid", "user", "uid", "chatid", "phone",
        "phonenumber", "mobile", "email", "accountid", "clientid", "contact",
    }
)  # fmt: skip
"""Parameter names (lower case, without _ and -) refused at load: who the customer is comes from
``{customer.*}`` placeholders, filled by the bot, never from the model's arguments."""


def tool_name_problem(name: str) -> str | None:
    if not name or len(name) > TOOL_NAME_MAX or not set(name) <= TOOL_NAME_CHARS:
        return "the name must be 1-64 characters of a-z A-Z 0-9 _ - (the model's function name): rename it"
    if name == HANDOFF_TOOL:
        return f"{HANDOFF_TOOL} is the bot's own handoff tool: give this tool another name"
    return None


def is_identity_name(name: str) -> bool:
    plain = name.lower().replace("_", "").replace("-", "")
    return plain in IDENTITY_NAMES or plain.startswith(("customer", "telegram")) or plain.endswith("userid")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class HostSpec(_Strict):
    host: str = Field(min_length=1, max_length=260, description="a name or an address, with :port if not the scheme's")
    private: bool = Field(default=False, description="a private address, or plain http, allowed for this host")


Scalar = bool | int | float | str


class ParamSpec(_Strict):
    """One argument the model fills (a subset of JSON Schema; every parameter is required)."""

    type: Literal["string", "integer", "number", "boolean"]
    description: str | None = Field(default=None, max_length=1000)
    enum: list[Scalar] | None = Field(default=None, min_length=1, max_length=200)
    pattern: str | None = Field(default=None, min_length=1, max_length=1000)
    min_length: int | None = Field(default=None, alias="minLength", ge=0, le=STRING_MAX)
    max_length: int | None = Field(default=None, alias="maxLength", ge=1, le=STRING_MAX)
    minimum: int | float | None = None
    maximum: int | float | None = None


Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


class ToolSpec(_Strict):
    """One tool: what the model is told, who decides, and the request it makes."""

    description: str = Field(min_length=1, max_length=1024)
    risk: Risk
    confirm: str | None = Field(default=None, min_length=1, max_length=500)
    method: Method
    url: str = Field(min_length=1, max_length=2000)
    params: dict[str, ParamSpec] = Field(default_factory=dict, max_length=32)
    headers: dict[str, str] = Field(default_factory=dict, max_length=32)
    query: dict[str, str] = Field(default_factory=dict, max_length=32)
    body: Any = Field(default=None, alias="json")
    """The JSON body template (``json:`` in the file), nested mappings and lists."""
    result: list[str] = Field(default_factory=list, max_length=50)


TOP_KEYS = ("hosts", "tools")

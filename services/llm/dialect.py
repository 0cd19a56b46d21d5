"""What an OpenAI-compatible endpoint accepts: the instruction message's role and the name of the reply cap.

``auto``: OpenAI's own API (base URL unset or host api.openai.com) gets developer and
max_completion_tokens; any other server (Azure included) system and max_tokens, which all take (some
refuse developer, some silently ignore max_completion_tokens). An error body naming the value in use
as refused switches ``auto`` to the other one, once per process, with one INFO line; a fixed setting
is kept and its refusal named in one ERROR line. The client holds one Dialect: no module state."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import openai

from services.core.errors import LLMRequestRejectedError

log = logging.getLogger(__name__)

RoleSetting = Literal["auto", "developer", "system"]
LimitSetting = Literal["auto", "max_completion_tokens", "max_tokens"]
Feature = Literal["instruction_role", "token_limit_param", "response_format", "tools"]
INSTRUCTION_ROLES = frozenset({"developer", "system"})
LIMIT_PARAMS = ("max_completion_tokens", "max_tokens")
_PARAM_NAMED = {name: re.compile(rf"\b{name}\b") for name in LIMIT_PARAMS}
"""A limit parameter's name as a word of an error body (max_tokens inside max_completion_tokens is not)."""
OPENAI_HOST = "api.openai.com"

_NEVER_A_REFUSAL = frozenset({401, 402, 403, 404, 408, 429})
"""A key, billing, model, timeout or rate-limit answer is never the refusal of a feature."""
_BODY_CHARS = 32_000
"""Of an error body, the part read (a server may echo the whole request in it)."""
_FORMAT_REFUSED = re.compile(
    r"input should be|not supported|unsupported|does not support|invalid|not allowed|not permitted|unknown"
    r"|unrecogni[sz]ed|extra_forbidden"
)
"""Beside "response_format", what makes an error body its refusal: a 500 that merely echoes the request
(it holds "response_format" too) is an outage, not a refusal."""
_TOOLS_NAMED = re.compile(r"\btools?\b|tool_choice|tool[ _-]?call|\bfunctions?\b")
"""An error body naming the tools (llama.cpp: "tools param requires --jinja"; vLLM: "auto tool choice
requires --enable-auto-tool-choice"; Ollama: "does not support tools")."""
_TOOLS_STATUSES = frozenset({400, 422, 500, 501})
_TOOLS_REFUSED = re.compile(
    r"not supported|does not support|unsupported|requires|unknown|unrecogni[sz]ed|extra_forbidden|not allowed"
)
"""Beside the tools' name, what makes an error body their refusal: OpenAI's context-length 400 ("500 in the
functions") and a 500 echoing the request name them too, and neither may switch tools off."""
_NOT_A_TOOLS_REFUSAL = "context_length_exceeded"
"""The error code (in the body's code or text) that is never a refusal of the tools, whatever it names."""
_PARAM_REFUSED = re.compile(
    r"unsupported|not supported|unrecogni[sz]ed|unknown|not permitted|not allowed|extra_forbidden|instead"
)


def is_openai_api(base_url: str | None) -> bool:
    """Whether ``base_url`` is OpenAI's own API: unset, or its host is api.openai.com."""
    if not base_url or not base_url.strip():
        return True
    return (urlsplit(base_url.strip()).hostname or "").lower() == OPENAI_HOST


@dataclass(frozen=True, slots=True)
class Refusal:
    """The endpoint refused ``value`` of ``feature`` (HTTP ``status``)."""

    feature: Feature
    value: str
    status: int


def refusal_of(exc: openai.APIStatusError, sent: Mapping[str, Any]) -> Refusal | None:
    """The feature of request ``sent`` that the error's body names as refused, or None (an outage, a
    bad question). 4xx and 5xx alike: llama-cpp-python answers a request it does not validate with 500."""
    status = exc.status_code
    if status in _NEVER_A_REFUSAL:
        return None
    text = _error_text(exc)
    role = next((m.get("role") for m in sent.get("messages") or () if m.get("role") in INSTRUCTION_ROLES), None)
    if isinstance(role, str) and _names_role(text, role):
        return Refusal("instruction_role", role, status)
    param = next((name for name in LIMIT_PARAMS if name in sent), None)
    if param is not None and _PARAM_NAMED[param].search(text) and _PARAM_REFUSED.search(text):
        return Refusal("token_limit_param", param, status)
    response_format = sent.get("response_format")
    if isinstance(response_format, Mapping) and "response_format" in text and _FORMAT_REFUSED.search(text):
        return Refusal("response_format", str(response_format.get("type")), status)
    if sent.get("tools") and _refuses_tools(status, text):
        return Refusal("tools", "tools", status)
    return None


def _refuses_tools(status: int, text: str) -> bool:
    """Whether an error (``text``: its message, param and code) refuses the tools: a 400/422/500/501
    naming them with a refusal phrase, never a prompt over the model's context."""
    if status not in _TOOLS_STATUSES or _NOT_A_TOOLS_REFUSAL in text:
        return False
    return _TOOLS_NAMED.search(text) is not None and _TOOLS_REFUSED.search(text) is not None


def _error_text(exc: openai.APIStatusError) -> str:
    """The error's message, param and code, lower-cased (read only for these checks: it may echo the
    prompt, so it is never logged nor put in an exception)."""
    body = exc.body
    if isinstance(body, Mapping):
        parts: Iterable[object] = (body.get("message"), body.get("param"), body.get("code"), exc.message)
    else:
        parts = (body, exc.message)
    return " ".join(str(part)[:_BODY_CHARS] for part in parts if part).lower()


_ROLE_REFUSED = {
    role: (
        re.compile(rf"""\binput['"]?\s*:\s*['"]{role}['"]"""),
        re.compile(
            rf"(?:not support|unsupported|unknown|invalid|not allowed|not permitted|unrecogni[sz]ed)"
            rf"[^\n.]{{0,60}}\b{role}\b"
        ),
        re.compile(
            rf"\b{role}\b['\"]?\s+(?:role\s+)?(?:is\s+)?(?:not supported|unsupported|not allowed|unknown|invalid)"
        ),
    )
    for role in sorted(INSTRUCTION_ROLES)
}
"""Per instruction role, the error texts that refuse it (see ``_names_role``)."""


def _names_role(text: str, role: str) -> bool:
    """Whether ``text`` refuses the instruction role ``role``: pydantic's error naming it as the input
    (llama-cpp-python: ``'input': 'developer'``), or a refusal word before or after it (OpenAI:
    "does not support 'system' with this model"; a chat template: "System role not supported")."""
    if "role" not in text:
        return False
    return any(pattern.search(text) for pattern in _ROLE_REFUSED[role])


class FeatureRefusedError(LLMRequestRejectedError):
    """The endpoint refused the instruction role or the reply-cap parameter of a request (``refusal``)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(
            f"the LLM endpoint refused {refusal.feature} {refusal.value} (HTTP {refusal.status})", status=refusal.status
        )
        self.refusal = refusal


class _Choice:
    """One thing the endpoint must accept: fixed by its setting, or (``auto``) switched once to the
    other value when a refusal names the one in use."""

    def __init__(self, setting_name: str, values: tuple[str, str], setting: str, start: str) -> None:
        self._name = setting_name
        self._values = values
        self.auto = setting == "auto"
        self.value = start if self.auto else setting
        self._switched = False
        self._reported = False

    def learn(self, refusal: Refusal) -> bool:
        """Whether the value now in use differs from the refused one (a request may be made again)."""
        if refusal.value != self.value:
            return refusal.value in self._values  # another call switched it already
        if not self.auto or self._switched:
            if not self._reported:
                self._reported = True
                fix = "it refused the other value too" if self.auto else f"set {self._name}=auto"
                log.error("the LLM endpoint refuses %s=%s (HTTP %d): %s", self._name, self.value, refusal.status, fix)
            return False
        self._switched = True
        first, second = self._values
        self.value = second if self.value == first else first
        log.info(
            "%s=auto: the LLM endpoint refused %s (HTTP %d); using %s from now on in this process",
            self._name, refusal.value, refusal.status, self.value,
        )  # fmt: skip
        return True


class Dialect:
    """The instruction role and reply-cap parameter this client sends, per OPENAI_INSTRUCTION_ROLE and
    OPENAI_TOKEN_LIMIT_PARAM (see the module). ``instruction_role=None``: the engine's roles are sent
    as built (a client made without settings, as in tests)."""

    def __init__(
        self,
        *,
        instruction_role: RoleSetting | None = None,
        token_limit_param: LimitSetting = "max_completion_tokens",
        base_url: str | None = None,
    ) -> None:
        openai_api = is_openai_api(base_url)
        self._role = (
            None
            if instruction_role is None
            else _Choice(
                "OPENAI_INSTRUCTION_ROLE",
                ("developer", "system"),
                instruction_role,
                "developer" if openai_api else "system",
            )
        )
        self._limit = _Choice(
            "OPENAI_TOKEN_LIMIT_PARAM",
            LIMIT_PARAMS,
            token_limit_param,
            "max_completion_tokens" if openai_api else "max_tokens",
        )
        self.tools = True
        """Whether tools are sent (False once the endpoint refused them: the bot answers without actions)."""

    @property
    def role(self) -> str | None:
        """The instruction role sent now (None: the engine's, unchanged)."""
        return self._role.value if self._role is not None else None

    @property
    def token_limit_param(self) -> str:
        return self._limit.value

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` (as sent) with the instruction role in use."""
        if self._role is not None and message.get("role") in INSTRUCTION_ROLES:
            message["role"] = self._role.value
        return message

    def learn(self, refusal: Refusal) -> bool:
        """Take a refusal of the role or the parameter; True when the request is worth making again."""
        if refusal.feature == "instruction_role":
            return self._role is not None and self._role.learn(refusal)
        if refusal.feature == "token_limit_param":
            return self._limit.learn(refusal)
        if refusal.feature == "tools" and self.tools:
            self.tools = False
            log.warning(
                "the LLM endpoint refused the request's tools (HTTP %d, its error names them as not supported): "
                "the bot answers without actions or the handoff tool from now on in this process",
                refusal.status,
            )
            return True
        return False

"""A small registry of versioned prompt templates: old versions stay, one version is active per prompt."""

from __future__ import annotations

import string
from dataclasses import dataclass, field


class UnknownPromptError(LookupError):
    """Asked for a prompt id or version that is not registered."""


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """One version of one prompt. ``body`` uses ``$name`` placeholders (string.Template syntax)."""

    id: str
    version: str
    body: str
    required: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        found = {
            m.group("named") or m.group("braced")
            for m in string.Template.pattern.finditer(self.body)
            if m.group("named") or m.group("braced")
        }
        if found != set(self.required):
            raise ValueError(
                f"prompt {self.id}@{self.version}: placeholders {sorted(found)} "
                f"differ from required variables {sorted(self.required)}"
            )

    def render(self, **variables: str) -> str:
        missing = self.required - variables.keys()
        if missing:
            raise KeyError(f"prompt {self.id}@{self.version} needs {sorted(missing)}")
        return string.Template(self.body).substitute(variables)


class PromptRegistry:
    """Holds every version of every prompt and which version of each is active."""

    def __init__(self) -> None:
        self._versions: dict[str, dict[str, PromptTemplate]] = {}
        self._active: dict[str, str] = {}

    def register(self, template: PromptTemplate, *, active: bool = False) -> None:
        versions = self._versions.setdefault(template.id, {})
        if template.version in versions:
            raise ValueError(f"prompt {template.id}@{template.version} is already registered")
        versions[template.version] = template
        if active or template.id not in self._active:
            self._active[template.id] = template.version

    def activate(self, prompt_id: str, version: str) -> None:
        self.get(prompt_id, version)
        self._active[prompt_id] = version

    def get(self, prompt_id: str, version: str | None = None) -> PromptTemplate:
        """The given version of a prompt, or its active version when ``version`` is None."""
        versions = self._versions.get(prompt_id)
        if versions is None:
            raise UnknownPromptError(f"unknown prompt {prompt_id!r}; known prompts: {sorted(self._versions)}")
        wanted = version or self._active[prompt_id]
        template = versions.get(wanted)
        if template is None:
            raise UnknownPromptError(
                f"unknown version {wanted!r} of prompt {prompt_id!r}; known versions: {sorted(versions)}"
            )
        return template

    def versions(self, prompt_id: str) -> list[str]:
        return sorted(self._versions.get(prompt_id, {}))

    def active_version(self, prompt_id: str) -> str:
        self.get(prompt_id)
        return self._active[prompt_id]

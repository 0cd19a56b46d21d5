"""Every prompt the bot ships: one module per prompt, registered here (the registry itself knows none)."""

from __future__ import annotations

from prompts import image_note, summary, support_chat
from prompts.registry import PromptRegistry


def default_registry() -> PromptRegistry:
    """A registry with every prompt the bot ships, each at its active version."""
    registry = PromptRegistry()
    for module in (support_chat, summary, image_note):
        for template in module.VERSIONS:
            registry.register(template)
        registry.activate(module.PROMPT_ID, module.ACTIVE)
    return registry

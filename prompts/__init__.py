"""Versioned prompt templates. Imports neither ``services`` nor ``bot``."""

from prompts.registry import PromptRegistry, PromptTemplate, UnknownPromptError, default_registry

__all__ = ["PromptRegistry", "PromptTemplate", "UnknownPromptError", "default_registry"]

"""Versioned prompt templates. Imports neither ``services`` nor ``bot``."""

from prompts.catalog import default_registry
from prompts.registry import PromptRegistry, PromptTemplate, UnknownPromptError

__all__ = ["PromptRegistry", "PromptTemplate", "UnknownPromptError", "default_registry"]

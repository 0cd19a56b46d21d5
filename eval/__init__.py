"""Fact-retention evaluation: scripted support dialogues long enough to force several compactions,
with control facts whose survival is checked in the summary and in the model's final answer."""

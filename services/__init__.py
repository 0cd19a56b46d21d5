"""Conversation engine: token counting, budgeted window, summaries, sessions and the LLM client.

Nothing in this package knows about Telegram or aiogram.
"""

"""Thin aiogram routers: read the update, call the chat service, render the result."""

from aiogram import Router

from bot.telegram.handlers import chat, commands, errors, unsupported


def all_routers() -> list[Router]:
    """Fresh routers (a router attaches to one dispatcher), in matching order: errors, commands, text,
    everything else."""
    return [m.make_router() for m in (errors, commands, chat, unsupported)]

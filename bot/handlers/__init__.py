"""Thin aiogram routers: read the update, call the chat service, render the result."""

from aiogram import Router

from bot.handlers import chat, commands, errors, unsupported


def all_routers() -> list[Router]:
    """In matching order: errors, commands, text, everything else."""
    return [errors.router, commands.router, chat.router, unsupported.router]

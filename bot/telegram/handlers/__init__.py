"""Thin aiogram routers: read the update, call the chat service, render the result."""

from aiogram import Router

from bot.telegram.handlers import actions, chat, commands, errors, faq, feedback, handoff, media, unsupported


def all_routers() -> list[Router]:
    """Fresh routers (a router attaches to one dispatcher), in matching order: errors, the operator
    group (its /faq and digest replies first) and /operator, commands, the customer's messages during a
    handoff, the actions' buttons and a shared contact, text, media, everything else; the feedback
    buttons (callback queries)."""
    return [
        errors.make_router(),
        faq.make_router(),
        handoff.make_router(),
        commands.make_router(),
        handoff.make_relay_router(),
        actions.make_router(),
        chat.make_router(),
        media.make_router(),
        unsupported.make_router(),
        feedback.make_router(),
    ]

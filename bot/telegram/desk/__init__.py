"""The operator desk: handoff to a human operator on the Telegram side, in three parts (``start``,
``relay`` both ways with the operators' commands, ``ending``) over what they share (``base``)."""

from bot.telegram.desk.relay import Relaying
from bot.telegram.desk.start import Starting


class HandoffDesk(Starting, Relaying):
    """What the handlers call. ``enabled`` is False without ``OPERATOR_CHAT_ID``."""


__all__ = ["HandoffDesk"]

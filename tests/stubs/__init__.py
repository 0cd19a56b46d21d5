"""Loopback stand-ins for the outside world: an OpenAI-compatible server and a Telegram Bot API server."""

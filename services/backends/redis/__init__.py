"""The Redis backend: every key (keys.py), the Lua building blocks and error translation (scripts.py),
the store, the queue, the rate limiter, the poller and the dead letters."""

"""The queue workers' machinery (REDIS_URL set): the worker that claims a chat and serves its inbox,
the durable intake (webhook and leader poller), the supervisor that restarts their tasks."""

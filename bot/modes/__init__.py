"""The two ways the bot runs (``python -m bot`` picks one): in one process (inprocess, REDIS_URL unset)
or as queue workers sharing Redis (queued)."""

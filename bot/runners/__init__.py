"""How the bot runs: in one process (inprocess) or as queue workers against Redis (queued)."""

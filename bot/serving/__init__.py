"""What both modes use to serve: the ops server (metrics, health), start-up retries, the in-process
webhook app, the handoff reply-deadline watcher, the transient-failure rule, the speed-ups (fastpath)."""

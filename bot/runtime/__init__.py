"""What keeps a worker running: the queue worker, durable intake (webhook and poller), the task
supervisor, the ops server, start-up retries."""

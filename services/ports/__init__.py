"""The contracts of the engine and the runtime, one module each with its data types; adding a
backend means implementing them, and nothing outside the factory looks at concrete types.

- ``sessions``: SessionStore (a chat's memory), TurnStatus, CommitResult
- ``queue``: WorkQueue, PollingLease, QueueItem, Claim, Taken, Step
- ``handoffs``: HandoffStore (handoff records, relay marks, topics, deadlines)
- ``deadletters``: DeadLetters, Quarantine and their records
- ``ratelimit``: RateLimiter, RateDecision
- ``chat_model``: ChatModel (the language model), ``observer``: TurnObserver
- ``backend``: Backend, QueuedBackend (what the factory builds)
"""

"""The engine: one customer message in, one reply out, memory kept within the token budget.

Pure parts (window, token counter, compaction policy, summary state, identifiers, prompt format)
do no I/O; ChatService and Compactor reach the store, the model and the observer through the
Protocols in ``services.ports``."""

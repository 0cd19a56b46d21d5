"""The command-line tools behind ``python -m bot <command>``: preflight checks, set-webhook, console,
and the operator commands for dead letters and quarantine."""

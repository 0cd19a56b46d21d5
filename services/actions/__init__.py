"""Actions: the operator's API called for the customer (ACTIONS_FILE), safely."""

"""Backends behind the ports: the in-process one (memory) and Redis (one server or a cluster)."""

"""Benchmark and chaos scripts: run with ``.venv/bin/python -m benchmarks.<name> --help``."""

"""Command-line entry points of pyrmq."""

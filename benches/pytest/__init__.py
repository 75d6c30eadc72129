"""pytest-benchmark suites for the store; run them with ``pytest benches/pytest``."""

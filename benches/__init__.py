"""Benchmarks for the pyrmq store and the pure-Python baseline they are compared against."""

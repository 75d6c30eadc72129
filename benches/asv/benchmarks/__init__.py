"""asv suites for the pyrmq store; each suite runs pyrmq and the pure-Python baseline."""

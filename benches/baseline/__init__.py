"""Pure-Python store of pyrmq's on-disk formats, the yardstick for the benchmarks."""

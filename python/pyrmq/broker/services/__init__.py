"""Long-running broker services."""

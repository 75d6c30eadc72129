"""Request processors of the broker, one module per area (as RocketMQ's processor package)."""

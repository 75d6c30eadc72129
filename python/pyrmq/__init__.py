"""pyrmq: a RocketMQ-compatible message broker with a Rust storage engine."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pyrmq-broker")
except PackageNotFoundError:
    __version__ = "0.0.0"

__all__ = ["__version__"]

"""Name-server address lists, as RocketMQ writes them: ``host:port`` entries joined by ``;``."""

import re

__all__ = ["split_addresses"]


def split_addresses(text: str) -> list[str]:
    """The ``host:port`` entries of ``text`` (separated by ``;`` or ``,``), blanks dropped.

    Raises:
        ValueError: An entry has no host, or no port in 0..65535.
    """
    entries = [a.strip() for a in re.split(r"[;,]", text) if a.strip()]
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        if not (sep and host and port.isascii() and port.isdigit() and int(port) <= 65535):
            raise ValueError(f"name server address {entry!r} is not host:port")
    return entries

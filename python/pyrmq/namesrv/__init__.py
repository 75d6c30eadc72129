"""The name server: broker registration, liveness and topic routes."""

from pyrmq.namesrv.server import NameServer, NamesrvConfig

__all__ = ["NameServer", "NamesrvConfig"]

"""``pyrmq admin``: what RocketMQ's ``mqadmin`` does for a running cluster, under kebab-case
names, by what it asks about: brokers and name servers, topics, groups, messages."""

from . import brokers, groups, messages, topics
from .group import admin

__all__ = ["admin", "brokers", "groups", "messages", "topics"]

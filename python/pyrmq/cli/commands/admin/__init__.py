"""``pyrmq admin``: what RocketMQ's ``mqadmin`` does for a running cluster, under kebab-case
names, by what it asks about: brokers and name servers, topics, groups, messages, ACL accounts."""

from . import acl, brokers, groups, messages, topics
from .group import admin

__all__ = ["acl", "admin", "brokers", "groups", "messages", "topics"]

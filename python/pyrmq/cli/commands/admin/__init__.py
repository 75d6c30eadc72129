"""``pyrmq admin``: what RocketMQ's ``mqadmin`` does for a running cluster, under kebab-case
names, by what it asks about: brokers and name servers, topics, groups, messages (looked up,
pulled or sent), ACL accounts, and the metadata export."""

from . import acl, brokers, export, groups, messages, probe, pulls, topics
from .group import admin

__all__ = ["acl", "admin", "brokers", "export", "groups", "messages", "probe", "pulls", "topics"]

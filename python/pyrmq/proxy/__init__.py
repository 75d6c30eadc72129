"""RocketMQ 5's gRPC protocol, served by the broker (RocketMQ's proxy in "local" mode).

The official 5.x clients (``rocketmq-python-client`` and the other SDKs) connect to the
broker's gRPC port (``pyrmq serve``: 8081; ``grpcServerPort`` in broker.conf) as they would to
RocketMQ's proxy: they send NORMAL, FIFO, DELAY and TRANSACTION messages, and consume them with
simple and push consumers, which receive, acknowledge and nack messages by "pop" (``pop.py``),
in order per message group for orderly groups, filtered by tag or SQL92. In a cluster, every
broker serves gRPC and its routes name every broker that holds a topic (``cluster.py``).
"""

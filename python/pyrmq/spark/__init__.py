"""A PySpark data source for RocketMQ topics (``pip install 'pyrmq-broker[spark]'``).

>>> from pyspark.sql import SparkSession  # doctest: +SKIP
>>> from pyrmq.spark import register  # doctest: +SKIP
>>> spark = SparkSession.builder.getOrCreate()  # doctest: +SKIP
>>> register(spark)  # doctest: +SKIP
>>> df = (spark.read.format("pyrmq")  # doctest: +SKIP
...       .option("nameServer", "127.0.0.1:9876").option("subscribe", "TopicTest").load())
>>> query = (spark.readStream.format("pyrmq")  # doctest: +SKIP
...          .option("nameServer", "127.0.0.1:9876").option("subscribe", "TopicTest")
...          .option("maxOffsetsPerTrigger", "10000").load()
...          .writeStream.format("parquet").option("checkpointLocation", "/tmp/ckpt")
...          .trigger(availableNow=True).start("/tmp/out"))
>>> (df.selectExpr("body", "'Tag' || queue_id AS tags").write.format("pyrmq")  # doctest: +SKIP
...  .option("nameServer", "127.0.0.1:9876").option("topic", "TopicCopy").mode("append").save())

Reads take ``nameServer`` and one of ``subscribe`` (comma-separated topics),
``subscribePattern`` (``re.fullmatch`` over user topics) and ``assign``
(``{"topic": {"broker": [queue ids]}}``); optionally ``subExpression`` (a tag expression),
``startingOffsets`` (``earliest``, ``latest`` or ``{"topic": {"broker": {"queue id": offset}}}``
with -2 for earliest and -1 for latest), ``startingTimestamp`` and
``startingOffsetsByTimestamp`` (epoch ms) with ``startingOffsetsByTimestampStrategy``
(``error`` or ``latest``), ``endingOffsets``, ``endingTimestamp`` and
``endingOffsetsByTimestamp`` (batch reads), ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``
and ``maxTriggerDelay`` (streams), ``consumerGroup`` or ``consumerGroupPrefix`` (the group
whose offsets show a stream's progress), ``failOnDataLoss`` (true), ``minPartitions``,
``maxRecordsPerPartition``, ``pullBatchSize`` (32), ``pullTimeoutMs``,
``includeProperties`` and ``pushDownPredicate`` (batch reads: the query's filters narrow what
is pulled, see :mod:`pyrmq.spark.pushdown`; needs ``spark.sql.python.filterPushdown.enabled``).
A batch read starts at the earliest offsets, a new stream at the latest.

Reads and writes take ``rocketmq.accessKey`` and ``rocketmq.secretKey`` for brokers with an
ACL: every request is signed as that account. Pulls name ``consumerGroup`` (else
``consumerGroupPrefix``), which the account must be allowed to consume as. With
``rocketmq.tls=true`` they connect over TLS, checking the server against
``rocketmq.tls.caFile`` (else the system's roots) unless ``rocketmq.tls.verify=false``;
``rocketmq.tls.certFile`` and ``rocketmq.tls.keyFile`` present a client certificate.

Writes, batch or streaming, take ``nameServer``, and ``topic`` unless the rows have a
``topic`` column (rows: ``body``, ``tags``, ``keys``, ``properties``, ``queue_id``,
``broker_name``, ``sharding_key``, ``delay_ms``, ``deliver_time``); ``deliveryGuarantee``
(``at_least_once`` or ``exactly_once``, see :mod:`pyrmq.spark.sink`), ``queueSelector``
(``round_robin`` or ``hash``, see :mod:`pyrmq.spark.placement`), ``commitTopic``,
``checkImmunitySeconds``, ``producerGroup`` and ``includeProperties``.
"""

from pyspark.sql import SparkSession

from pyrmq.spark.source import SCHEMA, DataLossError, RocketMQDataSource

__all__ = ["SCHEMA", "DataLossError", "RocketMQDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Makes ``format("pyrmq")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(RocketMQDataSource)

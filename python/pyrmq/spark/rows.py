"""The rows a read returns: the fixed schema, and received messages as Arrow record batches.

Spark takes a Python source's rows as tuples and converts them to Arrow value by value in the
reading worker, which cost more than pulling the messages. Batches built here a column at a
time skip that conversion.
"""

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyrmq import properties as prop
from pyrmq.client.message import MessageExt, MessageQueue
from pyrmq.spark.sink import RESERVED

__all__ = ["ARROW_SCHEMA", "SCHEMA", "record_batch"]

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker_name", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), True),
        StructField("tags", StringType(), True),
        StructField("body", BinaryType(), True),
        StructField("properties", MapType(StringType(), StringType(), False), True),
        StructField("born_timestamp", TimestampType(), True),
        StructField("store_timestamp", TimestampType(), True),
        StructField("born_host", StringType(), True),
        StructField("store_host", StringType(), True),
        StructField("reconsume_times", IntegerType(), True),
    ]
)
"""Every read's rows: one per message. ``properties`` holds the user properties when the read
sets ``includeProperties``, and is null otherwise."""

ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
"""``SCHEMA`` as Spark's reading worker expects batches of it (timestamps in µs, UTC)."""

# Shown in their own columns, or the broker's and the sink's bookkeeping.
_HIDDEN = RESERVED
_TIME = ARROW_SCHEMA.field("born_timestamp").type
_KEYS = ARROW_SCHEMA.field("keys").type
_PROPERTIES = ARROW_SCHEMA.field("properties").type


def record_batch(
    mq: MessageQueue, messages: Sequence[MessageExt], include_properties: bool
) -> pa.RecordBatch:
    """``messages`` of ``mq`` as rows of :data:`SCHEMA`."""
    n = len(messages)
    keys = [m.keys for m in messages]
    if include_properties:
        user: list[dict[str, str] | None] = [
            {k: v for k, v in m.properties.items() if k not in _HIDDEN} for m in messages
        ]
    else:
        user = [None] * n
    columns = [
        pa.array([mq.topic] * n, pa.string()),
        pa.array([mq.broker_name] * n, pa.string()),
        pa.array([mq.queue_id] * n, pa.int32()),
        pa.array([m.queue_offset for m in messages], pa.int64()),
        pa.array([m.id for m in messages], pa.string()),
        pa.array([k.split(prop.KEY_SEPARATOR) if k else None for k in keys], _KEYS),
        pa.array([m.tags for m in messages], pa.string()),
        pa.array([m.body for m in messages], pa.binary()),
        pa.array(user, _PROPERTIES),
        pa.array([m.born_timestamp * 1000 for m in messages], _TIME),
        pa.array([m.store_timestamp * 1000 for m in messages], _TIME),
        pa.array([m.born_host for m in messages], pa.string()),
        pa.array([m.store_host for m in messages], pa.string()),
        pa.array([m.reconsume_times for m in messages], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

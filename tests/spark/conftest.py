"""One SparkSession for every Spark test (a JVM takes seconds to start), on local[2] with every
listener on 127.0.0.1, and one ``pyrmq serve``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import serving

pyspark = pytest.importorskip("pyspark", reason="the Spark source's tests need pyspark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from pyrmq.spark import register

    # Workers start the interpreter PYSPARK_PYTHON names, which must be the one with pyrmq.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pyrmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def addrs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(name server, broker) of one ``pyrmq serve``."""
    with serving(Path(tmp_path_factory.mktemp("serve"))) as server:
        yield server.addresses()

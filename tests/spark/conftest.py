"""One local[2] SparkSession for the whole Spark suite (starting Spark costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

from epochguard.spark import local_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from tests.spark.stream_matrix import spark_kafka_jars

    # Spark's own Kafka source on the classpath when `make spark-kafka` fetched it (test_stream_matrix.py).
    jars = spark_kafka_jars()
    session = local_session("local[2]", app_name="epochguard-tests", shuffle_partitions=2,
                            conf={"spark.jars": ",".join(jars)} if jars else None)
    yield session
    session.stop()

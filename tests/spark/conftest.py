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
    session = local_session("local[2]", app_name="epochguard-tests", shuffle_partitions=2)
    yield session
    session.stop()

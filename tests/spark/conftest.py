"""The Spark suite: every test is marked `spark`; its session is tests/conftest.py's `spark` fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.spark)

"""What a user imports: the issue's and the docs' first lines work as written, and importing the sans-IO
client (as `import epochguard` does) never loads the network layer or asyncio."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import epochguard.client
from epochguard.client import (
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    KafkaConsumer,
    KafkaProducer,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
)

ROOT = Path(__file__).parents[2]


def test_the_documented_names_are_the_client_classes():
    from epochguard.client import kafka_consumer, kafka_producer, producer
    from epochguard.types import ConsumerRecord as Record
    from epochguard.types import OffsetAndMetadata as Offsets
    from epochguard.types import TopicPartition as Partition

    assert (KafkaConsumer, AsyncConsumer) == (kafka_consumer.KafkaConsumer, kafka_consumer.AsyncConsumer)
    assert (KafkaProducer, AsyncProducer) == (kafka_producer.KafkaProducer, kafka_producer.AsyncProducer)
    assert (TopicPartition, OffsetAndMetadata, ConsumerRecord, RecordMetadata) == (
        Partition, Offsets, Record, producer.RecordMetadata)
    assert {name: getattr(epochguard.client, name) for name in epochguard.client.__all__}
    assert set(epochguard.client.__all__) <= set(dir(epochguard.client))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'KafkaAdminClient'"):
        epochguard.client.KafkaAdminClient  # noqa: B018
    with pytest.raises(ImportError, match="KafkaAdminClient"):
        exec("from epochguard.client import KafkaAdminClient", {})


@pytest.mark.parametrize("doc", ["docs/client.md", "README.md"])
def test_the_docs_imports_run(doc):
    """Every `from epochguard.client... import ...` line of the page imports (a renamed class fails here)."""
    lines = re.findall(r"^\s*(from epochguard\.client[\w.]* import [^\n#(]+)", (ROOT / doc).read_text(), re.M)
    if doc == "docs/client.md":
        assert "from epochguard.client import AsyncConsumer, KafkaConsumer, OffsetAndMetadata, TopicPartition" in lines
    for line in lines:
        exec(line.strip(), {})


def test_the_issue_example_imports_in_a_fresh_interpreter():
    """The issue's first line, alone, in a new process: the lazy names resolve with nothing imported before."""
    code = ("from epochguard.client import KafkaConsumer, AsyncConsumer, KafkaProducer, AsyncProducer\n"
            "print(KafkaConsumer.__module__, AsyncProducer.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["epochguard.client.kafka_consumer", "epochguard.client.kafka_producer"]


def test_the_sans_io_client_does_not_load_the_network_layer():
    code = ("import sys, epochguard, epochguard.client.consumer, epochguard.client.metadata, epochguard.client\n"
            "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith(('epochguard.client.network',"
            " 'epochguard.client.kafka_', 'epochguard.client.blocking'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"

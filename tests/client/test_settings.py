"""kafka-python's settings, name by name: a kafka-python user who changes one import gets each setting
honoured or refused with the reason, never a bare "unrecognised" for a name kafka-python has and never a
setting silently ignored."""

from __future__ import annotations

import os

import pytest

from epochguard.client.kafka_consumer import CONSUMER_DEFAULTS, consumer_config
from epochguard.client.kafka_consumer import UNSUPPORTED_SETTINGS as CONSUMER_UNSUPPORTED
from epochguard.client.kafka_producer import PRODUCER_DEFAULTS, producer_config
from epochguard.client.kafka_producer import UNSUPPORTED_SETTINGS as PRODUCER_UNSUPPORTED


def _kafka_python():
    try:
        import kafka
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("kafka-python is not installed (the dev extra)")
        pytest.skip("kafka-python is not installed (pip install kafka-python)")
    return kafka


@pytest.mark.parametrize("face", ["consumer", "producer"])
def test_every_kafka_python_setting_is_honoured_or_refused_with_a_reason(face: str) -> None:
    kafka = _kafka_python()
    theirs = (kafka.KafkaConsumer if face == "consumer" else kafka.KafkaProducer).DEFAULT_CONFIG
    defaults, refused = ((CONSUMER_DEFAULTS, CONSUMER_UNSUPPORTED) if face == "consumer"
                         else (PRODUCER_DEFAULTS, PRODUCER_UNSUPPORTED))
    assert not set(defaults) & set(refused), "a setting both honoured and refused"
    unaccounted = sorted(set(theirs) - set(defaults) - set(refused))
    assert not unaccounted, f"kafka-python {face} settings with neither a meaning nor a reason: {unaccounted}"


@pytest.mark.parametrize(("check", "name", "value", "reason"), [
    (producer_config, "retries", 5, "retried until delivery_timeout_ms"),
    (producer_config, "partitioner", lambda *a: 0, "murmur2"),
    (producer_config, "proxy_url", "http://p:1", "no proxies"),
    (consumer_config, "group_instance_id", "m-1", "KIP-345"),
    (consumer_config, "allow_auto_create_topics", True, "never create topics"),
    (consumer_config, "sasl_oauth_token_provider", object(), "OAUTHBEARER"),
])
def test_a_refused_setting_names_why(check, name: str, value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} is not supported: .*{reason}"):
        check({name: value})
    check({name: None})  # unset (None) is not refused


@pytest.mark.parametrize("check", [consumer_config, producer_config])
def test_an_unknown_name_is_a_type_error(check) -> None:
    with pytest.raises(TypeError, match=r"unrecognised (consumer|producer) settings: fetch_max_bytez"):
        check({"fetch_max_bytez": 1})


def test_a_transactional_id_makes_the_producer_idempotent_with_acks_all() -> None:
    config = producer_config({"transactional_id": "tx"})
    assert (config["enable_idempotence"], config["acks"], config["transaction_timeout_ms"]) == (True, -1, 60_000)
    with pytest.raises(ValueError, match="needs enable_idempotence"):
        producer_config({"transactional_id": "tx", "enable_idempotence": False})
    with pytest.raises(ValueError, match="acks='all'"):
        producer_config({"transactional_id": "tx", "acks": 1})

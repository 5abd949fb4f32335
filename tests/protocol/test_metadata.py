"""KIP-232 client metadata: accept/reject each partition by leader epoch (SPEC (f))."""

import pytest

from epochguard.client.metadata import ClientMetadata
from epochguard.errors import Errors
from epochguard.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochguard.types import LeaderAndEpoch, TopicPartition

TP = TopicPartition("t", 0)
BROKERS = tuple(MetadataResponseBroker(n) for n in (1, 2, 3))


def response(leader=1, epoch=5, *, version=12, topic_id="id-a", error=Errors.NONE, brokers=BROKERS):
    partitions = () if error != Errors.NONE else (MetadataResponsePartition(0, leader, epoch, (1, 2, 3), (1, 2, 3)),)
    return MetadataResponse((MetadataResponseTopic("t", partitions, topic_id, error),), brokers, version=version)


def cache(**kw):
    return ClientMetadata(topics=["t"], **kw)


def test_first_usable_epoch_is_accepted():
    m = cache()
    u = m.update(response(epoch=5), 0)
    assert u.accepted == (TP,) and not u.rejected
    assert m.current_leader(TP) == LeaderAndEpoch(1, 5)
    assert m.last_seen_leader_epoch(TP) == 5


@pytest.mark.parametrize("new_epoch, accepted", [(6, True), (5, True), (4, False), (0, False)])
def test_same_topic_id_accepts_equal_or_newer_rejects_older(new_epoch, accepted):
    m = cache()
    m.update(response(leader=1, epoch=5), 0)
    u = m.update(response(leader=2, epoch=new_epoch), 1)
    assert (u.accepted == (TP,)) is accepted and (u.rejected == (TP,)) is (not accepted)
    expected = LeaderAndEpoch(2, new_epoch) if accepted else LeaderAndEpoch(1, 5)
    assert m.current_leader(TP) == expected  # a rejected answer keeps the cached partition


def test_rejection_requests_another_refresh():
    m = cache()
    m.update(response(epoch=5), 0)
    assert not m.update_requested
    m.update(response(epoch=4), 10)
    assert m.update_requested
    assert m.time_to_next_update(10) == m.refresh_backoff_ms
    assert m.should_update(10 + m.refresh_backoff_ms)


def test_lower_epoch_accepted_when_topic_id_changes():
    m = cache()
    m.update(response(epoch=9, topic_id="id-a"), 0)
    u = m.update(response(leader=3, epoch=0, topic_id="id-b"), 1)  # topic re-created
    assert u.accepted == (TP,)
    assert m.current_leader(TP) == LeaderAndEpoch(3, 0)
    assert m.topic_id("t") == "id-b"


def test_lower_epoch_accepted_when_no_topic_id_was_known():
    m = cache()
    m.update(response(epoch=9, topic_id=None), 0)
    assert m.update(response(epoch=2, topic_id="id-a"), 1).accepted == (TP,)


def test_lower_epoch_without_topic_id_rejected():
    m = cache()
    m.update(response(epoch=9, topic_id=None), 0)
    assert m.update(response(epoch=2, topic_id=None), 1).rejected == (TP,)


def test_rejected_partition_that_was_absent_stays_absent():
    m = cache()
    m.update(response(epoch=5), 0)
    m.update(response(error=Errors.LEADER_NOT_AVAILABLE), 1)  # topic error drops partitions, keeps last-seen
    assert m.partition_metadata(TP) is None
    assert m.last_seen_leader_epoch(TP) == 5
    assert m.update(response(epoch=3), 2).rejected == (TP,)
    assert m.partition_metadata(TP) is None
    assert m.current_leader(TP) == LeaderAndEpoch(None, 5)


@pytest.mark.parametrize("version, epoch", [(8, 7), (12, -1)])
def test_unusable_epoch_forgets_last_seen_and_stores_without_epoch(version, epoch):
    m = cache()
    m.update(response(epoch=5), 0)
    u = m.update(response(leader=2, epoch=epoch, version=version), 1)
    assert u.accepted == (TP,)
    assert m.last_seen_leader_epoch(TP) is None
    assert m.current_leader(TP) == LeaderAndEpoch(2, None)
    # ...and the next usable epoch is accepted whatever it is: checks resume.
    assert m.update(response(leader=3, epoch=1), 2).accepted == (TP,)
    assert m.current_leader(TP) == LeaderAndEpoch(3, 1)


def test_update_last_seen_epoch_if_newer():
    m = cache()
    with pytest.raises(ValueError):
        m.update_last_seen_epoch_if_newer(TP, -1)
    assert m.update_last_seen_epoch_if_newer(TP, 3) is False  # nothing known: not stored
    assert m.last_seen_leader_epoch(TP) is None
    m.update(response(epoch=5), 0)
    assert m.update_last_seen_epoch_if_newer(TP, 5) is False
    assert m.update_last_seen_epoch_if_newer(TP, 4) is False
    assert m.update_last_seen_epoch_if_newer(TP, 7) is True
    assert m.update_requested
    # The cached partition (epoch 5) is no longer current: wait for metadata at epoch 7.
    assert m.partition_metadata_if_current(TP) is None
    assert m.current_leader(TP) == LeaderAndEpoch(None, 7)
    m.update(response(leader=2, epoch=6), 1)  # still older than 7: rejected
    assert m.current_leader(TP) == LeaderAndEpoch(None, 7)
    m.update(response(leader=2, epoch=7), 2)
    assert m.current_leader(TP) == LeaderAndEpoch(2, 7)


def test_leader_not_in_brokers_is_unknown():
    m = cache()
    m.update(response(leader=9, epoch=5), 0)
    assert m.current_leader(TP) == LeaderAndEpoch(None, 5)


def test_leader_hint_rules():
    m = cache()
    assert not m.update_partition_leadership(TP, 2, 6)  # partition not cached
    m.update(response(leader=1, epoch=5), 0)
    assert not m.update_partition_leadership(TP, 2, 5)  # not newer
    assert not m.update_partition_leadership(TP, -1, 6)  # no leader
    assert not m.update_partition_leadership(TP, 9, 6)  # unknown node
    assert m.update_partition_leadership(TP, 2, 6)
    assert m.current_leader(TP) == LeaderAndEpoch(2, 6)


def test_pre_kip_320_accepts_everything():
    m = cache(protocol="pre-kip-320")
    m.update(response(leader=1, epoch=5), 0)
    u = m.update(response(leader=2, epoch=3), 1)
    assert u.accepted == (TP,) and not m.update_requested
    assert m.current_leader(TP) == LeaderAndEpoch(2, 3)  # the epoch went backwards, unchecked
    assert m.update_last_seen_epoch_if_newer(TP, 9) is False


def test_refresh_schedule():
    m = cache(refresh_backoff_ms=100, metadata_max_age_ms=1000)
    assert m.should_update(0)
    req = m.build_request(0)
    assert req.topics == ("t",)
    m.update(response(), 5)
    assert m.time_to_next_update(5) == 1000
    m.request_update()
    assert m.time_to_next_update(50) == 55
    m.failed_update(200)
    assert m.time_to_next_update(250) == 50


def test_full_update_drops_absent_topics_but_keeps_their_last_seen_epochs():
    """MetadataTest.testEpochUpdateAfterTopicDeletion: a full update rebuilds the cache from the
    response, so a deleted topic's stale leader does not linger. Its last-seen epoch stays (a position
    waits on it), its topic id goes with it, so the topic coming back under any id resets the epoch."""
    m = ClientMetadata(topics=["t", "u"])
    other = MetadataResponseTopic("u", (MetadataResponsePartition(0, 2, 1, (2,), (2,)),), "id-u")
    m.update(response(leader=1, epoch=10), 0)
    m.update(MetadataResponse((other,), BROKERS, version=12), 1)  # "t" is gone from the answer
    assert m.partition_metadata(TP) is None and m.partitions_for("t") == []
    assert m.current_leader(TP) == LeaderAndEpoch(None, 10)
    assert m.last_seen_leader_epoch(TP) == 10
    assert m.update(response(leader=1, epoch=9, topic_id="id-a"), 2).accepted == (TP,)  # id forgotten with the topic
    m.update(MetadataResponse((other,), BROKERS, version=12), 3)
    m.update(response(leader=3, epoch=5, topic_id="id-new"), 4)  # re-created: a lower epoch is accepted
    assert m.current_leader(TP) == LeaderAndEpoch(3, 5) and m.last_seen_leader_epoch(TP) == 5


def test_topic_error_keeps_last_seen_epoch_and_recreation_resets_it():
    """MetadataTest.testEpochUpdateAfterTopicDeletion, the UNKNOWN_TOPIC_OR_PARTITION step."""
    m = cache()
    m.update(response(epoch=10, topic_id="id-a"), 0)
    m.update(response(error=Errors.UNKNOWN_TOPIC_OR_PARTITION, topic_id=None), 1)
    assert m.partition_metadata(TP) is None and m.last_seen_leader_epoch(TP) == 10
    m.update(response(leader=2, epoch=5, topic_id="id-b"), 2)
    assert m.last_seen_leader_epoch(TP) == 5 and m.current_leader(TP) == LeaderAndEpoch(2, 5)


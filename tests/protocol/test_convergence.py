"""Property: under KIP-320, whatever the history of (unclean) leader changes and partial replication,
every follower ends byte-identical to the leader once it has fetched enough (KIP-101/KIP-279)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_support import TP, Network, brokers, recs, state

steps = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 3), st.integers(0, 3)),  # (new leader, records, fetch rounds)
    min_size=1,
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(steps=steps, truncate_on_fetch=st.booleans())
def test_followers_converge_to_the_leader(steps, truncate_on_fetch):
    rms = brokers(3, truncate_on_fetch=truncate_on_fetch)
    net = Network(rms)
    now = 0
    for epoch, (leader, count, rounds) in enumerate(steps, start=1):
        for rm in rms.values():  # any replica may be elected, however far behind (unclean)
            rm.apply_partition_state(state(leader, epoch, isr=(leader,)), now)
        if count:
            rms[leader].partitions[TP].append_records_to_leader(
                recs(count, f"e{epoch}-"), acks=1, min_insync_replicas=1, now_ms=now
            )
        net.pump(now_ms=now, rounds=rounds)
        now += 10
    net.pump(now_ms=now, rounds=4 * len(steps) + 6)
    leader_log = rms[leader].partitions[TP].log
    for rm in rms.values():
        log = rm.partitions[TP].log
        assert log.log_end_offset == leader_log.log_end_offset
        assert log.read(0) == leader_log.read(0)
        assert log.high_watermark == leader_log.high_watermark == leader_log.log_end_offset

"""Hypothesis strategies for fault schedules (shrinkable: a failing schedule shrinks to a minimal one)."""

from __future__ import annotations

from hypothesis import strategies as st

from epochguard.sim.faults import (
    ConsumerRestart,
    Crash,
    Heal,
    Isolate,
    LinkDelay,
    PreferredElection,
    Restart,
    Schedule,
    StaleMetadata,
    UncleanElections,
    Zombie,
)
from epochguard.types import TopicPartition

BROKERS = st.integers(1, 3)
NODES = st.sampled_from(["broker-1", "broker-2", "broker-3", "producer-0", "producer-1", "consumer-0", "monitor"])
SPANS = st.integers(20, 600)


def faults(partitions: int) -> st.SearchStrategy:
    tps = st.builds(TopicPartition, st.just("events"), st.integers(0, partitions - 1))
    return st.one_of(
        st.builds(Crash, BROKERS),
        st.builds(Restart, BROKERS),
        st.builds(Zombie, BROKERS, st.one_of(st.none(), SPANS)),
        st.builds(StaleMetadata, BROKERS, st.integers(0, 400)),
        st.builds(Isolate, BROKERS, SPANS),
        st.builds(LinkDelay, NODES, NODES, st.integers(0, 100), st.sampled_from([0.0, 0.3, 1.0]), SPANS),
        st.builds(PreferredElection, tps, BROKERS),
        st.builds(UncleanElections, st.booleans()),
        st.builds(Heal, NODES),
        st.just(ConsumerRestart(0)),
    )


def schedules(steps: int, partitions: int, max_faults: int = 12) -> st.SearchStrategy[Schedule]:
    entries = st.lists(st.tuples(st.integers(1, steps - 1), faults(partitions)), max_size=max_faults)
    return entries.map(lambda xs: sorted(xs, key=lambda x: x[0]))

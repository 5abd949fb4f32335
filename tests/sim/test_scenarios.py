"""Each named scenario under both protocols: KIP-320 keeps every invariant, the offsets-only protocol
breaks the one the scenario targets (so the checker demonstrably can fail)."""

from __future__ import annotations

import pytest

from epochguard.sim import invariants as inv
from epochguard.sim.scenarios import SCENARIOS, run_scenario

TARGETED = {
    "unclean-election": inv.CONSUMER_CONTINUITY,
    "zombie-replica": inv.ISR_AGREEMENT,
    "stale-metadata": inv.METADATA_EPOCH_MONOTONIC,
    "leader-bounce": inv.LIST_OFFSETS_MONOTONIC,
    "transactions": inv.LIST_OFFSETS_MONOTONIC,
}


@pytest.mark.parametrize("name", sorted(TARGETED))
def test_kip320_keeps_every_invariant(name: str) -> None:
    result = run_scenario(name, seed=0, protocol="kip-320")
    assert result.violations == [], "\n".join(map(str, result.violations))
    assert result.produced, "the scenario must carry traffic"


@pytest.mark.parametrize("name", sorted(TARGETED))
def test_pre_kip320_breaks_the_targeted_invariant(name: str) -> None:
    result = run_scenario(name, seed=0, protocol="pre-kip-320")
    assert TARGETED[name] in result.violated()
    violation = next(v for v in result.violations if v.invariant == TARGETED[name])
    assert violation.step > 0 and violation.partition == "events-0"
    assert violation.trace, "a violation carries the events leading to it"


@pytest.mark.no_mutants  # the seed-0 tests above assert the same; three more seeds per mutant are a third of the oracle
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(TARGETED))
def test_scenarios_hold_across_seeds(name: str, seed: int) -> None:
    """The scenarios do not depend on one lucky schedule of network delays."""
    assert run_scenario(name, seed=seed, protocol="kip-320").ok
    assert TARGETED[name] in run_scenario(name, seed=seed, protocol="pre-kip-320").violated()


def test_unclean_election_kip320_detects_and_reports_the_truncation() -> None:
    result = run_scenario("unclean-election", seed=0, protocol="kip-320")
    elections = [e for e in result.events if e.kind == "election" and e.detail.get("election") == "unclean"]
    assert [e.detail["partition"] for e in elections] == ["events-0"]
    truncations = [e for e in result.events if e.kind == "truncation"]
    assert truncations and truncations[0].detail["partition"] == "events-0"
    assert truncations[0].detail["resolution"] == "rewound"
    assert truncations[0].detail["divergent_offset"] < truncations[0].detail["position"]


def test_unclean_election_gives_the_demo_lost_records_and_phantom_reads() -> None:
    """3 partitions; the consumer read records from the old leader that the new leader does not have."""
    result = run_scenario("unclean-election", seed=0, protocol="kip-320")
    cluster = result.cluster
    assert cluster is not None and len(cluster.topic_partitions) == 3
    new_leader_log = cluster.log(2, cluster.topic_partitions[0])
    survivors = new_leader_log.records_between(0, new_leader_log.log_end_offset)
    old = [r for r in result.consumed if r.partition == 0 and r.broker == 1]
    phantom = [r for r in old if survivors.get(r.offset, (None, None, None))[2] != r.value]
    assert phantom, "records read from broker 1 that broker 2's log no longer has"
    lost = [p for p in result.produced if p.partition == 0 and p.leader == 1
            and survivors.get(p.offset, (None, None, None))[2] != p.value]
    assert lost, "acks=1 records acknowledged by broker 1 and gone after the unclean election"
    assert {r.partition for r in result.consumed} == {0, 1, 2}


def test_zombie_is_fenced_under_kip320() -> None:
    result = run_scenario("zombie-replica", seed=0, protocol="kip-320")
    cluster = result.cluster
    assert cluster is not None
    tp = cluster.topic_partitions[0]
    assert 2 not in cluster.controller.state(tp).isr  # the zombie never rejoined
    assert cluster.log(2, tp).log_end_offset < cluster.log(1, tp).log_end_offset


def test_every_scenario_is_known_to_the_cli() -> None:
    assert set(TARGETED) | {"random"} == set(SCENARIOS)


@pytest.mark.parametrize("protocol", ["kip-320", "pre-kip-320"])
def test_consumer_restarting_across_an_unclean_election(protocol: str) -> None:
    """The consumer restarts from its committed offsets while its partition's log is being replaced:
    KIP-320 validates the committed epoch and reports the truncation; offsets only cannot."""
    from dataclasses import replace

    from epochguard.sim.faults import ConsumerRestart
    from epochguard.sim.scenarios import build_scenario, run

    base = build_scenario("unclean-election")
    scenario = replace(base, schedule=sorted([*base.schedule, (71, ConsumerRestart(0))], key=lambda x: x[0]))
    result = run(scenario, seed=0, protocol=protocol)
    assert any(e.kind == "restart" and e.node == "consumer-0" for e in result.events)
    if protocol == "kip-320":
        assert result.ok, "\n".join(map(str, result.violations))
        assert any(e.kind == "truncation" and e.detail["partition"] == "events-0" for e in result.events)
    else:
        assert inv.CONSUMER_CONTINUITY in result.violated()


@pytest.mark.parametrize("protocol", ["kip-320", "pre-kip-320"])
def test_reset_policy_none_raises_to_the_application(protocol: str) -> None:
    """With auto.offset.reset=none the truncation is raised (LogTruncationError) and the application
    seeks to the divergent offset itself; offsets only, it gets a bare out-of-range error."""
    from dataclasses import replace

    from epochguard.sim.scenarios import build_scenario, run

    base = build_scenario("unclean-election")
    result = run(replace(base, config=replace(base.config, auto_offset_reset="none")), seed=0, protocol=protocol)
    truncations = [e for e in result.events if e.kind == "truncation"]
    if protocol == "kip-320":
        assert result.ok, "\n".join(map(str, result.violations))
        assert [e.detail["resolution"] for e in truncations] == ["raised"]
    else:
        assert not truncations and inv.CONSUMER_CONTINUITY in result.violated()
        assert any(e.kind == "error" and "OffsetOutOfRange" in e.message for e in result.events)

"""A deterministic, seeded, in-process Kafka cluster that drives epochguard's protocol state machines,
injects faults and checks invariants after every step.

The simulator only delivers messages, advances a virtual clock, elects leaders and injects faults; every
protocol rule lives in `epochguard.broker.partition`, `epochguard.broker.fetcher`, `epochguard.client.consumer`,
`epochguard.client.metadata` and the Rust core. Run a scenario:

    >>> from epochguard.sim import run_scenario
    >>> result = run_scenario("unclean-election", seed=1, protocol="pre-kip-320")
    >>> sorted(result.violated())
    ['consumer-continuity']

or from the shell: `epochguard simulate --scenario unclean-election --seed 1 --protocol pre-kip-320`.
"""

from epochguard.sim.cluster import Cluster, ClusterConfig
from epochguard.sim.consumer import ConsumedRecord
from epochguard.sim.invariants import ALL_INVARIANTS, Violation
from epochguard.sim.producer import ProducedRecord
from epochguard.sim.scenarios import PROTOCOLS, SCENARIOS, Scenario, SimulationResult, build_scenario, run, run_scenario
from epochguard.sim.timeline import Event

__all__ = [
    "ALL_INVARIANTS",
    "PROTOCOLS",
    "SCENARIOS",
    "Cluster",
    "ClusterConfig",
    "ConsumedRecord",
    "Event",
    "ProducedRecord",
    "Scenario",
    "SimulationResult",
    "Violation",
    "build_scenario",
    "run",
    "run_scenario",
]

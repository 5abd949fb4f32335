"""The Java and Go clients through `epochguard serve`: verdicts as their code says, and as the server says.

Apache Kafka's Java client (kafka-clients 4.4.0, both consumer implementations) and franz-go implement
KIP-320 and must detect every divergence; sarama and kafka-go do not, and are controls. They run in
serve runs of their own, the two Java clients in one and the three Go clients in another
(`compat.run_groups`: the trigger waits for every consumer, and a Go client idling at the log end while
JVMs start would pass the 10 s stuck bound before the fault): `clean` with all five (no fault, nothing
to wait for), `unclean-election --trigger served` and `zombie-leader --trigger caught-up` per group.
`epochguard compat` runs them in every scenario and trigger.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from epochguard.wire.drivers.registry import CLIENTS, client
from epochguard.wire.drivers.session import RunResult
from tests.wire.conftest import require, require_final_reader
from tests.wire.serving import ServeRuns, assert_clean_run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("epochguard.wire.cli") is None, reason="`epochguard serve` is not in this build"
)

MORE = tuple(c.name for c in CLIENTS if c.toolchain is not None)
# What each client does with records it read that a new leader replaced, read from its code:
# - kafka-clients 4.4.0, both consumers: on a leader change the position goes to AWAIT_VALIDATION
#   (SubscriptionState.maybeValidatePositionForCurrentLeader), OffsetForLeaderEpoch finds the end offset
#   of the position's epoch below the position, and with a reset policy it seeks there
#   (SubscriptionState.maybeCompleteValidation: "Truncation detected ... resetting offset to the first
#   offset known to diverge"): it re-reads from the divergence point.
# - franz-go v1.22.3: a cursor moving to a new leader after consuming loads its epoch
#   (topics_and_partitions.go, migrateCursorTo), and an end offset below the consumed one resets the
#   cursor to it with an ErrDataLoss (consumer.go, loadEpochsForBrokerLoad, lines 2846-2848).
# - sarama v1.61.1 has no OffsetForLeaderEpoch request (request.go only names key 23 in a comment);
#   FENCED/UNKNOWN_LEADER_EPOCH just redispatch the partition at the same offset (consumer.go lines
#   1276-1286). When the new leader's log already reaches its position it goes on past the
#   replaced records (silent); when it does not, OFFSET_OUT_OF_RANGE shuts the partition consumer down
#   (lines 1268-1275) and the driver restarts it at OffsetOldest (reset). Which one is a race with the
#   new leader's producers.
# - kafka-go v0.4.51 sends CurrentLeaderEpoch -1 (write.go line 287, writeFetchRequestV10) and has no
#   OffsetForLeaderEpoch API; on OFFSET_OUT_OF_RANGE past the log end it waits for the log to grow and
#   goes on at its own offset (reader.go lines 1382-1409): silent whatever the timing.
EXPECTED: dict[str, set[str]] = {
    "java-classic": {"detected"},
    "java-consumer": {"detected"},
    "franz-go": {"detected"},
    "sarama": {"silent", "reset"},
    "kafka-go": {"silent"},
}
DIVERGING = (("unclean-election", "served"), ("zombie-leader", "caught-up"))


class Runs(ServeRuns):
    def get(self, scenario: str, trigger: str, group: str) -> RunResult:
        """`group`: a toolchain ("java", "go"), or "all" of them."""
        return self.run(scenario, trigger, group, [c for c in CLIENTS if c.name in MORE and group in ("all", c.toolchain)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    require_final_reader()
    yield Runs(tmp_path_factory.mktemp("serve-more"))


def test_expected_verdicts_cover_every_toolchain_client() -> None:
    assert set(MORE) == set(EXPECTED) == {"java-classic", "java-consumer", "franz-go", "sarama", "kafka-go"}


@pytest.mark.parametrize("name", MORE)
def test_clean_serve_loses_and_duplicates_nothing(runs: Runs, name: str) -> None:
    require(client(name))
    assert_clean_run(runs.get("clean", "served", "all"), name)


@pytest.mark.parametrize("name", MORE)
@pytest.mark.parametrize(("scenario", "trigger"), DIVERGING)
def test_verdicts_are_what_the_client_code_says(runs: Runs, scenario: str, trigger: str, name: str) -> None:
    require(client(name))
    result = runs.get(scenario, trigger, str(client(name).toolchain))
    truth = result.truths[name]
    start = next(e for e in _entries(result, name) if e["kind"] == "start")
    if name.startswith("java-"):  # group.protocol alone picks the implementation, with no group.id
        assert start["consumer_class"] == {"java-classic": "ClassicKafkaConsumer",
                                           "java-consumer": "AsyncKafkaConsumer"}[name]
    verdicts = [d.verdict for d in truth.divergences]
    outcome = (result.server_report or {}).get("trigger_outcome")
    assert verdicts, (f"{name} read no record that was replaced (the trigger {outcome}: a client still behind "
                      f"when the faults fired reads only the replacements)\n{result.why(name)}")
    assert set(verdicts) <= EXPECTED[name], (
        f"{name} in {scenario} --trigger {trigger}: {truth.divergences}; log {result.logs[name]}")
    server = result.server_client(f"epochguard-{name}")
    assert server is not None, f"the server never saw {name}"
    served = {(d["topic"], d["partition"], d["offset"], d["verdict"]) for d in server["divergences"]}
    assert served == {(*d.key(), d.verdict) for d in truth.divergences}


def test_java_and_franz_go_say_why_they_re_read(runs: Runs) -> None:
    """A detection is the client's own: the Java consumer logs SubscriptionState's truncation line,
    franz-go returns an ErrDataLoss naming where it consumed to and where it resumed."""
    for name, said in (("java-classic", "Truncation detected for partition events-0"),
                       ("java-consumer", "Truncation detected for partition events-0"),
                       ("franz-go", "kgo.ErrDataLoss: topic events partition 0 lost records")):
        require(client(name))
        result = runs.get("unclean-election", "served", str(client(name).toolchain))
        texts = [e["text"] for e in _entries(result, name) if e["kind"] == "truncation"]
        assert any(said in t for t in texts), f"{name}: {texts}"


def _entries(result: RunResult, name: str) -> list[dict[str, object]]:
    from epochguard.wire.drivers.delivery_log import read_log

    return list(read_log(result.logs[name]))

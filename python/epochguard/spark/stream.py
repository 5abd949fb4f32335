"""``spark.readStream.format("epochguard-kafka")``: Kafka as a Structured Streaming source whose
checkpointed offsets carry leader epochs, so an unclean election can neither lose nor duplicate silently.

Mirrors Spark's own Kafka source (connector/kafka-0-10-sql: `KafkaSourceProvider` for the options,
`KafkaMicroBatchStream` for planning, `KafkaBatchPartitionReader` / `KafkaDataConsumer` on executors),
on pyspark's Python data source API (`DataSourceStreamReader`, pyspark >= 4). Where Spark keeps one long
per partition and seeks executors by offset alone (which switches the Java client's KIP-320 validation
off), this source:

- checkpoints ``{"topic": {"partition": {"offset": N, "epoch": E}}}``, E being the leader epoch of the
  same ListOffsets answer that planned N (the epoch of every record below N is at most E);
- validates with OffsetsForLeaderEpoch every checkpointed partition on restart (the first trigger of a
  driver process that did not start the query, and `partitions(o, o)`, the engine's `setLatestSeenOffset`
  hook, which Spark 4.3 calls only for sources without admission control) and on a replay
  (`partitions(s, e)` for an end this process did not plan), and at each trigger only the partitions
  whose leader epoch moved (no extra request in the steady state: the epoch comes with the
  ListOffsets answer a trigger needs anyway);
- reads on executors with epochguard's consumer, seeking with the start's epoch (validated against the
  leader before any fetch), and emits only records whose batch epoch is at most the planned end's:
  a partition stops at the first record above it, or at a truncation of its start, without failing the
  task (whatever it did not emit is found by the driver's next validation);
- on a truncation, ``onTruncation=fail`` (default) raises `LogTruncationError` with a message starting
  ``[EPOCHGUARD_LOG_TRUNCATION]`` naming topic, partition, the checkpointed (offset, epoch), the
  divergence (offset, epoch) and the phantom range; ``rewind`` starts the next batch at the divergence
  point, appends the truncation to a JSON-lines log (``truncationLog``) and warns. An undefined answer
  (the leader has no epoch at or below the checkpoint's) always fails. There is no "skip".

Rows have Spark's Kafka schema (key, value, topic, partition, offset, timestamp, timestampType, and
headers with ``includeHeaders``) plus ``leaderEpoch``; they reach Spark as Arrow record batches decoded
in Rust. A row of the output is a phantom exactly when a truncation-log entry names its partition, its
offset is in [phantoms.from, phantoms.until) and its leaderEpoch <= phantoms.max_epoch: every record of
the new log at or after the divergence has a larger epoch than the checkpoint's.

Options shared with Spark's source mean the same: ``kafka.bootstrap.servers``, ``subscribe`` (comma
list), ``assign`` (JSON ``{"t": [0, 1]}``), ``startingOffsets`` (earliest, latest, or JSON per
partition: -2 earliest, -1 latest, an offset, or ``{"offset": N, "epoch": E}``), ``maxOffsetsPerTrigger``,
``includeHeaders``, ``kafka.``-prefixed client settings (``kafka.request.timeout.ms``, ...). Own options:
``onTruncation``, ``truncationLog``, ``kafkaConsumer.pollTimeoutMs`` (Spark's name; how long an executor
waits for records it was planned to read before failing the task), ``minOffsetsPerTask`` (default 4096: a
batch whose partitions would give tasks of fewer offsets is read by fewer tasks, each reading several
partitions together, one Fetch a broker for all of them; 1 gives one task a partition, as Spark's source).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from epochguard.errors import LogTruncationError, OffsetOutOfRangeError
from epochguard.spark.offsets import (
    TRUNCATION_PREFIX,
    EpochOffset,
    OffsetReader,
    Truncation,
    truncation_error,
)
from epochguard.types import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

try:  # pyspark >= 4
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
except ImportError:  # pragma: no cover - pyspark 3.5
    DataSource = DataSourceStreamReader = InputPartition = None  # type: ignore[assignment,misc]

try:  # pyspark >= 4.2: admission control (maxOffsetsPerTrigger) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark 4.0 / 4.1
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["NAME", "DATA_LOSS_PREFIX", "TRUNCATION_PREFIX", "StreamOptions", "kafka_schema", "parse_offsets",
           "offsets_json", "append_truncations", "group_ranges"]

NAME = "epochguard-kafka"
DATA_LOSS_PREFIX = "[EPOCHGUARD_DATA_LOSS]"
TIMEOUT_PREFIX = "[EPOCHGUARD_TIMEOUT]"
# A batch's partitions are read by fewer tasks when each would read fewer offsets than this
# (`minOffsetsPerTask`): a Python task costs Spark a fixed amount (a worker round trip, the pickled read
# function, the daemon's gc.collect() after it) worth more than reading a few thousand records.
DEFAULT_MIN_OFFSETS_PER_TASK = 4096
log = logging.getLogger("epochguard.spark.stream")

# Client settings the source decides itself (as Spark's `KafkaSourceProvider` refuses them).
_OWN_SETTINGS = {"group_id", "auto_offset_reset", "enable_auto_commit", "key_deserializer", "value_deserializer",
                 "bootstrap_servers", "isolation_level", "send_last_fetched_epoch"}


class TruncationWarning(UserWarning):
    """A truncation was found and the query rewound past it (``onTruncation=rewind``)."""


# --- schema -------------------------------------------------------------------------------------
def kafka_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (`KafkaRecordToRowConverter`) plus ``leaderEpoch``."""
    fields = [
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    fields.append(StructField("leaderEpoch", IntegerType()))
    return StructType(fields)


# --- offsets as JSON ----------------------------------------------------------------------------
def offsets_json(offsets: Mapping[TopicPartition, EpochOffset],
                 starts: Mapping[TopicPartition, EpochOffset] | None = None) -> dict[str, Any]:
    """The checkpoint form, keys sorted (Spark compares offsets as JSON strings). `starts`: partitions
    whose range in this batch does not begin at the previous end (a rewind, a new partition)."""
    out: dict[str, Any] = {}
    for tp in sorted(offsets):
        entry = offsets[tp].to_json()
        if starts and tp in starts:
            entry["from"] = starts[tp].to_json()
        out.setdefault(tp.topic, {})[str(tp.partition)] = entry
    return {t: dict(sorted(ps.items(), key=lambda kv: int(kv[0]))) for t, ps in sorted(out.items())}


def parse_offsets(value: Mapping[str, Any]) -> tuple[dict[TopicPartition, EpochOffset],
                                                     dict[TopicPartition, EpochOffset]]:
    """(ends, starts that differ from the previous end) from `offsets_json`'s form."""
    ends: dict[TopicPartition, EpochOffset] = {}
    starts: dict[TopicPartition, EpochOffset] = {}
    for topic, parts in value.items():
        for p, entry in parts.items():
            tp = TopicPartition(topic, int(p))
            ends[tp] = EpochOffset(int(entry["offset"]), entry.get("epoch"))
            if "from" in entry:
                starts[tp] = EpochOffset(int(entry["from"]["offset"]), entry["from"].get("epoch"))
    return ends, starts


# --- options ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamOptions:
    bootstrap: str
    topics: tuple[str, ...]
    assigned: tuple[TopicPartition, ...]
    starting: str | dict[TopicPartition, EpochOffset | int]
    max_offsets: int | None
    on_truncation: str
    truncation_log: str | None
    include_headers: bool
    poll_timeout_ms: int
    client: dict[str, Any]
    min_offsets_per_task: int = 1

    @staticmethod
    def parse(options: Mapping[str, str]) -> StreamOptions:
        opts = {k: v for k, v in options.items()}
        lower = {k.lower(): v for k, v in opts.items()}
        bootstrap = lower.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise ValueError(f"{NAME}: option kafka.bootstrap.servers is required")
        topics, assigned = _subscription(lower)
        starting = _starting(lower.get("startingoffsets", "latest"))
        max_offsets = None
        if "maxoffsetspertrigger" in lower:
            max_offsets = int(lower["maxoffsetspertrigger"])
            if max_offsets <= 0:
                raise ValueError(f"{NAME}: maxOffsetsPerTrigger must be positive: {max_offsets}")
        on_truncation = lower.get("ontruncation", "fail").lower()
        if on_truncation not in ("fail", "rewind"):
            raise ValueError(f"{NAME}: onTruncation must be fail or rewind (there is no skip): {on_truncation!r}")
        if lower.get("failondataloss", "true").lower() != "true":
            raise ValueError(f"{NAME}: failOnDataLoss=false is not supported: truncation is handled by "
                             "onTruncation=rewind, and lost data (retention) always fails")
        client = _client_settings(opts)
        min_per_task = int(lower.get("minoffsetspertask", str(DEFAULT_MIN_OFFSETS_PER_TASK)))
        if min_per_task <= 0:
            raise ValueError(f"{NAME}: minOffsetsPerTask must be positive: {min_per_task}")
        return StreamOptions(
            bootstrap=bootstrap, topics=topics, assigned=assigned, starting=starting, max_offsets=max_offsets,
            on_truncation=on_truncation, truncation_log=lower.get("truncationlog"),
            include_headers=lower.get("includeheaders", "false").lower() == "true",
            poll_timeout_ms=int(lower.get("kafkaconsumer.polltimeoutms", "120000")),
            client=client, min_offsets_per_task=min_per_task)


def _subscription(lower: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[TopicPartition, ...]]:
    subscribe, assign = lower.get("subscribe"), lower.get("assign")
    if (subscribe is None) == (assign is None):
        raise ValueError(f"{NAME}: give exactly one of subscribe or assign"
                         + (" (subscribePattern is not supported)" if "subscribepattern" in lower else ""))
    if subscribe is not None:
        topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
        if not topics:
            raise ValueError(f"{NAME}: subscribe names no topic: {subscribe!r}")
        return topics, ()
    try:
        spec = json.loads(assign or "")
        return (), tuple(sorted(TopicPartition(t, int(p)) for t, ps in spec.items() for p in ps))
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f'{NAME}: assign must be JSON like {{"topic": [0, 1]}}: {assign!r}') from exc


def _client_settings(opts: Mapping[str, str]) -> dict[str, Any]:
    """``kafka.``-prefixed options as epochguard consumer settings (``kafka.request.timeout.ms`` ->
    ``request_timeout_ms``), checked here, on the driver, so a typo fails at ``load()``."""
    from epochguard.client.kafka_consumer import consumer_config

    client: dict[str, Any] = {}
    for key, value in opts.items():
        if key.lower().startswith("kafka.") and key.lower() != "kafka.bootstrap.servers":
            name = key[len("kafka."):].replace(".", "_").lower()
            if name in _OWN_SETTINGS:
                raise ValueError(f"{NAME}: option {key} is not supported: the source decides it")
            client[name] = int(value) if value.lstrip("-").isdigit() else value
    consumer_config(client)  # unknown or unsupported settings: TypeError / ValueError naming them
    return client


def _starting(value: str) -> str | dict[TopicPartition, EpochOffset | int]:
    if value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    try:
        spec = json.loads(value)
        out: dict[TopicPartition, EpochOffset | int] = {}
        for topic, parts in spec.items():
            for p, v in parts.items():
                tp = TopicPartition(topic, int(p))
                if isinstance(v, dict):
                    out[tp] = EpochOffset(int(v["offset"]), None if v.get("epoch") is None else int(v["epoch"]))
                elif int(v) in (-1, -2):
                    out[tp] = int(v)
                elif int(v) >= 0:
                    out[tp] = EpochOffset(int(v), None)
                else:
                    raise ValueError(v)
        return out
    except (ValueError, AttributeError, TypeError, KeyError) as exc:
        raise ValueError(f'{NAME}: startingOffsets must be earliest, latest or JSON like {{"t": {{"0": 23}}}} '
                         f'or {{"t": {{"0": {{"offset": 23, "epoch": 4}}}}}}: {value!r}') from exc


# --- the truncation log -------------------------------------------------------------------------
def append_truncations(path: str, truncations: Sequence[Truncation], detected_by: str) -> list[dict[str, Any]]:
    """Append each truncation not already logged (a trigger redone after a driver crash finds the same
    ones) as one JSON line, each written by a single O_APPEND write and fsynced. Returns what was added."""
    seen = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn last line of a crashed writer: the entry is written again below
                seen.add(_key(entry))
    added = []
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for t in truncations:
            entry = {**t.to_json(), "detected_by": detected_by}
            if _key(entry) in seen:
                continue
            seen.add(_key(entry))
            data = ("\n" if _torn(path) else "") + json.dumps(entry, sort_keys=True) + "\n"
            os.write(fd, data.encode("utf-8"))
            added.append(entry)
        os.fsync(fd)
    finally:
        os.close(fd)
    return added


def _key(entry: Mapping[str, Any]) -> str:
    return json.dumps([entry.get("topic"), entry.get("partition"), entry.get("checkpoint"), entry.get("divergence")],
                      sort_keys=True)


def _torn(path: str) -> bool:
    """Whether the file ends without a newline (a writer died mid-line)."""
    size = os.path.getsize(path)
    if size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1) != b"\n"


# --- tasks ----------------------------------------------------------------------------------------
def group_ranges(sizes: Mapping[TopicPartition, int], min_per_task: int) -> list[list[TopicPartition]]:
    """The partitions of a batch (each with the number of offsets it reads, > 0) as the tasks that read
    them: one a partition, as Spark's Kafka source, unless that leaves tasks of fewer than `min_per_task`
    offsets; then ``total // min_per_task`` tasks (at least one), the partitions spread over them largest
    first, each to the task with the fewest offsets so far. A partition is never split."""
    tps = sorted(sizes)
    tasks = max(1, min(len(tps), sum(sizes.values()) // min_per_task))
    if tasks >= len(tps):
        return [[tp] for tp in tps]
    groups: list[list[TopicPartition]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for tp in sorted(tps, key=lambda tp: (-sizes[tp], tp)):
        i = min(range(tasks), key=lambda i: (loads[i], i))
        groups[i].append(tp)
        loads[i] += sizes[tp]
    return [sorted(g) for g in groups]


# --- the source ---------------------------------------------------------------------------------
if DataSource is not None:

    class KafkaGuardSource(DataSource):
        """``epochguard-kafka`` (see the module docstring)."""

        @classmethod
        def name(cls) -> str:
            return NAME

        def schema(self) -> StructType:
            return kafka_schema(str(self.options.get("includeHeaders", "false")).lower() == "true")

        def streamReader(self, schema: StructType) -> KafkaGuardStreamReader:
            return KafkaGuardStreamReader(dict(self.options), schema)

    class OffsetRange(InputPartition):
        """Records [start, until) of a partition, read at epochs <= `until.epoch`."""

        def __init__(self, tp: TopicPartition, start: EpochOffset, until: EpochOffset) -> None:
            super().__init__(f"{tp.topic}-{tp.partition}")
            self.tp, self.start, self.until = tp, start, until

    class OffsetRanges(InputPartition):
        """One task: its partitions' ranges, read together by the worker's consumer (`read_ranges`)."""

        def __init__(self, ranges: Sequence[OffsetRange]) -> None:
            super().__init__(",".join(r.value for r in ranges))
            self.ranges = tuple(ranges)

    class KafkaGuardStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str], schema: StructType) -> None:
            self.options = StreamOptions.parse(options)
            self.schema = schema
            self._reader: OffsetReader | None = None
            self._planned: dict[str, Any] | None = None  # the last end this process returned
            self._target: dict[TopicPartition, EpochOffset] | None = None  # Trigger.AvailableNow's
            self._fresh = False  # initialOffset was called in this process (not a restart)
            self._restarted = False  # the engine's restart hook handed this process its checkpoint
            self.detected: list[Truncation] = []  # every truncation this driver found (tests, logs)

        def __getstate__(self) -> dict[str, Any]:  # executors get the options, not the driver's sockets
            return {**self.__dict__, "_reader": None}

        @property
        def reader(self) -> OffsetReader:
            if self._reader is None:
                c = self.options.client
                self._reader = OffsetReader(self.options.bootstrap,
                                            request_timeout_ms=int(c.get("request_timeout_ms", 30_000)),
                                            retry_backoff_ms=int(c.get("retry_backoff_ms", 100)),
                                            timeout_ms=int(c.get("default_api_timeout_ms", 60_000)))
            return self._reader

        def stop(self) -> None:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

        # --- planning (driver) ----------------------------------------------------------------
        def _partitions(self) -> list[TopicPartition]:
            if self.options.assigned:
                self.reader.refresh({tp.topic for tp in self.options.assigned})
                return list(self.options.assigned)
            return self.reader.partitions_of(self.options.topics)

        def initialOffset(self) -> dict[str, Any]:
            self._fresh = True  # a new query: its first start comes from here, validated below
            tps = self._partitions()
            starting = self.options.starting
            if starting in ("earliest", "latest"):
                return offsets_json(self.reader.list_offsets(tps, latest=starting == "latest"))
            assert isinstance(starting, dict)
            chosen: dict[TopicPartition, EpochOffset] = {}
            for which, flag in ((-2, False), (-1, True)):
                wanted = [tp for tp in tps if starting.get(tp) == which]
                if wanted:
                    chosen.update(self.reader.list_offsets(wanted, latest=flag))
            missing = [tp for tp in tps if tp not in starting]
            if missing:  # as Spark: every partition must be named
                raise ValueError(f"{NAME}: startingOffsets does not name {sorted(missing)}")
            for tp, v in starting.items():
                if isinstance(v, EpochOffset):
                    chosen[tp] = v
            self._validate_or_fail(chosen, "startingOffsets")
            return offsets_json(chosen)

        def getDefaultReadLimit(self) -> Any:
            if ReadAllAvailable is None:
                raise NotImplementedError
            return ReadAllAvailable() if self.options.max_offsets is None else ReadMaxRows(self.options.max_offsets)

        def prepareForTriggerAvailableNow(self) -> None:
            self._target = self.reader.list_offsets(self._partitions(), latest=True)

        def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
            if start is None:  # pyspark 4.0/4.1: no start; the engine's previous end is the last we planned
                start = self._planned if self._planned is not None else self.initialOffset()
            previous, _ = parse_offsets(start)
            tps = self._partitions()
            gone = sorted(set(previous) - set(tps))
            if gone:
                raise OffsetOutOfRangeError(f"{DATA_LOSS_PREFIX} partitions {gone} are gone")
            latest = self.reader.list_offsets(tps, latest=True)
            new = [tp for tp in tps if tp not in previous]
            starts: dict[TopicPartition, EpochOffset] = {}
            if new:  # as Spark: partitions added while the query runs are read from their start
                starts.update(self.reader.list_offsets(new, latest=False))
            # Validate where the leader epoch moved since the checkpoint's planning; on the first trigger of
            # a process that did not plan the start itself (a restart), every partition: Spark 4.3 calls the
            # `setLatestSeenOffset` hook (partitions(o, o)) only for sources without admission control.
            restart = (self._planned is None and not self._fresh) or self._restarted
            self._restarted = False
            moved = {tp: pos for tp, pos in previous.items()
                     if pos.epoch is not None and (restart or latest[tp].epoch != pos.epoch)}
            for t in self._truncations(moved, "restart" if restart else "trigger"):
                assert t.divergence is not None
                starts[t.tp] = t.divergence
            begin = {tp: starts[tp] if tp in starts else previous[tp] for tp in tps}
            ends: dict[TopicPartition, EpochOffset] = {}
            for tp in tps:
                b, top = begin[tp], latest[tp]
                if self._target is not None and tp in self._target and self._target[tp].offset < top.offset:
                    top = self._target[tp]
                # Below the start: a new leader whose high watermark is behind (KIP-207): wait, keep the start.
                ends[tp] = top if top.offset >= b.offset else b
            ends = self._admit(begin, ends, limit)
            moved_starts = {tp: s for tp, s in starts.items() if tp in ends}
            end = offsets_json(ends, moved_starts)
            self._planned = end
            return end

        def _admit(self, begin: Mapping[TopicPartition, EpochOffset], ends: dict[TopicPartition, EpochOffset],
                   limit: Any) -> dict[TopicPartition, EpochOffset]:
            """`maxOffsetsPerTrigger` (ReadMaxRows): spread over the partitions by their backlog, as Spark's
            `KafkaMicroBatchStream.rateLimit`; a cut end keeps the planned epoch (an upper bound still)."""
            if ReadMaxRows is None or not isinstance(limit, ReadMaxRows):
                return ends
            sizes = {tp: max(0, ends[tp].offset - begin[tp].offset) for tp in ends}
            total = sum(sizes.values())
            if total <= limit.max_rows:
                return ends
            out = dict(ends)
            for tp, size in sizes.items():
                share = int(limit.max_rows * size / total) if total else 0
                if size and share < size:
                    out[tp] = EpochOffset(begin[tp].offset + max(share, 1 if size else 0), ends[tp].epoch)
            return out

        def _truncations(self, positions: Mapping[TopicPartition, EpochOffset], detected_by: str) -> list[Truncation]:
            """Validate; fail, or (rewind) log and return the truncations with a known divergence point."""
            if not positions:
                return []
            found = self.reader.validate(positions)
            if not found:
                return []
            self.detected.extend(found)
            undefined = [t for t in found if t.divergence is None]
            if self.options.on_truncation == "fail" or undefined:
                raise truncation_error(undefined or found, what=f"({detected_by})")
            path = self.options.truncation_log
            if path:
                append_truncations(path, found, detected_by)
            for t in found:
                warnings.warn(f"{TRUNCATION_PREFIX} rewinding: {t.describe()}", TruncationWarning, stacklevel=2)
                log.warning("%s rewinding: %s", TRUNCATION_PREFIX, t.describe())
            return found

        def _validate_or_fail(self, positions: Mapping[TopicPartition, EpochOffset], detected_by: str) -> None:
            found = self.reader.validate({tp: p for tp, p in positions.items() if p.epoch is not None})
            if found:
                self.detected.extend(found)
                undefined = [t for t in found if t.divergence is None]
                if self.options.on_truncation == "fail" or undefined:
                    raise truncation_error(undefined or found, what=f"({detected_by})")

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
            previous, _ = parse_offsets(start)
            ends, starts = parse_offsets(end)
            if start == end:
                # The engine's restart hook (`setLatestSeenOffset`): validate the whole checkpoint before
                # anything is planned from it. Under rewind the next trigger rewinds (its epoch moved).
                self._validate_or_fail(ends, "restart")
                if self._planned is None:
                    # pyspark 4.0/4.1 call latestOffset() without its start: the checkpoint is it, not
                    # startingOffsets (from which a restarted query planned, and read a rewritten log on).
                    self._planned, self._restarted = end, True
                return []
            if end != self._planned:
                # A batch planned by an earlier run (replay after a failure or restart): its end is
                # validated too, so a log rewritten since its planning cannot be read as if it were the same.
                self._validate_or_fail({**previous, **ends}, "replay")
            ranges = {}
            for tp in sorted(ends):
                begin = starts.get(tp, previous.get(tp))
                if begin is None or ends[tp].offset <= begin.offset:
                    continue
                ranges[tp] = OffsetRange(tp, begin, ends[tp])
            sizes = {tp: r.until.offset - r.start.offset for tp, r in ranges.items()}
            return [OffsetRanges([ranges[tp] for tp in group])
                    for group in group_ranges(sizes, self.options.min_offsets_per_task)]

        def commit(self, end: dict[str, Any]) -> None:
            """Nothing to commit: the checkpoint is Spark's (as Spark's Kafka source)."""

        # --- reading (executors) --------------------------------------------------------------
        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            assert isinstance(partition, (OffsetRanges, OffsetRange))
            # A range that stops early (a truncation found) does not stop the task's other partitions.
            ranges = partition.ranges if isinstance(partition, OffsetRanges) else (partition,)
            yield from read_ranges(self.options, [(r.tp, r.start, r.until) for r in ranges], self.schema)


def read_range(options: StreamOptions, tp: TopicPartition, start: EpochOffset, until: EpochOffset,
               schema: StructType) -> Iterator[pa.RecordBatch]:
    """Records [start, until) of `tp` (`read_ranges` of one range)."""
    return read_ranges(options, [(tp, start, until)], schema)


def read_ranges(options: StreamOptions, ranges: Sequence[tuple[TopicPartition, EpochOffset, EpochOffset]],
                schema: StructType) -> Iterator[pa.RecordBatch]:
    """Records [start, until) of each range's partition as Arrow batches in `schema`, those at epochs <=
    its `until.epoch`: a partition stops at the first record above that epoch or when its start is found
    truncated, without stopping the others.

    The partitions are read together: one consumer assigned all of them, so one Fetch a broker asks for all
    of a task's partitions that broker leads (a task of several small partitions costs one round trip, not
    one a partition). Nothing past a range's `until` is fetched (`fetch_until`). The consumer is this Python
    worker's for these settings, kept for the next task (pyspark reuses its workers): a task after the first
    opens no connection and asks no ApiVersions or Metadata. A task that ends otherwise than with every
    partition at its `until` closes it.
    """
    target = _arrow_schema(schema)
    consumer, key = _borrow_consumer(options)
    task = _RangesRead(consumer, options, ranges)
    done = False
    try:
        while task.pending:
            try:
                got = consumer.poll_arrow(timeout_ms=task.wait_ms())
            except LogTruncationError as exc:
                task.truncated(exc)
                continue
            except OffsetOutOfRangeError as exc:
                tp = next((t for t in exc.offset_out_of_range_partitions if t in task.pending), min(task.pending))
                raise OffsetOutOfRangeError(f"{DATA_LOSS_PREFIX} {tp}: offset {task.position[tp]} is out of range "
                                            f"(deleted by retention?): {exc}") from exc
            for tp, batch in got.items():
                if tp in task.pending and batch.num_rows:
                    keep, above_epoch = task.kept(tp, batch)
                    if keep:
                        yield _to_spark(batch.slice(0, keep), tp, target)
                    task.advance(tp, batch, keep, above_epoch)
            task.check_deadlines()
        done = not task.stopped
    finally:
        if done:
            _give_back_consumer(key, consumer)
        else:
            consumer.close()
        _freeze_worker_once()


class _RangesRead:
    """One task's read of its ranges (`read_ranges`): what is still to read, positions, deadlines."""

    def __init__(self, consumer: Any, options: StreamOptions,
                 ranges: Sequence[tuple[TopicPartition, EpochOffset, EpochOffset]]) -> None:
        self.consumer, self.options = consumer, options
        self.ends = {tp: until for tp, start, until in ranges if start.offset < until.offset}
        consumer.assign(list(self.ends))
        self.position: dict[TopicPartition, int] = {}
        for tp, start, until in ranges:
            if tp in self.ends:
                consumer.fetch_until(tp, until.offset)
                consumer.seek(tp, start.offset if start.epoch is None else
                              OffsetAndMetadata(start.offset, leader_epoch=start.epoch))
                self.position[tp] = start.offset
        self.timeout_s = options.poll_timeout_ms / 1000
        self.deadline = dict.fromkeys(self.ends, time.monotonic() + self.timeout_s)
        self.pending = set(self.ends)
        self.stopped = False  # a partition stopped early: the consumer's state for it is not worth keeping

    def wait_ms(self) -> int:
        return max(1, min(1000, int((min(self.deadline[tp] for tp in self.pending) - time.monotonic()) * 1000)))

    def stop(self, tps: Sequence[TopicPartition], why: object) -> None:
        self.stopped = True
        for tp in tps:
            log.warning("%s %s stopped at %d: %s", TRUNCATION_PREFIX, tp, self.position[tp], why)
            self.pending.discard(tp)
        self.consumer.pause(*tps)

    def truncated(self, exc: LogTruncationError) -> None:
        """A truncation the client found (a start is gone): the driver's next validation places it."""
        named = set(exc.offset_out_of_range_partitions) | set(exc.divergent_offsets)
        self.stop(sorted(self.pending & named) if named else sorted(self.pending), exc)

    def kept(self, tp: TopicPartition, batch: pa.RecordBatch) -> tuple[int, bool]:
        """How many of the batch's first rows to emit, and whether the partition stops after them."""
        import pyarrow.compute as pc

        until = self.ends[tp]
        # A partition's offsets ascend: what is kept is a prefix, sliced (no copy), not filtered.
        offsets = batch.column("offset")
        n = batch.num_rows
        keep = n if offsets[n - 1].as_py() < until.offset else pc.sum(pc.less(offsets, until.offset)).as_py()
        if until.epoch is not None:
            above = pc.greater(batch.column("leader_epoch"), until.epoch)
            if pc.any(above).as_py():
                # Records below the planned end written at a later epoch: the range was rewritten after
                # planning. Emit what precedes the first of them and stop this partition.
                first = pc.index(above, True).as_py()
                if first < keep:
                    return first, True
        return keep, False

    def advance(self, tp: TopicPartition, batch: pa.RecordBatch, keep: int, above_epoch: bool) -> None:
        self.deadline[tp] = time.monotonic() + self.timeout_s
        if above_epoch:
            self.position[tp] = batch.column("offset")[keep].as_py()
            self.stop([tp], f"a record above the planned end's epoch {self.ends[tp].epoch}")
            return
        # The client raises a truncation it found (pipelined fetches) in position() too, as Java's
        # position(), perhaps another partition's.
        while tp in self.pending:
            try:
                self.position[tp] = self.consumer.position(tp)
            except LogTruncationError as exc:
                self.truncated(exc)
                continue
            if self.position[tp] >= self.ends[tp].offset:
                self.pending.discard(tp)
            return

    def check_deadlines(self) -> None:
        now = time.monotonic()
        if late := sorted(tp for tp in self.pending if now >= self.deadline[tp]):
            tp = late[0]
            raise TimeoutError(f"{TIMEOUT_PREFIX} {tp}: no record at {self.position[tp]} (planned up to "
                               f"{self.ends[tp].offset}) within {self.options.poll_timeout_ms} ms")


_FROZEN = False


def _freeze_worker_once() -> None:
    """In a Spark Python worker, after its first range: move what the process holds (pyspark, pyarrow,
    epochguard, the kept consumer; 51,000-85,000 objects) out of the cyclic collector's reach (`gc.freeze`).
    pyspark's daemon runs a full `gc.collect()` after every task of a reused worker (140-190 ms at load 16,
    about 1 s at load 22, on a 2-core machine): with this it scans only what the task created. Only in a
    task (pyspark's `TaskContext`), never in a driver or a test process."""
    global _FROZEN
    if _FROZEN:
        return
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return
    import gc

    gc.freeze()
    _FROZEN = True


# One idle consumer per client settings in this process (a Python worker runs one task at a time; the
# lock guards a worker that runs tasks on threads). Keyed by the pid too: a forked child opens its own.
_IDLE_CONSUMERS: dict[tuple[Any, ...], Any] = {}
_IDLE_LOCK = threading.Lock()
_MAX_IDLE = 2


def _borrow_consumer(options: StreamOptions) -> tuple[Any, tuple[Any, ...]]:
    from epochguard.client import KafkaConsumer

    key = (os.getpid(), options.bootstrap, tuple(sorted((k, repr(v)) for k, v in options.client.items())))
    with _IDLE_LOCK:
        consumer = _IDLE_CONSUMERS.pop(key, None)
    if consumer is None:
        consumer = KafkaConsumer(bootstrap_servers=options.bootstrap, auto_offset_reset="none",
                                 enable_auto_commit=False, client_id="epochguard-spark-executor",
                                 send_last_fetched_epoch=True, **options.client)
    return consumer, key


def _give_back_consumer(key: tuple[Any, ...], consumer: Any) -> None:
    closing = [consumer]
    with _IDLE_LOCK:
        if key not in _IDLE_CONSUMERS:
            closing = []
            _IDLE_CONSUMERS[key] = consumer
            while len(_IDLE_CONSUMERS) > _MAX_IDLE:  # the least recently used settings go
                closing.append(_IDLE_CONSUMERS.pop(next(iter(_IDLE_CONSUMERS))))
    for c in closing:
        c.close()


def _arrow_schema(schema: StructType) -> pa.Schema:
    """Spark's Arrow schema for `schema`, timestamps in UTC: pyspark 4.1+ takes `timezone`, 4.0 had
    `timestamp_utc` (default True) instead and refuses `timezone`."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)


def _to_spark(batch: pa.RecordBatch, tp: TopicPartition, target: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    n = batch.num_rows
    columns = {
        "key": batch.column("key"), "value": batch.column("value"),
        "topic": pa.array([tp.topic] * n, pa.string()),
        "partition": pa.array([tp.partition] * n, pa.int32()),
        "offset": batch.column("offset"),
        "timestamp": batch.column("timestamp"),
        "timestampType": batch.column("timestamp_type"),
        "headers": batch.column("headers"),
        "leaderEpoch": batch.column("leader_epoch"),
    }
    arrays = []
    for field in target:
        col = columns[field.name]
        if field.name == "timestamp" and not pa.types.is_timestamp(col.type):
            col = pa.compute.multiply(col.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
        arrays.append(col if col.type == field.type else col.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def register(spark: Any) -> bool:
    """Register ``epochguard-kafka`` on `spark`; False without Python data sources (pyspark 3.5)."""
    if DataSource is None:
        return False
    spark.dataSource.register(KafkaGuardSource)
    return True

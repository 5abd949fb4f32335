"""Spark helpers for anyone's job: decode a column of record-batch bytes, and answer epoch questions
(which epoch holds an offset; the OffsetsForLeaderEpoch answer for an epoch) against broadcast
epoch histories. All of them call the Rust core on whole Arrow/numpy batches, never row by row.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pyspark.sql.functions import pandas_udf
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from epochguard import _core
from epochguard.spark.logs import DEFAULT_MAX_DECOMPRESSED, ERROR_FIELDS, decode_arrow_batches, output_schema

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import Column, DataFrame, SparkSession

History = tuple[Sequence[tuple[int, int]], int]  # (epoch entries, log end offset)


def decode_batches(
    df: DataFrame,
    column: str,
    *,
    keep: Sequence[str] | None = None,
    with_errors: bool = False,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED,
) -> DataFrame:
    """Decode a binary column holding Kafka record batches (v0-v2 bytes, as in a segment file or a
    Fetch response) into one row per record: the `keep` columns (default: all others) followed by
    the record columns. With `with_errors`, undecodable bytes give a row with ``error_position`` and
    ``error_reason`` set instead of failing the job."""
    keep = [c for c in df.columns if c != column] if keep is None else list(keep)
    carry = StructType([df.schema[c] for c in keep])
    schema = output_schema(carry, False)
    if with_errors:
        schema = StructType(list(schema.fields) + [f for f in ERROR_FIELDS if f.name not in keep])
    decode = functools.partial(
        decode_arrow_batches,
        carry=keep,
        schema=to_arrow_schema(schema),
        with_errors=with_errors,
        verify_crc=verify_crc,
        max_decompressed_size=max_decompressed_size,
        source=column,
    )
    return df.select(*keep, column).mapInArrow(decode, schema)


class EpochHistories:
    """Epoch histories of many partitions, for vectorized lookups inside Spark.

    >>> h = EpochHistories({("orders", 0): ([(0, 0), (3, 120)], 200)}).broadcast(spark)
    >>> df.withColumn("epoch", h.epoch_for_offset("topic", "partition", "offset"))
    >>> df.withColumn("answer", h.end_offset_for("topic", "partition", "leader_epoch"))
    """

    def __init__(self, histories: Mapping[tuple[str, int], History]) -> None:
        self._histories = {key: ([tuple(e) for e in entries], int(leo)) for key, (entries, leo) in histories.items()}
        self._broadcast: Broadcast | None = None

    def broadcast(self, spark: SparkSession) -> EpochHistories:
        # The token keys the per-worker cache of built LeaderEpochCaches to this broadcast.
        self._broadcast = spark.sparkContext.broadcast({"token": uuid.uuid4().hex, "histories": self._histories})
        return self

    def _value(self) -> Broadcast:
        if self._broadcast is None:
            raise RuntimeError("call .broadcast(spark) before using the lookups in a query")
        return self._broadcast

    def epoch_for_offset(self, topic: str | Column, partition: str | Column, offset: str | Column) -> Column:
        """The epoch whose entry covers each offset (largest start <= offset), null before the first."""
        histories = self._value()

        @pandas_udf("int")  # type: ignore[call-overload]
        def epoch_for_offset(topics: pd.Series, partitions: pd.Series, offsets: pd.Series) -> pd.Series:
            out = np.full(len(offsets), -1, dtype=np.int32)
            for (t, p), index in _groups(topics, partitions):
                cache = _cache(histories, t, p)
                if cache is not None:
                    out[index] = cache[0].epochs_for_offsets(offsets.to_numpy(np.int64)[index])
            return pd.Series(out).where(out >= 0).astype("Int32")

        return epoch_for_offset(topic, partition, offset)

    def end_offset_for(self, topic: str | Column, partition: str | Column, epoch: str | Column) -> Column:
        """The OffsetsForLeaderEpoch answer for each requested epoch: struct<epoch int, end_offset long>
        ((-1, -1) when undefined, as the broker answers)."""
        histories = self._value()

        @pandas_udf("epoch int, end_offset long")  # type: ignore[call-overload]
        def end_offset_for(topics: pd.Series, partitions: pd.Series, epochs: pd.Series) -> pd.DataFrame:
            out_epochs = np.full(len(epochs), -1, dtype=np.int32)
            out_offsets = np.full(len(epochs), -1, dtype=np.int64)
            for (t, p), index in _groups(topics, partitions):
                cache = _cache(histories, t, p)
                if cache is not None:
                    e, o = cache[0].end_offsets_for(epochs.to_numpy(np.int32)[index], cache[1])
                    out_epochs[index], out_offsets[index] = e, o
            return pd.DataFrame({"epoch": out_epochs, "end_offset": out_offsets})

        return end_offset_for(topic, partition, epoch)


Batches = Mapping[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]  # partition -> base, last, epoch


def batch_epochs(spark: SparkSession, batches: Batches) -> Callable[..., Column]:
    """A pandas UDF ``(topic, partition, offset) -> int``: the epoch of the batch holding the offset,
    null when none does. `batches` maps a partition to its batches' sorted, non-overlapping (base
    offset, last offset, epoch) arrays (broadcast once)."""
    shared = spark.sparkContext.broadcast(dict(batches))

    @pandas_udf("int")  # type: ignore[call-overload]
    def batch_epoch(topics: pd.Series, partitions: pd.Series, offsets: pd.Series) -> pd.Series:
        none = np.iinfo(np.int64).min  # an epoch may be -1 (a batch of no epoch): not a marker
        out = np.full(len(offsets), none, dtype=np.int64)
        values = offsets.to_numpy(np.int64)
        for key, index in _groups(topics, partitions):
            found = shared.value.get(key)
            if found is None:
                continue
            base, last, epoch = found
            at = values[index]
            i = np.maximum(np.searchsorted(base, at, "right") - 1, 0)
            inside = (at >= base[i]) & (at <= last[i]) if len(base) else np.zeros(len(at), dtype=bool)
            out[index] = np.where(inside, epoch[i].astype(np.int64) if len(base) else none, none)
        return pd.Series(out).where(out != none).astype("Int32")

    return batch_epoch


def _groups(topics: pd.Series, partitions: pd.Series) -> Iterator[tuple[tuple[str, int], np.ndarray]]:
    keys = pd.DataFrame({"t": topics.to_numpy(), "p": partitions.to_numpy()})
    for key, index in keys.groupby(["t", "p"], sort=False).indices.items():
        yield (key[0], int(key[1])), index


# Caches built once per broadcast per Python worker (workers are reused across tasks).
_CACHES: dict[tuple[str, str, int], tuple[_core.LeaderEpochCache, int] | None] = {}


def _cache(histories: Broadcast, topic: str, partition: int) -> tuple[_core.LeaderEpochCache, int] | None:
    key = (histories.value["token"], topic, partition)
    if key not in _CACHES:
        found = histories.value["histories"].get((topic, partition))
        _CACHES[key] = None if found is None else (_core.LeaderEpochCache(found[0]), found[1])
    return _CACHES[key]


__all__ = ["EpochHistories", "batch_epochs", "decode_batches"]

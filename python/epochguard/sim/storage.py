"""A broker's disk in the simulator: partition logs that survive a crash."""

from __future__ import annotations

import itertools

from epochguard.storage.log import PartitionLog

_generations = itertools.count(1)


class SimLog(PartitionLog):
    """A `PartitionLog` that marks its truncations, so the invariant checker re-reads only what changed.

    `generation` takes a new, never reused value whenever data may have been removed (and for every
    log object, recovered ones included); nothing else about the log differs.
    """

    @property
    def generation(self) -> int:
        gen = self.__dict__.get("_generation")
        if gen is None:
            gen = self.__dict__["_generation"] = next(_generations)
        return gen

    def _bump(self) -> None:
        self.__dict__["_generation"] = next(_generations)

    def truncate_to(self, offset: int) -> bool:
        removed = super().truncate_to(offset)
        if removed:
            self._bump()
        return removed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        super().truncate_fully_and_start_at(offset)
        self._bump()

    def records_between(self, start: int, end: int) -> dict[int, tuple[int, bytes | None, bytes | None]]:
        """offset -> (batch leader epoch, key, value) for offsets in [start, end)."""
        out: dict[int, tuple[int, bytes | None, bytes | None]] = {}
        if start >= end:
            return out
        for batch in self.batches(start, end):
            for record in batch.records():
                if start <= record.offset < end:
                    out[record.offset] = (batch.partition_leader_epoch, record.key, record.value)
        return out

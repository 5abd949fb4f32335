"""A broker's disk in the simulator: partition logs that survive a crash, and their HW checkpoint."""

from __future__ import annotations

from epochguard.log import PartitionLog


class SimLog(PartitionLog):
    """A `PartitionLog` that counts its truncations, so the invariant checker re-reads only what changed.

    `generation` moves whenever data may have been removed; nothing else about the log differs.
    """

    generation = 0

    def truncate_to(self, offset: int) -> bool:
        removed = super().truncate_to(offset)
        if removed:
            self.generation += 1
        return removed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        super().truncate_fully_and_start_at(offset)
        self.generation += 1

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

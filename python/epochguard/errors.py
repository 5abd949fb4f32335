"""The one exception hierarchy users import. Everything derives from `EpochGuardError`."""

from epochguard._core import CheckpointError, CorruptRecordError, EpochGuardError

__all__ = ["EpochGuardError", "CorruptRecordError", "CheckpointError"]

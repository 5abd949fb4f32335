"""Kafka's storage module: one replica's log (`log.PartitionLog`, after `UnifiedLog`, `LocalLog` and
`LogSegment`) and the broker's log directory (`logdir`, with the pure file parsers of
`logdir_format`). The leader-epoch cache itself is the Rust core's `LeaderEpochCache`.
"""

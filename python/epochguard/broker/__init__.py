"""The broker side, sans-IO (Kafka's `core` server module): a partition's leadership
(`partition.Partition`, `kafka.cluster.Partition`), the follower's fetcher (`fetcher.ReplicaFetcher`,
`ReplicaFetcherThread` and `AbstractFetcherThread`), all partitions of one broker
(`replica_manager.ReplicaManager`) and the group coordinator (`group`).
"""

"""Run the unclean-election cells for Spark's Kafka source and epochguard-kafka; write the comparison table.

    python tools/stream_matrix.py [--cells refill-above,...] [--sources kafka,...] [--cluster serve|kafka]

Needs Spark's Kafka source's jars (`make spark-kafka`). Starts one local Spark session with them, runs each
(source, cell) of `tests.spark.stream_matrix` against `epochguard serve`'s cluster in-process (or, with
`--cluster kafka`, against a real Kafka cluster of 1 controller and 3 brokers, `make kafka`, with the wire
proxy of tests/real_kafka/wire_proxy.py in front of its brokers to hold a task's Fetch), and writes
docs/stream-matrix.json and the table between the stream-matrix markers of docs/streaming.md (cells not run
this time keep their last result; a run that stops early keeps the cells it finished).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from tests.spark.stream_matrix import CELLS, SOURCES, previous_results, run_cell, spark_kafka_jars, write_docs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--cluster", choices=("serve", "kafka"), default="serve")
    args = parser.parse_args()
    jars = spark_kafka_jars()
    if not jars:
        print("Spark's Kafka source is not fetched: run `make spark-kafka`", file=sys.stderr)
        return 2
    import pyspark

    from epochguard.spark import local_session

    spark = local_session("local[2]", app_name="stream-matrix", shuffle_partitions=2,
                          conf={"spark.jars": ",".join(jars)})
    connector = next(Path(j).name for j in jars if "spark-sql-kafka" in j)
    clients = next(Path(j).name for j in jars if "kafka-clients" in j)
    meta = {"versions": f"pyspark {pyspark.__version__}, {connector}, {clients}"}
    results = {(r.cluster, r.source, r.cell): r for r in previous_results()}  # cells not run this time are kept
    kafka = proxy = None
    try:
        if args.cluster == "kafka":
            from tests.real_kafka.wire_proxy import start_proxied_cluster

            base = Path(__file__).resolve().parents[1] / "target" / "real-kafka" / "stream-matrix"
            shutil.rmtree(base, ignore_errors=True)  # a fresh cluster id: the last run's log dirs would refuse it
            kafka, proxy = start_proxied_cluster(base, brokers=3, elr=False)
        for source in args.sources.split(","):
            for cell in args.cells.split(","):
                if kafka is not None:
                    from tests.spark.guard_kafka import KafkaGuardCluster

                    topic = f"stream-{source.replace('/', '-')}-{cell}"
                    result = run_cell(spark, source, cell, partial(KafkaGuardCluster, kafka, topic, proxy), "kafka")
                else:
                    result = run_cell(spark, source, cell)
                print(f"{args.cluster:6} {source:26} {cell:14} {result.verdict:7} {result.detail}", flush=True)
                results[(result.cluster, source, cell)] = result
                write_docs(list(results.values()), meta)  # after each cell: a crash keeps what ran
    finally:
        spark.stop()
        if kafka is not None:
            kafka.close()
        if proxy is not None:
            proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Run the unclean-election cells for Spark's Kafka source and epochguard-kafka; write the comparison table.

    python tools/stream_matrix.py [--cells refill-above,...] [--sources kafka,...]

Needs Spark's Kafka source's jars (`make spark-kafka`). Starts one local Spark session with them, runs each
(source, cell) of `tests.spark.stream_matrix` against `epochguard serve`'s cluster in-process, and writes
docs/stream-matrix.json and the table between the stream-matrix markers of docs/streaming.md (cells not run
this time keep their last result; a run that stops early keeps the cells it finished).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    from tests.spark.stream_matrix import CELLS, SOURCES, previous_results, run_cell, spark_kafka_jars, write_docs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("--sources", default=",".join(SOURCES))
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
    results = {(r.source, r.cell): r for r in previous_results()}  # cells not run this time are kept
    try:
        for source in args.sources.split(","):
            for cell in args.cells.split(","):
                result = run_cell(spark, source, cell)
                print(f"{source:26} {cell:14} {result.verdict:7} {result.detail}", flush=True)
                results[(source, cell)] = result
                write_docs(list(results.values()), meta)  # after each cell: a crash keeps what ran
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The headline ratios of the performance table (docs/performance.md), from one pytest-benchmark JSON run.

Each ratio divides a baseline's time by epochguard's, both measured in the same run (minimum of the
rounds), so it is bigger-is-better and largely independent of how fast or loaded the machine is: the
thing CI can compare across runs on shared runners. Output: github-action-benchmark's
`customBiggerIsBetter` JSON on stdout (or `--out FILE`), a table on stderr.

Run: python benches/ratios.py target/bench.json [--out target/ratios.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

# A baseline that took turns with epochguard's rounds in the same benchmark: its round times are that
# benchmark's extra_info["baseline_seconds"] (benches/python/test_bench_client.py, the producer pairs).
TURNS = "turns"


@dataclass(frozen=True)
class Ratio:
    name: str
    ours: str  # pytest-benchmark `fullname` suffix of epochguard's benchmark
    baseline: str  # ... and of the baseline measured in the same run (or TURNS)


RATIOS = (
    Ratio("decode 1 KiB values: epochguard vs kafka-python", "test_epochguard_1k", "test_kafka_python_1k"),
    Ratio("decode 100-byte values: epochguard vs kafka-python", "test_epochguard_100b", "test_kafka_python_100b"),
    # The fraction of this machine's memory bandwidth: a numpy copy of the same bytes, taking turns.
    Ratio("decode 1 KiB values: epochguard vs a memcpy of the same bytes", "test_epochguard_1k", TURNS),
    Ratio("decode 100-byte values: epochguard vs a memcpy of the same bytes", "test_epochguard_100b", TURNS),
    Ratio("lz4 batches to Arrow vs raw lz4.frame decompression", "test_compressed_decode[lz4]", TURNS),
    Ratio("zstd batches to Arrow vs raw zstandard decompression", "test_compressed_decode[zstd]", TURNS),
    Ratio("snappy batches to Arrow vs raw cramjam snappy decompression", "test_compressed_decode[snappy]", TURNS),
    Ratio("gzip batches to Arrow vs raw zlib decompression", "test_compressed_decode[gzip]", TURNS),
    # The same with binary_view=True (values as views, not copied).
    Ratio("decode 1 KiB values as binary_view vs a memcpy of the same bytes", "test_epochguard_1k_views", TURNS),
    Ratio("decode 100-byte values as binary_view vs a memcpy of the same bytes", "test_epochguard_100b_views", TURNS),
    *(Ratio(f"{codec} batches to Arrow as binary_view vs raw {name} decompression",
            f"test_compressed_decode_views[{codec}]", TURNS)
      for codec, name in (("lz4", "lz4.frame"), ("zstd", "zstandard"), ("snappy", "cramjam snappy"),
                          ("gzip", "zlib"))),
    *(Ratio(f"{codec} batches to Arrow as binary_view vs raw {name} decompression keeping every output",
            f"test_compressed_decode_views_vs_kept[{codec}]", TURNS)
      for codec, name in (("lz4", "lz4.frame"), ("zstd", "zstandard"))),
    Ratio("epochs_for_offsets 1e6 random vs numpy.searchsorted",
          "test_epochguard_epochs_for_offsets[random]", "test_numpy_searchsorted[random]"),
    Ratio("epochs_for_offsets 1e6 sorted vs numpy.searchsorted",
          "test_epochguard_epochs_for_offsets[sorted]", "test_numpy_searchsorted[sorted]"),
    Ratio("read_kafka_logs vs kafka-python pandas UDF", "test_read_kafka_logs", "test_kafka_python_pandas_udf"),
    *(Ratio(f"client poll_arrow vs confluent-kafka consume(10000), {where}", f"test_client_poll_arrow[{where}]",
            f"test_confluent_consume[{where}]") for where in ("serve", "kafka")),
    *(Ratio(f"client poll_arrow vs confluent-kafka consume(10000), fetch.queue.backoff.ms 10, {where}",
            f"test_client_poll_arrow[{where}]", f"test_confluent_consume_no_backoff[{where}]")
      for where in ("serve", "kafka")),
    *(Ratio(f"client iterator vs kafka-python iterator, {where}", f"test_client_iterator[{where}]",
            f"test_kafka_python_iterator[{where}]") for where in ("serve", "kafka")),
    *(Ratio(f"client send_arrow vs confluent-kafka produce() loop, {where}", f"test_client_send_arrow[{where}]",
            TURNS) for where in ("serve", "kafka")),
    *(Ratio(f"client send vs kafka-python send, {where}", f"test_client_send[{where}]", TURNS)
      for where in ("serve", "kafka")),
    Ratio("recover (dedupe read included) vs confluent-kafka produce() loop, Kafka 4.4",
          "test_recover_vs_confluent_kafka_produce_loop", TURNS),
    Ratio("epochguard-kafka vs Spark's Kafka source, 1 KiB rows, 8 partitions, Kafka 4.4",
          "test_stream_read[epochguard-kafka]", "test_stream_read[kafka]"),
)


def _find(benchmarks: list[dict], suffix: str) -> dict | None:
    found = [b for b in benchmarks if b["fullname"].endswith("::" + suffix)]
    if len(found) > 1:
        raise ValueError(f"{suffix!r} names {len(found)} benchmarks")
    return found[0] if found else None


def _min_seconds(benchmarks: list[dict], suffix: str) -> float | None:
    found = _find(benchmarks, suffix)
    return float(found["stats"]["min"]) if found else None


def _baseline_min_seconds(benchmarks: list[dict], r: Ratio) -> float | None:
    if r.baseline != TURNS:
        return _min_seconds(benchmarks, r.baseline)
    found = _find(benchmarks, r.ours)
    turns = (found or {}).get("extra_info", {}).get("baseline_seconds")
    return float(min(turns)) if turns else None


def ratios(report: dict) -> list[dict]:
    """The ratios whose two benchmarks are both in `report` (a `--benchmark-json` document)."""
    out = []
    for r in RATIOS:
        ours, base = _min_seconds(report["benchmarks"], r.ours), _baseline_min_seconds(report["benchmarks"], r)
        if ours is None or base is None:
            continue
        out.append({
            "name": r.name,
            "unit": "x (baseline time / epochguard time, same run)",
            "value": round(base / ours, 3),
            "extra": f"epochguard {ours * 1e3:.3f} ms, baseline {base * 1e3:.3f} ms (min of rounds)",
        })
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, metavar="PATH", help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("--out", type=Path, metavar="PATH", help="write the JSON here instead of stdout")
    args = parser.parse_args(argv)
    found = ratios(json.loads(args.report.read_text()))
    if not found:
        print(f"{args.report}: no headline benchmark pair found", file=sys.stderr)
        return 2
    for entry in found:
        print(f"{entry['value']:8.2f}x  {entry['name']}  ({entry['extra']})", file=sys.stderr)
    text = json.dumps(found, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

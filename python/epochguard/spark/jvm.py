"""The JVM `kafka-log` reader: finding, building and telling apart `tools/kafka-log-reader`.

Where its jar is on a session's classpath, ``spark.read.format("kafka-log")`` is a Spark DataSource V2
on the JVM (``io.epochguard.spark.KafkaLogDataSource``): the Rust decoder (``rust/jni``, cargo feature
``jvm``) fills Arrow buffers that Spark reads as columnar batches, through JNI and Arrow's C Data
Interface, with projection, filters and COUNT/min/max(offset) pushed down to the batch headers.
Elsewhere `kafka-log` is the Python source (`epochguard.spark.datasource`), which is also always
registered as ``kafka-log-python``.

The jar (with the native library inside) is, in order: ``$EPOCHGUARD_KAFKA_LOG_JAR``; in a source
checkout, the one built from its sources by `build` into ``$EPOCHGUARD_CACHE/kafka-log-reader/`` (a
directory named by pyspark's version and the hash of the Java, Rust and Cargo sources, as the wire
drivers are cached); in an installed wheel, the copy shipped at ``epochguard/spark/jars/``.
``python -m epochguard.spark.jvm`` builds it (``make setup`` does): Maven compiles against the Spark
jars inside pyspark (what runs), cargo builds the library.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from epochguard.builds import build_into, cache_base, locked, run, source_hash

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["JvmReaderError", "jar", "missing", "build", "package", "reader_of", "metrics", "JAR_NAME"]

JAR_NAME = "epochguard-kafka-log-reader.jar"
SCAN_MARKER = "epochguard JVM kafka-log reader"  # in the scan's description: `df.explain()` shows it
PACKAGED = Path(__file__).with_name("jars") / JAR_NAME
_LIBRARY = "libepochguard_jni.so"


class JvmReaderError(RuntimeError):
    """The JVM reader cannot be built here; the message says what is missing or how the build failed."""


def _checkout() -> Path:
    """The repository this package runs from (the reader's sources are under its tools/ and rust/)."""
    return Path(__file__).resolve().parents[3]


def _sources() -> list[Path]:
    root = _checkout()
    reader = root / "tools" / "kafka-log-reader"
    files = [reader / "pom.xml", *sorted(p for p in (reader / "src").rglob("*") if p.is_file())]
    rust = root / "rust"
    files += [root / "Cargo.toml", root / "Cargo.lock", *sorted(rust.glob("*.rs"))]
    # Only what the `jvm` library compiles: not the pyo3 binding (rust/py) nor the wire codec.
    files += [*sorted((rust / "records").rglob("*.rs")), *sorted((rust / "jni").rglob("*.rs"))]
    return files


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _cached_jar() -> Path | None:
    """Where the jar built from this checkout's sources goes (None outside a checkout)."""
    if not (_checkout() / "tools" / "kafka-log-reader" / "pom.xml").is_file():
        return None
    import pyspark

    return cache_base() / "kafka-log-reader" / f"spark-{pyspark.__version__}-{source_hash(_sources())}" / JAR_NAME


def jar() -> Path | None:
    """The JVM reader's jar to put on a session, or None when there is none (see the module docstring)."""
    override = os.environ.get("EPOCHGUARD_KAFKA_LOG_JAR")
    if override:
        return Path(override)
    cached = _cached_jar()
    if cached is not None:
        return cached if cached.is_file() else None
    return PACKAGED if PACKAGED.is_file() else None


def missing() -> str | None:
    """None when the jar is there or can be built here, else what is missing. Never builds."""
    if jar() is not None:
        return None
    if _cached_jar() is None:
        return f"the JVM kafka-log reader is neither shipped ({PACKAGED}) nor buildable (no source checkout)"
    for tool, hint in (("mvn", "apt-get install maven"), ("javac", "apt-get install openjdk-17-jdk-headless"),
                       ("cargo", "https://rustup.rs")):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH to build the JVM kafka-log reader ({hint})"
    if not any(_spark_jars().glob("spark-sql_2.13-*.jar")):
        return f"pyspark's Spark jars are not at {_spark_jars()}"
    return None


def _version(prefix: str) -> str:
    """The version in the name of pyspark's jar `prefix-<version>.jar`."""
    for path in _spark_jars().glob(f"{prefix}-*.jar"):
        match = re.fullmatch(re.escape(prefix) + r"-(\d[\w.]*)\.jar", path.name)
        if match:
            return match.group(1)
    raise JvmReaderError(f"pyspark's jars ({_spark_jars()}) hold no {prefix}-<version>.jar")


def build() -> float:
    """Build the jar into the cache unless it is there: cargo builds the decoder's JNI library
    (`--features jvm`, its own target directory), Maven compiles the reader against pyspark's jars
    and bundles the library. The seconds it took (0.0 when cached). Raises JvmReaderError."""
    import time

    why = missing()
    if why is not None:
        raise JvmReaderError(why)
    final = _cached_jar()
    if final is None or final.is_file():
        return 0.0
    started = time.monotonic()
    root = _checkout()

    def make(tmp: Path) -> None:
        env = {**os.environ, "CARGO_TARGET_DIR": str(root / "target" / "jvm")}
        run(["cargo", "build", "--locked", "--release", "--lib", "--features", "jvm"],
            "building the decoder's JNI library", JvmReaderError, cwd=root, env=env)
        native = tmp / "native"
        native.mkdir()
        shutil.copyfile(root / "target" / "jvm" / "release" / "lib_core.so", native / _LIBRARY)
        versions = {"spark.version": _version("spark-sql_2.13"), "scala.version": _version("scala-library"),
                    "arrow.version": _version("arrow-vector"), "jackson.version": _version("jackson-databind"),
                    "kryo.version": _version("kryo-shaded"),
                    "hadoop.version": _version("hadoop-client-api")}
        run(["mvn", "-q", "-B", "-f", str(root / "tools" / "kafka-log-reader" / "pom.xml"), "clean", "package",
             f"-Dspark.jars.dir={_spark_jars()}", f"-Dnative.dir={native}",
             *(f"-D{k}={v}" for k, v in versions.items())],
            "building the JVM kafka-log reader with Maven", JvmReaderError)
        built = root / "tools" / "kafka-log-reader" / "target" / JAR_NAME
        shutil.copyfile(built, tmp / JAR_NAME)
        shutil.rmtree(native)

    final.parent.parent.mkdir(parents=True, exist_ok=True)
    with locked(final.parent.parent):
        build_into(final.parent, make)
    return time.monotonic() - started


def reader_of(df: DataFrame) -> str:
    """Which reader a ``format("kafka-log")`` DataFrame runs: ``"jvm"`` or ``"python"`` (from its
    physical plan, as ``df.explain()`` shows it: the JVM scan names itself)."""
    plan = _plan(df)
    if SCAN_MARKER in plan:
        return "jvm"
    if "BatchScan kafka-log" in plan and "(Python)" in plan:  # a Python source's scan: "BatchScan <name>[..] (Python)"
        return "python"
    raise ValueError("this DataFrame reads no kafka-log source")


def _plan(df: DataFrame) -> str:
    jdf = getattr(df, "_jdf", None)
    if jdf is not None:  # classic
        return str(jdf.queryExecution().executedPlan().toString())
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # Spark Connect: the plan the server explains
        df.explain()
    return out.getvalue()


def metrics(spark: SparkSession) -> dict[str, int]:
    """The JVM reader's counters in this session's JVM (the driver's; in local mode the executors'
    too): scans, batches decoded, batches skipped by their headers, chunks counted from headers,
    segments pruned. Empty when the reader is not on the classpath (or over Spark Connect)."""
    try:
        snapshot = list(spark._jvm.io.epochguard.spark.KafkaLogMetrics.snapshot())  # type: ignore[union-attr]
    except Exception:
        return {}
    names = ("scans", "batches_decoded", "batches_skipped", "chunks_counted", "segments_pruned")
    return dict(zip(names, (int(v) for v in snapshot), strict=True))


def package() -> Path:
    """Copy the built jar to `PACKAGED`, for a wheel to ship (`make wheel`); builds it first if needed."""
    build()
    built = _cached_jar()
    if built is None or not built.is_file():
        raise JvmReaderError("no JVM reader jar was built to package")
    PACKAGED.parent.mkdir(exist_ok=True)
    tmp = PACKAGED.with_suffix(".tmp")
    shutil.copyfile(built, tmp)
    os.replace(tmp, PACKAGED)
    return PACKAGED


def main(argv: Sequence[str] | None = None) -> int:
    """Build the jar if it is not there (``--package``: and copy it into the package for a wheel); a
    missing toolchain is reported, and fails under CI (and always with ``--package``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    ci = os.environ.get("CI", "").lower() in ("true", "1")
    try:
        if args == ["--package"]:
            print(f"jvm reader: packaged at {package()}")
            return 0
        took = build()
        print(f"jvm reader: ready at {jar()}" + (f" (built in {took:.0f} s)" if took else " (cached)"))
        return 0
    except JvmReaderError as exc:
        print(f"jvm reader: unavailable: {exc}", file=sys.stderr)
        return 1 if ci or args else 0


if __name__ == "__main__":
    sys.exit(main())

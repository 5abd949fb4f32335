"""The non-Python drivers' toolchains: the Java client's jars and compiled driver, the Go drivers' binary.

Sources are checked in under `tools/drivers/` of the repository: `java/pom.xml` (kafka-clients and a
logger, nothing built by Maven) with the one-file `java/Driver.java`, and `go/` (a Go module, go.mod and
go.sum committed, nothing vendored). `prepare()` builds what a driver runs into a cache directory keyed
by the hash of the files it comes from, so a changed pin or source builds anew and an unchanged one never
rebuilds:

- `java/jars-<hash of pom.xml>/`: `mvn dependency:copy-dependencies` from Maven Central;
- `java/classes-<hash of pom.xml and Driver.java>/Driver.class`: `javac` once (a single-file launch,
  `java Driver.java`, compiles in memory at every start: slower, see the tests' timing note);
- `go/<hash of go.mod, go.sum and *.go>/epochguard-go-driver`: `go build` with modules from the proxy.

The cache is `$EPOCHGUARD_CACHE/drivers` (default `~/.cache/epochguard/drivers`); builds run under a file
lock and land by an atomic rename, so concurrent test runs share one build and a killed build leaves no
half-written cache entry. `python -m epochguard.wire.drivers.toolchain` prepares everything (`make test`
runs it).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from epochguard.builds import build_into, cache_base, locked, run, source_hash

__all__ = ["ToolchainError", "KINDS", "sources", "cache_root", "missing", "prepare", "java_command", "go_command"]

KINDS = ("java", "go")
_GO_BINARY = "epochguard-go-driver"
# Small, quick JVMs: C1 only and the serial collector start faster and take less of a shared 2-core
# machine than the defaults, which matters more to a driver than peak throughput. slf4j-simple prints
# the consumer internals' INFO lines (SubscriptionState's "Truncation detected ...", resets) to stderr and
# only warnings from the rest (no config dumps).
_JVM_FLAGS = (
    "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-Xshare:auto",
    "-Dorg.slf4j.simpleLogger.logFile=System.err",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.consumer.internals=info",
    "-Dorg.slf4j.simpleLogger.showThreadName=false",
    "-Dorg.slf4j.simpleLogger.showShortLogName=true",
)


class ToolchainError(RuntimeError):
    """A driver's toolchain is missing or its build failed; the message says what to install or read."""


# Where a wheel carries a copy of tools/drivers (`make wheel` stages it; git-ignored in a checkout).
PACKAGED_SOURCES = Path(__file__).with_name("sources")


def sources() -> Path:
    """`tools/drivers` of the repository this package runs from, else the copy an installed wheel
    carries (`PACKAGED_SOURCES`); `$EPOCHGUARD_DRIVER_SOURCES` overrides."""
    override = os.environ.get("EPOCHGUARD_DRIVER_SOURCES")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[4] / "tools" / "drivers"
    return checkout if checkout.is_dir() or not PACKAGED_SOURCES.is_dir() else PACKAGED_SOURCES


def cache_root() -> Path:
    return cache_base() / "drivers"


def _java_files() -> tuple[Path, Path]:
    src = sources() / "java"
    return src / "pom.xml", src / "Driver.java"


def _go_files() -> list[Path]:
    src = sources() / "go"
    return [src / "go.mod", src / "go.sum", *sorted(src.glob("*.go"))]


def _java_dirs() -> tuple[Path, Path]:
    pom, driver = _java_files()
    root = cache_root() / "java"
    return root / f"jars-{source_hash([pom])}", root / f"classes-{source_hash([pom, driver])}"


def _go_binary() -> Path:
    return cache_root() / "go" / source_hash(_go_files()) / _GO_BINARY


def missing(kind: str) -> str | None:
    """None when `kind`'s driver can run here (built, or buildable), else what is missing. Cheap: it
    hashes a few small files and looks at PATH, and never builds."""
    if kind == "java":
        pom, driver = _java_files()
        if not (pom.is_file() and driver.is_file()):
            return f"the Java driver's sources are not at {pom.parent} (a checkout or a `make wheel` wheel has them)"
        if shutil.which("java") is None:
            return "java is not on PATH (Debian: apt-get install openjdk-17-jdk-headless)"
        jars, classes = _java_dirs()
        if not jars.is_dir() and shutil.which("mvn") is None:
            return "mvn is not on PATH to fetch kafka-clients (Debian: apt-get install maven)"
        if not classes.is_dir() and shutil.which("javac") is None:
            return "javac is not on PATH (Debian: apt-get install openjdk-17-jdk-headless)"
        return None
    if kind == "go":
        files = _go_files()
        if not all(f.is_file() for f in files[:2]):
            return f"the Go drivers' module is not at {files[0].parent} (a checkout or a `make wheel` wheel has them)"
        if not _go_binary().is_file() and shutil.which("go") is None:
            return "go is not on PATH (Debian: apt-get install golang-go; the module needs Go >= 1.26)"
        return None
    raise ValueError(f"unknown toolchain {kind!r}; known: {', '.join(KINDS)}")


def _run(cmd: Sequence[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    run(cmd, what, ToolchainError, cwd, env)


def prepare(kind: str) -> float:
    """Build `kind`'s driver into the cache if it is not there; the seconds it took (0.0 when cached).
    Raises ToolchainError naming what is missing or how the build failed."""
    why = missing(kind)
    if why is not None:
        raise ToolchainError(why)
    started = time.monotonic()
    if kind == "java":
        pom, driver = _java_files()
        jars, classes = _java_dirs()
        if jars.is_dir() and classes.is_dir():
            return 0.0
        with locked(jars.parent):
            build_into(jars, lambda tmp: _run(
                ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
                 f"-DoutputDirectory={tmp}"], "fetching kafka-clients with Maven"))
            build_into(classes, lambda tmp: _run(
                ["javac", "-nowarn", "-cp", f"{jars}/*", "-d", str(tmp), str(driver)], "compiling Driver.java"))
    elif kind == "go":
        binary = _go_binary()
        if binary.is_file():
            return 0.0
        with locked(binary.parent.parent):
            env = {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
            build_into(binary.parent, lambda tmp: _run(
                ["go", "build", "-trimpath", "-o", str(tmp / _GO_BINARY), "."], "building the Go drivers",
                cwd=_go_files()[0].parent, env=env))
    else:
        raise ValueError(f"unknown toolchain {kind!r}; known: {', '.join(KINDS)}")
    return time.monotonic() - started


def java_command(*driver_args: str) -> list[str]:
    """The command running the prepared Java driver with `driver_args`."""
    jars, classes = _java_dirs()
    return ["java", *_JVM_FLAGS, "-cp", f"{jars}/*{os.pathsep}{classes}", "Driver", *driver_args]


def go_command(*driver_args: str) -> list[str]:
    """The command running the prepared Go driver binary with `driver_args`."""
    return [str(_go_binary()), *driver_args]


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare every toolchain given (default all); a missing one is reported, and fails under CI."""
    kinds = list(argv if argv is not None else sys.argv[1:]) or list(KINDS)
    ci = os.environ.get("CI", "").lower() in ("true", "1")
    status = 0
    for kind in kinds:
        try:
            took = prepare(kind)
            print(f"drivers: {kind} ready" + (f" (built in {took:.0f} s)" if took else " (cached)"))
        except ToolchainError as exc:
            print(f"drivers: {kind} unavailable: {exc}", file=sys.stderr)
            status = 1 if ci else status
    return status


if __name__ == "__main__":
    sys.exit(main())

"""Where Apache Kafka's jars are, and which java runs them.

`make kafka` (or, on first use, `kafka_jars` itself when mvn is on PATH) runs `mvn
dependency:copy-dependencies` on tools/kafka-broker/pom.xml (in an installed wheel, the copy it ships
beside this module) into `$EPOCHGUARD_CACHE/kafka-<version>-<first 12 hex of the pom's sha256>/` (default
cache `~/.cache/epochguard`), and marks it complete with a `.complete` file, so a changed pom gets a new
dir and a half-copied one is never used. `EPOCHGUARD_KAFKA_JARS` points elsewhere (a dir of jars).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from epochguard.builds import build_into, locked, run

__all__ = ["KAFKA_VERSION", "KafkaNotProvisioned", "POM", "kafka_jars", "find_java", "cache_dir"]

_CHECKOUT_POM = Path(__file__).resolve().parents[3] / "tools" / "kafka-broker" / "pom.xml"
PACKAGED_POM = Path(__file__).with_name("kafka-broker-pom.xml")  # `make wheel` stages it (git-ignored)
POM = _CHECKOUT_POM if _CHECKOUT_POM.is_file() or not PACKAGED_POM.is_file() else PACKAGED_POM
KAFKA_VERSION = "4.4.0"
MIN_JAVA = 17  # Kafka 4.x brokers need Java 17 (clients 11)


class KafkaNotProvisioned(RuntimeError):
    """Kafka's jars or a suitable java are missing; the message names what and how to get it."""


def cache_dir(pom: Path = POM) -> Path:
    root = Path(os.environ.get("EPOCHGUARD_CACHE") or Path.home() / ".cache" / "epochguard")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    return root / f"kafka-{KAFKA_VERSION}-{digest}"


def kafka_jars() -> Path:
    """The dir holding kafka_2.13-<version>.jar and its runtime dependencies."""
    override = os.environ.get("EPOCHGUARD_KAFKA_JARS")
    if override:
        jars = Path(override)
        if not (jars / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
            raise KafkaNotProvisioned(f"EPOCHGUARD_KAFKA_JARS={override} has no kafka_2.13-{KAFKA_VERSION}.jar")
        return jars
    if not POM.is_file():
        raise KafkaNotProvisioned(f"{POM} is missing (neither a source checkout nor a wheel that ships it)")
    jars = cache_dir()
    if not (jars / ".complete").is_file():
        if shutil.which("mvn") is None:
            raise KafkaNotProvisioned(f"Apache Kafka {KAFKA_VERSION} jars not in {jars}: run `make kafka` "
                                      f"(needs mvn and Maven Central)")
        _fetch(jars)
    return jars


def _fetch(jars: Path) -> None:
    """Fetch Kafka's jars into `jars` as `make kafka` does, under the cache's lock (first use)."""
    with locked(jars.parent):
        if (jars / ".complete").is_file():
            return
        shutil.rmtree(jars, ignore_errors=True)  # a copy a killed `make kafka` left without .complete

        def fetch(tmp: Path) -> None:
            run(["mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies", "-DincludeScope=runtime",
                 f"-DoutputDirectory={tmp}"], f"fetching Apache Kafka {KAFKA_VERSION}'s jars", KafkaNotProvisioned)
            (tmp / ".complete").touch()

        build_into(jars, fetch)


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)', out.stderr + out.stdout)
    return int(m.group(1)) if m else None


def find_java() -> str:
    """`$JAVA_HOME/bin/java`, else `java` on PATH, if it is Java 17 or newer."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    for java in candidates:
        major = _java_major(java)
        if major is not None and major >= MIN_JAVA:
            return java
    raise KafkaNotProvisioned(f"no Java {MIN_JAVA}+ found (tried {candidates or 'JAVA_HOME and PATH'}); "
                              f"install a JDK 17+ (Debian: openjdk-17-jre-headless)")

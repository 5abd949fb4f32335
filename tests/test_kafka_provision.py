"""Kafka's jars on first use (issue 37: a pip-installed epochguard runs `--cluster kafka` like a
checkout): without `make kafka`, `kafka_jars` fetches them with mvn into the cache, once, under its lock."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from epochguard.kafka import provision

FAKE_MVN = """#!/bin/sh
# records each call; writes a jar where -DoutputDirectory= says
echo "$@" >> "{log}"
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${{arg#-DoutputDirectory=}}";; esac
done
{fail}
touch "$out/kafka_2.13-4.4.0.jar"
"""


def _fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> Path:
    bin_dir, log = tmp_path / "bin", tmp_path / "mvn.log"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN.format(log=log, fail="echo 'no network' >&2; exit 1" if fail else ""))
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("EPOCHGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EPOCHGUARD_KAFKA_JARS", raising=False)
    return log


def test_first_use_fetches_the_jars_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake_mvn(tmp_path, monkeypatch)
    jars = provision.kafka_jars()
    assert jars == provision.cache_dir() and jars.parent == tmp_path / "cache"
    assert (jars / ".complete").is_file() and (jars / "kafka_2.13-4.4.0.jar").is_file()
    assert provision.kafka_jars() == jars
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "dependency:copy-dependencies" in calls[0] and str(provision.POM) in calls[0]


def test_a_failed_fetch_says_why_and_leaves_no_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_mvn(tmp_path, monkeypatch, fail=True)
    half = provision.cache_dir()
    half.mkdir(parents=True)  # what a killed `make kafka` leaves: no .complete
    with pytest.raises(provision.KafkaNotProvisioned, match="no network"):
        provision.kafka_jars()
    assert not half.exists() and not [p for p in half.parent.iterdir() if p.name.startswith(".kafka")]

"""The Java and Go drivers' plumbing: the relay into the delivery log, and the toolchain cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from epochguard.wire.drivers import toolchain
from epochguard.wire.drivers.delivery_log import digest, parse_args, read_log, typed
from epochguard.wire.drivers.external import driver_argv
from epochguard.wire.drivers.registry import Client
from epochguard.wire.drivers.truth import FinalLog, judge_client
from tests.wire.conftest import require

# A stand-in for Driver.java / the Go binary: prints the events a real one prints, then waits for SIGTERM.
FAKE_CHILD = textwrap.dedent('''
    import json, signal, sys, time
    def emit(**e): print(json.dumps(e), flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    emit(kind="start", client="x", software="fake", version="1.0", argv=sys.argv[1:])
    for off, value in enumerate([b"a", b"b", b"c"]):
        emit(kind="consumed", topic="events", partition=0, offset=off, leader_epoch=None if off == 0 else 3,
             value=value.hex())
    emit(kind="produced", topic="input", partition=0, offset=7, value=b"p".hex(), error=None)
    emit(kind="produced", topic="input", partition=None, offset=None, value=b"q".hex(), error="TimeoutException")
    emit(kind="truncation", source="fetch", text="kgo.ErrDataLoss: lost records")
    print("not json", flush=True)
    print("INFO SubscriptionState - Truncation detected for partition events-0", file=sys.stderr, flush=True)
    while not stop:
        time.sleep(0.02)
    sys.exit(143)  # a JVM's status after SIGTERM and its shutdown hooks
''')


def test_relay_writes_the_common_delivery_log(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(FAKE_CHILD)
    log = tmp_path / "run.jsonl"
    relay = subprocess.Popen([
        sys.executable, "-c",
        "import sys; from epochguard.wire.drivers.delivery_log import parse_args; "
        "from epochguard.wire.drivers.external import relay, driver_argv; "
        "c = parse_args('fake', sys.argv[2:]); "
        "sys.exit(relay('fake', c, [sys.executable, sys.argv[1], *driver_argv(c)]))",
        str(child), "--bootstrap", "h:1", "--log", str(log), "--option", "group.protocol=consumer",
    ])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "Truncation detected" in log.read_text()):
        time.sleep(0.05)
    relay.send_signal(signal.SIGTERM)
    assert relay.wait(timeout=30) == 0
    entries = list(read_log(log))
    kinds = [e["kind"] for e in entries]
    assert kinds.count("start") == 1 and kinds[-1] == "stop"
    # told to stop after it consumed what it did: the consumer's history ends there (truth's stall rule)
    assert kinds.count("stopping") == 1 and max(i for i, k in enumerate(kinds) if k == "consumed") < \
        kinds.index("stopping")
    # stdout and stderr are relayed by two threads, so a stderr line may be logged before `start`
    # (seen under load); every event relayed from stdout follows it.
    start = entries[kinds.index("start")]
    assert kinds.index("start") < min(i for i, k in enumerate(kinds) if k in ("consumed", "produced"))
    assert start["client"] == "fake" and start["software"] == "fake"
    assert start["argv"][start["argv"].index("--option") + 1] == "group.protocol=consumer"
    consumed = [e for e in entries if e["kind"] == "consumed"]
    assert [(e["offset"], e["leader_epoch"], e["digest"]) for e in consumed] == [
        (0, None, digest(b"a")), (1, 3, digest(b"b")), (2, 3, digest(b"c"))]
    produced = [e for e in entries if e["kind"] == "produced"]
    assert [(e["offset"], e["digest"], e["error"]) for e in produced] == [
        (7, digest(b"p"), None), (None, digest(b"q"), "TimeoutException")]
    surfaced = {(e["kind"], e["source"], e["text"]) for e in entries if e["kind"] in ("truncation", "log")}
    assert ("truncation", "fetch", "kgo.ErrDataLoss: lost records") in surfaced
    assert ("log", "fake:stdout", "not json") in surfaced
    # stderr lines are classified as every driver's log lines are
    assert ("truncation", "fake:stderr", "INFO SubscriptionState - Truncation detected for partition events-0") \
        in surfaced
    assert not any(e["kind"] == "error" for e in entries), "a 143 exit after SIGTERM is a clean stop"
    assert entries[-1]["counts"]["consumed"] == 3
    final = FinalLog({("events", 0): {0: digest(b"a"), 1: digest(b"b"), 2: digest(b"c")},
                      ("input", 0): {7: digest(b"p")}}, {("events", 0): 0}, {("events", 0): 3})
    truth = judge_client(log, final)
    assert truth.consumed == 3 and truth.divergences == [] and truth.lost_acked == []


def test_a_child_that_ignores_sigterm_is_killed_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from epochguard.wire.drivers import external

    monkeypatch.setattr(external, "_STOP_GRACE_S", 0.5)
    config = parse_args("fake", ["--bootstrap", "h:1", "--log", str(tmp_path / "l.jsonl"), "--max-seconds", "1"])
    ignoring = ["sh", "-c", 'trap "" TERM; exec sleep 60']  # an ignored signal stays ignored across exec
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:  # the relay's Stop installs its own handlers, in this process here
        assert external.relay("fake", config, ignoring) == 1
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    texts = [e["text"] for e in read_log(config.log) if e["kind"] == "error"]
    assert texts[0] == "fake did not exit 0.5 s after SIGTERM; killed" and "status -9" in texts[1]


def test_driver_argv_round_trips() -> None:
    config = parse_args("x", ["--bootstrap", "a:1,b:2", "--log", "l", "--reset", "none", "--produce-interval-ms",
                              "12.5", "--produce-count", "3", "--max-seconds", "9", "--option", "k=v=w"])
    assert parse_args("x", [*driver_argv(config), "--log", "l"]) == config


def test_options_split_between_consumer_and_producer_and_typed_for_python_clients() -> None:
    config = parse_args("x", ["--bootstrap", "h:1", "--log", "l", "--option", "api_version=2.6", "--option",
                              "producer.enable_idempotence=true", "--option", "producer.linger_ms=5",
                              "--option", "check_crcs=False"])
    assert typed(config.consumer_options) == {"api_version": "2.6", "check_crcs": False}
    assert typed(config.producer_options) == {"enable_idempotence": True, "linger_ms": 5}


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "java").mkdir(parents=True)
    (src / "go").mkdir()
    for f in ("java/pom.xml", "java/Driver.java", "go/go.mod", "go/go.sum", "go/main.go"):
        (src / f).write_text(f)
    return src


def test_toolchain_cache_is_keyed_by_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _sources(tmp_path)
    monkeypatch.setenv("EPOCHGUARD_DRIVER_SOURCES", str(src))
    monkeypatch.setenv("EPOCHGUARD_CACHE", str(tmp_path / "cache"))
    jars, classes = toolchain._java_dirs()
    binary = toolchain._go_binary()
    assert jars.parent == classes.parent == tmp_path / "cache" / "drivers" / "java"
    (src / "java" / "Driver.java").write_text("changed")
    assert toolchain._java_dirs() == (jars, toolchain._java_dirs()[1]) and toolchain._java_dirs()[1] != classes
    (src / "java" / "pom.xml").write_text("kafka-clients 9")
    assert toolchain._java_dirs()[0] != jars
    (src / "go" / "extra.go").write_text("package main")
    assert toolchain._go_binary() != binary
    assert toolchain.java_command("--x")[-2:] == ["Driver", "--x"]


def test_toolchain_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHGUARD_DRIVER_SOURCES", str(_sources(tmp_path)))
    monkeypatch.setenv("EPOCHGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "java is not on PATH" in (toolchain.missing("java") or "")
    assert "go is not on PATH" in (toolchain.missing("go") or "")
    with pytest.raises(toolchain.ToolchainError, match="go is not on PATH"):
        toolchain.prepare("go")
    monkeypatch.setenv("EPOCHGUARD_DRIVER_SOURCES", str(tmp_path / "nowhere"))
    assert "sources are not at" in (toolchain.missing("java") or "")
    with pytest.raises(ValueError, match="unknown toolchain"):
        toolchain.missing("rust")


def test_a_missing_toolchain_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHGUARD_DRIVER_SOURCES", str(_sources(tmp_path)))
    monkeypatch.setenv("EPOCHGUARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    java = Client("java-x", "epochguard.wire.drivers.java", "kafka-clients", toolchain="java")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="java is not on PATH"):
        require(java)
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="java is not on PATH"):
        require(java)
    proc = subprocess.run([sys.executable, "-m", "epochguard.wire.drivers.toolchain", "go"],
                          env={**os.environ, "CI": "true"}, capture_output=True, text=True)
    assert proc.returncode == 1 and "go unavailable: go is not on PATH" in proc.stderr


def test_toolchain_main_reports_cached_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHGUARD_DRIVER_SOURCES", str(_sources(tmp_path)))
    monkeypatch.setenv("EPOCHGUARD_CACHE", str(tmp_path / "cache"))
    binary = toolchain._go_binary()
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    assert toolchain.prepare("go") == 0.0  # cached: no go needed, nothing built
    out = subprocess.run([sys.executable, "-m", "epochguard.wire.drivers.toolchain", "go"],
                         env={**os.environ, "PATH": str(tmp_path / "empty")}, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "drivers: go ready (cached)"
    assert json.loads(json.dumps(toolchain.go_command("--client", "sarama")))[0] == str(binary)

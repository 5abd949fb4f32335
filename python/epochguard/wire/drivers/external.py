"""A driver written in another language, relayed into the delivery log (the Java and Go clients).

The child program (tools/drivers/) prints one JSON object a line on stdout: `start` (its software and
version), `consumed` (topic, partition, offset, leader_epoch, value as hex), `produced` (topic,
partition, offset, value as hex, error), `truncation`/`reset`/`error` (source, text) for what the client
raised; its client library logs to stderr. This relay writes them as the delivery log every driver
writes, with the same digests and the same classification of log lines (`delivery_log.classify`), so
the Python, Java and Go drivers are judged by one truth.

SIGTERM to the relay is passed on to the child, which closes its clients (flushing the producer) and
exits; the relay then writes `stop`. The child dies with the relay if the relay is killed
(PR_SET_PDEATHSIG), so a killed run leaves no JVM behind.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from epochguard.wire.drivers.delivery_log import DeliveryLog, DriverConfig, Stop

_PR_SET_PDEATHSIG = 1
_STOP_GRACE_S = 15.0
# 0, or killed by the SIGTERM passed on: as the signal (Go's default), or 128 + 15 (a JVM after its hooks)
_CLEAN_EXITS = (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def driver_argv(config: DriverConfig) -> list[str]:
    """The common driver command line, for the child."""
    argv = ["--bootstrap", config.bootstrap, "--client-id", config.client_id, "--reset", config.reset,
            "--consume-topic", config.consume_topic, "--produce-topic", config.produce_topic,
            "--produce-interval-ms", repr(config.produce_interval * 1000.0), "--produce-count",
            str(config.produce_count), "--max-seconds", repr(config.max_seconds)]
    for key, value in config.options.items():
        argv += ["--option", f"{key}={value}"]
    if config.group is not None:  # only when asked: a driver without a group mode takes no such flag
        argv += ["--group", config.group]
        if config.leave_when_idle is not None:
            argv += ["--leave-when-idle", repr(config.leave_when_idle)]
    return argv


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the relay dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def relay(
    client: str, config: DriverConfig, command: Sequence[str], *, prepare: Callable[[], object] | None = None
) -> int:
    """Run `command` and relay its events into `config.log`; the child's exit status."""
    log = DeliveryLog(config.log)
    stop = Stop(config.max_seconds, log)
    if prepare is not None:
        try:
            prepare()  # normally a no-op: `make test`, compat and the tests prepare toolchains first
        except Exception as exc:
            log.surfaced(f"{client}: {exc}", source="driver", kind="error")
            log.close()
            print(exc, file=sys.stderr)
            return 2
    child = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                             preexec_fn=_die_with_parent)
    readers = [threading.Thread(target=_relay_events, args=(child.stdout, log, client), daemon=True),
               threading.Thread(target=_relay_log, args=(child.stderr, log, client), daemon=True)]
    for t in readers:
        t.start()
    while child.poll() is None:
        if stop:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                log.surfaced(f"{client} did not exit {_STOP_GRACE_S:g} s after SIGTERM; killed",
                             source="driver", kind="error")
                child.kill()
                child.wait()
            break
        try:
            child.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
    for t in readers:
        t.join(timeout=5)
    if child.returncode not in _CLEAN_EXITS:
        log.surfaced(f"{client} exited with status {child.returncode}", source="driver", kind="error")
    log.close()
    return 0 if child.returncode in _CLEAN_EXITS else 1


def _relay_events(stream: IO[str] | None, log: DeliveryLog, client: str) -> None:
    assert stream is not None
    with stream:  # closed at the child's EOF, on this thread
        _relay_event_lines(stream, log, client)


def _relay_event_lines(stream: IO[str], log: DeliveryLog, client: str) -> None:
    for line in stream:
        try:
            event: dict[str, Any] = json.loads(line)
            kind = event.pop("kind")
        except (json.JSONDecodeError, KeyError, AttributeError):
            log.surfaced(line.rstrip("\n"), source=f"{client}:stdout")
            continue
        if kind == "consumed":
            value = event.get("value")
            log.consumed(event["topic"], event["partition"], event["offset"], event.get("leader_epoch"),
                         None if value is None else bytes.fromhex(value))
        elif kind == "produced":
            log.produced(event["topic"], event.get("partition"), event.get("offset"),
                         bytes.fromhex(event["value"]), error=event.get("error"))
        elif kind in ("truncation", "reset", "error"):
            log.surfaced(str(event.get("text", "")), source=str(event.get("source", client)), kind=kind)
        elif kind == "start":
            log.write("start", **{**event, "client": client})
        else:
            log.write(kind, **event)


def _relay_log(stream: IO[str] | None, log: DeliveryLog, client: str) -> None:
    assert stream is not None
    with stream:
        for line in stream:
            text = line.rstrip("\n")
            if text.strip():
                log.surfaced(text, source=f"{client}:stderr")

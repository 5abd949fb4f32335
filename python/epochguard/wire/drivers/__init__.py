"""Drivers for real Kafka clients, each run as `python -m epochguard.wire.drivers.<client>`.

A driver consumes topic `events` with assign() (no group) from the beginning, produces to topic `input`
with acks=all, and writes a delivery log (`delivery_log.DeliveryLog`, JSON lines) from which
`truth.judge_client` derives, independently of the server's checker, what the client did at every
divergence. `registry` names the drivers and what each needs installed.
"""

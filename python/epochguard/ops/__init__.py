"""Incident response on live Kafka clusters, from the wire alone: `epochguard watch` (the watcher's network
driver and its outputs over `epochguard.client.watcher`)."""

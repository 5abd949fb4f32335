"""Incident response on live Kafka clusters: `epochguard watch` (the watcher's network driver and its
outputs over `epochguard.client.watcher`, from the wire alone) and `epochguard recover` (put the records an
unclean election lost back)."""

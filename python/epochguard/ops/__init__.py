"""Incident response on live clusters: `recover` (put the records an unclean election lost back)."""

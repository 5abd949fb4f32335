"""epochguard: Kafka's leader-epoch protocol for Python and Spark."""

from epochguard._core import __version__

__all__ = ["__version__"]

"""Wire messages the simulated broker answers beyond the leader-epoch flows: FindCoordinator and
InitProducerId (Kafka's `FindCoordinatorRequest/Response`, `InitProducerIdRequest/Response`).

They live in `epochguard.messages` with every other message (the Rust wire codec builds them from
there); re-exported here for the server's imports.
"""

from __future__ import annotations

from epochguard.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

__all__ = ["FindCoordinatorRequest", "FindCoordinatorResponse", "InitProducerIdRequest", "InitProducerIdResponse"]

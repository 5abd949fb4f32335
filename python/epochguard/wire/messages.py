"""Wire messages the simulated broker answers beyond the leader-epoch flows: InitProducerId and
FindCoordinator (Kafka's `InitProducerIdRequest/Response`, `FindCoordinatorRequest/Response`).

The same shapes as the wire codec's (`epochguard.messages`, cargo feature `wire`): taken from there
when that build is installed, defined here otherwise. Up to v3 FindCoordinator carries one `key`, v4
(KIP-699) a batch in `coordinator_keys`; decoding fills both.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochguard import messages as _messages
from epochguard.errors import Errors

__all__ = ["FindCoordinatorRequest", "FindCoordinatorResponse", "Coordinator", "InitProducerIdRequest",
           "InitProducerIdResponse"]

if hasattr(_messages, "FindCoordinatorRequest"):  # pragma: no cover - the wire codec build
    from epochguard.messages import (  # type: ignore[attr-defined]
        Coordinator,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
    )
else:

    @dataclass(frozen=True, slots=True)
    class InitProducerIdRequest:  # type: ignore[no-redef]
        transactional_id: str | None = None
        transaction_timeout_ms: int = -1
        producer_id: int = -1
        producer_epoch: int = -1
        version: int = 4

    @dataclass(frozen=True, slots=True)
    class InitProducerIdResponse:  # type: ignore[no-redef]
        error_code: Errors = Errors.NONE
        producer_id: int = -1
        producer_epoch: int = -1
        throttle_time_ms: int = 0

    @dataclass(frozen=True, slots=True)
    class FindCoordinatorRequest:  # type: ignore[no-redef]
        key: str = ""
        key_type: int = 0  # 0 group, 1 transaction
        coordinator_keys: tuple[str, ...] = ()
        version: int = 4

    @dataclass(frozen=True, slots=True)
    class Coordinator:  # type: ignore[no-redef]
        key: str
        node_id: int
        host: str
        port: int
        error_code: Errors = Errors.NONE
        error_message: str | None = None

    @dataclass(frozen=True, slots=True)
    class FindCoordinatorResponse:  # type: ignore[no-redef]
        """Up to v3 the first coordinator is encoded as the top-level fields; v4 encodes them all."""

        coordinators: tuple[Coordinator, ...]
        throttle_time_ms: int = 0

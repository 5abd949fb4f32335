"""Wire messages the simulated broker answers beyond the leader-epoch flows: FindCoordinator and
InitProducerId (Kafka's `FindCoordinatorRequest/Response`, `InitProducerIdRequest/Response`).

Field names are the snake_case of the wire names. FindCoordinator's v4 batch form (`coordinator_keys`)
and the single `key` of v0-3 are both `keys` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochguard.errors import Errors

__all__ = ["FindCoordinatorRequest", "FindCoordinatorResponse", "InitProducerIdRequest", "InitProducerIdResponse"]


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    keys: tuple[str, ...]
    key_type: int = 0  # 0 group, 1 transaction
    version: int = 4


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    node_id: int
    host: str
    port: int
    keys: tuple[str, ...] = ()
    error_code: Errors = Errors.NONE
    version: int = 4


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str | None = None
    transaction_timeout_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    producer_id: int
    producer_epoch: int
    error_code: Errors = Errors.NONE

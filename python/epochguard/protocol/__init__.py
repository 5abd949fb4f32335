"""What crosses the wire, used by both sides: the request and response messages (`messages`, the
shapes of Kafka's `org.apache.kafka.common.requests`) and the API version model (`api_versions`,
Kafka's `ApiKeys`, `ApiVersionsResponse` and the client's `NodeApiVersions`). No state machine here.
"""

"""The simulated cluster on the Kafka wire (`epochguard serve`) and the real clients it judges.

`engine` (WireCluster: requests to the sim's state machines), `endpoint` (frames through the codec),
`server` (asyncio listeners, real-time stepping), `scenarios`, `triggers`, `trace` (JSON lines and
replay), `judge` (verdicts), `codec`, `cli`; `drivers` (one per real client).
"""

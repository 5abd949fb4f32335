"""The simulated cluster on the real Kafka wire (`epochguard serve`), and the judge of real clients.

`engine` (WireCluster: requests to the sim's state machines), `endpoint` (frames through the codec),
`server` (asyncio listeners, real-time stepping), `scenarios`, `triggers`, `trace` (JSON lines and
replay), `judge` (verdicts), `codec`, `cli`.
"""

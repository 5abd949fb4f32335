"""The simulated cluster on the Kafka wire (`epochguard serve`) and the real clients it judges."""

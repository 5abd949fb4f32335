"""Apache Kafka itself beside epochguard: a real KRaft cluster on 127.0.0.1, run from Maven Central jars.

`provision` finds the jars `make kafka` copied (tools/kafka-broker/pom.xml, cached by the pom's hash);
`cluster.KafkaCluster` formats, starts and stops one controller and N brokers (kafka.Kafka, the class
bin/kafka-server-start.sh runs) and drives them with kafka-python's admin client: topics with an
explicit assignment, leader/ISR waits, ElectLeaders (PREFERRED or UNCLEAN), log dir copies. The
differential tests (tests/kafka/) and `epochguard compat --cluster kafka` stand on it. A face on top of
the package: nothing below imports it.
"""

from epochguard.kafka.cluster import BrokerStartError, KafkaCluster, PartitionState
from epochguard.kafka.provision import KAFKA_VERSION, KafkaNotProvisioned, find_java, kafka_jars

__all__ = ["KAFKA_VERSION", "BrokerStartError", "KafkaCluster", "KafkaNotProvisioned", "PartitionState",
           "find_java", "kafka_jars"]

"""The client side (Kafka's `clients` module): the sans-IO consumer (`consumer.Consumer`, after
`KafkaConsumer` and its internals) and the client's metadata cache (`metadata.ClientMetadata`, after
`org.apache.kafka.clients.Metadata`); group membership (`coordinator`, `assignors`) and the producer
(`producer`), sans-IO too; and on real sockets (`network`), `kafka_consumer.KafkaConsumer` /
`AsyncConsumer` and `kafka_producer.KafkaProducer` / `AsyncProducer`.
"""

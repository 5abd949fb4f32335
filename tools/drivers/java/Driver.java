// The Java client's wire driver: Apache Kafka's own KafkaConsumer (assign, no group) and KafkaProducer
// (acks=all) against a Kafka endpoint, each event printed as one JSON line on stdout. The Python side
// (python/epochguard/wire/drivers/java.py) turns those lines and the client's log lines (slf4j-simple,
// on stderr) into the delivery log every driver writes, so digests and classification live in one place.
//
// `--option group.protocol=classic|consumer` picks the consumer implementation: KafkaConsumer delegates
// to ClassicKafkaConsumer or AsyncKafkaConsumer by group.protocol alone (ConsumerDelegateCreator, no
// group.id needed); the start line names the delegate actually built. Both validate positions after a
// leader change (KIP-320) against brokers serving OffsetForLeaderEpoch v3+; under
// auto.offset.reset=earliest/latest a detected truncation seeks to the divergence point and is logged
// by SubscriptionState ("Truncation detected ..."), under none poll() throws LogTruncationException.
//
// Run: java -cp 'jars/*' Driver.java --bootstrap HOST:PORT [--client-id ID] [--reset earliest|latest|none]
//      [--consume-topic T] [--produce-topic T] [--produce-interval-ms MS] [--produce-count N]
//      [--max-seconds S] [--option KEY=VALUE ...]   (options go to the consumer)
//      [--group G [--leave-when-idle S]]   (subscribe as a member of G instead of assign; once it consumed
//      something and nothing new came for S seconds, commitSync its position and close: it leaves the group)

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.LogTruncationException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class Driver {
    private static final HexFormat HEX = HexFormat.of();
    private static volatile boolean stopping = false;

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>(Map.of(
            "client-id", "epochguard-java", "reset", "earliest", "consume-topic", "events",
            "produce-topic", "input", "produce-interval-ms", "20", "produce-count", "0", "max-seconds", "600"));
        Properties options = new Properties();
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                System.err.println("usage: Driver --bootstrap HOST:PORT [--KEY VALUE ...]; bad argument " + argv[i]);
                System.exit(2);
            }
            String key = argv[i].substring(2);
            if (key.equals("option")) {
                String[] kv = argv[i + 1].split("=", 2);
                options.setProperty(kv[0], kv.length > 1 ? kv[1] : "");
            } else {
                args.put(key, argv[i + 1]);
            }
        }
        String bootstrap = args.get("bootstrap");
        if (bootstrap == null) {
            System.err.println("--bootstrap is required");
            System.exit(2);
        }
        String clientId = args.get("client-id");
        String reset = args.get("reset");
        String consumeTopic = args.get("consume-topic");
        String produceTopic = args.get("produce-topic");
        double intervalMs = Double.parseDouble(args.get("produce-interval-ms"));
        long produceCount = Long.parseLong(args.get("produce-count"));
        long deadline = System.nanoTime() + (long) (Double.parseDouble(args.get("max-seconds")) * 1e9);

        Properties cprops = new Properties();
        cprops.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cprops.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        cprops.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, reset);
        cprops.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cprops.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cprops.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cprops.putAll(options);
        String group = args.get("group");
        double leaveWhenIdleS = Double.parseDouble(args.getOrDefault("leave-when-idle", "-1"));
        if (group != null) {
            cprops.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        Properties pprops = new Properties();
        pprops.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pprops.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        pprops.put(ProducerConfig.ACKS_CONFIG, "all");
        pprops.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pprops.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pprops.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cprops);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pprops);
        emit("start", "client", "java", "software", "kafka-clients", "version", clientVersion(),
             "client_id", clientId, "reset", reset,
             "group_protocol", cprops.getProperty(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic"),
             "consumer_class", delegateClass(consumer));

        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {  // SIGTERM: leave the loop, close, flush
            stopping = true;
            try {
                consumer.wakeup();
            } catch (IllegalStateException e) {
                // closed already: it left its group
            }
            try {
                done.await(15, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));

        boolean left = false;
        try {
            if (group != null) {
                consumer.subscribe(List.of(consumeTopic));
            } else {
                List<TopicPartition> tps = partitions(consumer, consumeTopic, deadline);
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            }
            long lastConsumed = -1;
            long intervalNs = (long) (intervalMs * 1e6);
            long nextAt = System.nanoTime();
            long sent = 0;
            while (!stopping && System.nanoTime() < deadline) {
                if (!left && leaveWhenIdleS >= 0 && lastConsumed >= 0
                        && System.nanoTime() - lastConsumed >= (long) (leaveWhenIdleS * 1e9)) {
                    consumer.commitSync();
                    consumer.close(CloseOptions.timeout(Duration.ofSeconds(2)));  // LeaveGroup
                    left = true;
                    emit("log", "source", "driver", "text", "committed its position and left its group");
                }
                try {
                    ConsumerRecords<byte[], byte[]> records = ConsumerRecords.empty();
                    if (left) {
                        Thread.sleep(20);
                    } else {
                        records = consumer.poll(Duration.ofMillis(20));
                    }
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        lastConsumed = System.nanoTime();
                        emit("consumed", "topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                             "leader_epoch", r.leaderEpoch().orElse(null),
                             "value", r.value() == null ? null : HEX.formatHex(r.value()));
                    }
                } catch (LogTruncationException e) {  // auto.offset.reset=none: resume at the divergence point
                    emit("truncation", "source", "poll", "text", "LogTruncationException: " + e.getMessage()
                         + " divergentOffsets=" + e.divergentOffsets());
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> d : e.divergentOffsets().entrySet()) {
                        consumer.seek(d.getKey(), d.getValue());
                    }
                } catch (OffsetOutOfRangeException e) {
                    emit("reset", "source", "poll", "text", "OffsetOutOfRangeException: " + e.getMessage());
                    consumer.seekToBeginning(e.partitions());
                } catch (WakeupException | InterruptedException e) {
                    break;
                } catch (KafkaException e) {
                    emit("error", "source", "poll", "text", e.getClass().getSimpleName() + ": " + e.getMessage());
                }
                long now = System.nanoTime();
                if (intervalNs > 0 && (produceCount == 0 || sent < produceCount) && now >= nextAt) {
                    nextAt = Math.max(nextAt + intervalNs, now - intervalNs);  // no burst after a stall
                    byte[] value = String.format("%s-%08d", clientId, sent++).getBytes();
                    producer.send(new ProducerRecord<>(produceTopic, value), (md, exc) -> {
                        if (exc != null) {
                            emit("produced", "topic", produceTopic, "partition", null, "offset", null,
                                 "value", HEX.formatHex(value), "error", exc.toString());
                        } else {
                            emit("produced", "topic", md.topic(), "partition", md.partition(),
                                 "offset", md.hasOffset() ? md.offset() : null, "value", HEX.formatHex(value),
                                 "error", null);
                        }
                    });
                }
            }
        } catch (WakeupException e) {
            // stopped while waiting for the topic
        } finally {
            producer.close(Duration.ofSeconds(5));  // unacknowledged records get their error callbacks
            if (!left) {
                consumer.close(CloseOptions.timeout(Duration.ofSeconds(2)));
            }
            done.countDown();
        }
    }

    private static List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> consumer, String topic, long deadline) {
        while (!stopping && System.nanoTime() < deadline) {
            try {
                List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(2));
                if (infos != null && !infos.isEmpty()) {
                    List<TopicPartition> tps = new ArrayList<>();
                    for (PartitionInfo p : infos) {
                        tps.add(new TopicPartition(p.topic(), p.partition()));
                    }
                    tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
                    return tps;
                }
            } catch (WakeupException e) {
                throw e;
            } catch (KafkaException e) {  // no broker answered yet: ask again
                emit("error", "source", "metadata", "text", e.getClass().getSimpleName() + ": " + e.getMessage());
            }
        }
        return List.of();
    }

    /** kafka-clients' version, from the properties file its jar carries (AppInfoParser's source). */
    private static String clientVersion() {
        try (var in = KafkaConsumer.class.getClassLoader().getResourceAsStream("kafka/kafka-version.properties")) {
            Properties p = new Properties();
            if (in != null) {
                p.load(in);
            }
            return p.getProperty("version", "unknown");
        } catch (java.io.IOException e) {
            return "unknown (" + e + ")";
        }
    }

    /** The class KafkaConsumer delegates to (ClassicKafkaConsumer or AsyncKafkaConsumer). */
    private static String delegateClass(KafkaConsumer<?, ?> consumer) {
        try {
            Field f = KafkaConsumer.class.getDeclaredField("delegate");
            f.setAccessible(true);
            return f.get(consumer).getClass().getSimpleName();
        } catch (ReflectiveOperationException | RuntimeException e) {
            return "unknown (" + e + ")";
        }
    }

    /** One JSON line on stdout: alternating field names and values (String, Number, null). */
    private static synchronized void emit(String kind, Object... fields) {
        StringBuilder sb = new StringBuilder(128).append("{\"kind\":\"").append(kind).append('"');
        for (int i = 0; i < fields.length; i += 2) {
            sb.append(",\"").append(fields[i]).append("\":");
            Object v = fields[i + 1];
            if (v == null) {
                sb.append("null");
            } else if (v instanceof Number) {
                sb.append(v);
            } else {
                quote(sb, v.toString());
            }
        }
        System.out.println(sb.append('}'));
        System.out.flush();
    }

    private static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        sb.append('"');
    }
}

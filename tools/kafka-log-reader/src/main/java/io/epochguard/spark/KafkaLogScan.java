package io.epochguard.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.PriorityQueue;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** One kafka-log read: the listing pruned by the pushed filters, each kept segment cut into
 *  batch-aligned byte ranges of at most {@code chunkBytes}, packed into input partitions (two a core
 *  by default, or the {@code tasks} option), as the Python source plans them. */
final class KafkaLogScan implements Scan, Batch {
  /** A batch-aligned byte range [start, end) of one segment. */
  record Chunk(Listing.Segment segment, long start, long end) implements Serializable {}

  /** The chunks one Spark task reads, in order. */
  record Chunks(List<Chunk> chunks) implements InputPartition {}

  static final long TASK_BYTES = 1L << 30;

  private final Options options;
  private final StructType required;
  private final Pushdown pushdown;
  private final String[] aggregates;
  private List<Chunk> planned;
  private int pruned;

  KafkaLogScan(Options options, StructType required, Pushdown pushdown, String[] aggregates) {
    this.options = options;
    this.required = required;
    this.pushdown = pushdown;
    this.aggregates = aggregates;
  }

  @Override
  public StructType readSchema() {
    if (aggregates == null) {
      return required;
    }
    StructField[] fields = new StructField[aggregates.length];
    for (int i = 0; i < fields.length; i++) {
      fields[i] = DataTypes.createStructField(aggregates[i] + "_" + i, DataTypes.LongType, true);
    }
    return DataTypes.createStructType(fields);
  }

  @Override
  public String description() {
    return "epochguard JVM kafka-log reader: paths=" + options.paths
        + ", columns=" + Arrays.toString(required.fieldNames())
        + ", pushedFilters=" + Arrays.toString(pushdown.pushed())
        + (aggregates == null ? "" : ", pushedAggregates=" + Arrays.toString(aggregates));
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  private synchronized List<Chunk> chunks() {
    if (planned != null) {
      return planned;
    }
    Native.load(options.nativeLibrary);
    List<Chunk> out = new ArrayList<>();
    for (Listing.Segment s : Listing.list(options.paths, hadoopConf())) {
      if (!pushdown.keeps(s)) {
        pruned++;
        continue;
      }
      if (s.size() <= options.chunkBytes || s.remote()) { // a remote segment is read whole
        out.add(new Chunk(s, 0, s.size()));
        continue;
      }
      long[] index;
      try {
        index = Native.batchIndex(s.path());
      } catch (KafkaLogException e) {
        out.add(new Chunk(s, 0, s.size())); // the decoder will report where it breaks
        continue;
      }
      long start = 0;
      long end = 0;
      for (int i = 0; i + 1 < index.length; i += 2) {
        long position = index[i];
        long size = index[i + 1];
        if (position + size - start > options.chunkBytes && end > start) {
          out.add(new Chunk(s, start, end));
          start = position;
        }
        end = position + size;
      }
      if (end > start) {
        out.add(new Chunk(s, start, end));
      }
      if (end < s.size()) {
        out.add(new Chunk(s, end, s.size())); // a partial or corrupt tail: the decoder reports it
      }
    }
    KafkaLogMetrics.SCANS.incrementAndGet();
    KafkaLogMetrics.SEGMENTS_PRUNED.addAndGet(pruned);
    planned = out;
    return out;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<Chunk> chunks = chunks();
    int tasks = options.tasks;
    if (tasks <= 0) {
      // A Spark task costs ~10 ms on 2 busy cores (half the decode of a 21 MB segment): two tasks a
      // core, more only past TASK_BYTES each (epochguard.spark.logs.pack_tasks' rule, with twice its
      // minimum for balance). Counting from headers is a few reads a chunk: one task a core.
      int cores = org.apache.spark.sql.SparkSession.active().sparkContext().defaultParallelism();
      long total = chunks.stream().mapToLong(c -> c.end() - c.start()).sum();
      tasks = aggregates != null ? cores : (int) Math.max(2L * cores, -Math.floorDiv(-total, TASK_BYTES));
    }
    if (chunks.size() <= tasks) {
      return chunks.stream().map(c -> new Chunks(List.of(c))).toArray(InputPartition[]::new);
    }
    // Largest first onto the lightest task, as epochguard.spark.logs.pack_tasks.
    List<List<Chunk>> groups = new ArrayList<>();
    PriorityQueue<long[]> heap = new PriorityQueue<>(Comparator.<long[]>comparingLong(a -> a[0]).thenComparingLong(a -> a[1]));
    for (int i = 0; i < tasks; i++) {
      groups.add(new ArrayList<>());
      heap.add(new long[] {0, i});
    }
    List<Chunk> bySize = new ArrayList<>(chunks);
    bySize.sort(Comparator.comparingLong((Chunk c) -> c.end() - c.start()).reversed());
    for (Chunk c : bySize) {
      long[] lightest = heap.poll();
      groups.get((int) lightest[1]).add(c);
      heap.add(new long[] {lightest[0] + c.end() - c.start(), lightest[1]});
    }
    return groups.stream().filter(g -> !g.isEmpty()).map(Chunks::new).toArray(InputPartition[]::new);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    byte[] conf = null;
    if (options.paths.stream().anyMatch(Options::hasScheme)) { // executors open them with the session's conf
      java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
      try (java.io.DataOutputStream out = new java.io.DataOutputStream(bytes)) {
        hadoopConf().write(out);
      } catch (java.io.IOException e) {
        throw new KafkaLogException("kafka-log: cannot serialize the Hadoop configuration: " + e);
      }
      conf = bytes.toByteArray();
    }
    return new KafkaLogReaderFactory(options, required.fieldNames(), pushdown.bounds.clone(), aggregates, conf);
  }

  private static org.apache.hadoop.conf.Configuration hadoopConf() {
    return org.apache.spark.sql.SparkSession.active().sparkContext().hadoopConfiguration();
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return new CustomMetric[] {new BatchesDecoded(), new BatchesSkipped()};
  }

  public static final class BatchesDecoded extends CustomSumMetric {
    @Override
    public String name() {
      return "batchesDecoded";
    }

    @Override
    public String description() {
      return "record batches decoded";
    }
  }

  public static final class BatchesSkipped extends CustomSumMetric {
    @Override
    public String name() {
      return "batchesSkipped";
    }

    @Override
    public String description() {
      return "record batches skipped by their headers";
    }
  }
}

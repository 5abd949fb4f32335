package io.epochguard.spark;

import java.util.concurrent.atomic.AtomicLong;

/** Counters of this JVM's kafka-log reads (the driver's and, in local mode, its executors'): what
 *  a test or a user asks to see that the JVM reader ran and what its pushdown skipped. Also
 *  reported per scan as Spark SQL metrics ({@link KafkaLogScan#supportedCustomMetrics}). */
public final class KafkaLogMetrics {
  static final AtomicLong SCANS = new AtomicLong();
  static final AtomicLong BATCHES_DECODED = new AtomicLong();
  static final AtomicLong BATCHES_SKIPPED = new AtomicLong();
  static final AtomicLong CHUNKS_COUNTED = new AtomicLong();
  static final AtomicLong SEGMENTS_PRUNED = new AtomicLong();

  private KafkaLogMetrics() {}

  public static long scans() { return SCANS.get(); }
  public static long batchesDecoded() { return BATCHES_DECODED.get(); }
  public static long batchesSkipped() { return BATCHES_SKIPPED.get(); }
  public static long chunksCounted() { return CHUNKS_COUNTED.get(); }
  public static long segmentsPruned() { return SEGMENTS_PRUNED.get(); }

  /** {scans, batches decoded, batches skipped, chunks counted from headers, segments pruned}. */
  public static long[] snapshot() {
    return new long[] {scans(), batchesDecoded(), batchesSkipped(), chunksCounted(), segmentsPruned()};
  }
}

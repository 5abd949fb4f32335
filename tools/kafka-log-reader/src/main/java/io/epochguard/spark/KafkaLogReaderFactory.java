package io.epochguard.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.arrow.c.ArrowArray;
import org.apache.arrow.c.ArrowSchema;
import org.apache.arrow.c.Data;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ViewVarBinaryVector;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/** Readers of one input partition: columnar batches of Arrow vectors the Rust decoder filled
 *  (moved over the C Data Interface, no copy; a window of a segment at a time, decoded as Spark asks
 *  for it), the location columns as constants; or, with aggregates pushed, one row of partial
 *  COUNT(*)/min/max(offset) from the batch headers. A reader imports its Arrow schema once and loads
 *  every later batch into the same vectors, read by the same column vectors: Spark's
 *  {@link ArrowColumnVector}, or for keys and values left as views into the bytes read, a
 *  {@link BinaryViewColumnVector}. */
final class KafkaLogReaderFactory implements PartitionReaderFactory {
  private final Options options;
  private final String[] columns;
  private final long[] bounds;
  private final String[] aggregates;

  private final byte[] hadoopConf; // serialized, when some path is read through Hadoop's FileSystem

  KafkaLogReaderFactory(Options options, String[] columns, long[] bounds, String[] aggregates, byte[] hadoopConf) {
    this.hadoopConf = hadoopConf;
    this.options = options;
    this.columns = columns;
    this.bounds = bounds;
    this.aggregates = aggregates;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return aggregates == null;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    Native.load(options.nativeLibrary);
    return new CountReader(((KafkaLogScan.Chunks) partition).chunks());
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    Native.load(options.nativeLibrary);
    return new ColumnarReader(((KafkaLogScan.Chunks) partition).chunks());
  }

  private static final BufferAllocator ROOT = new RootAllocator(Long.MAX_VALUE);

  private final class ColumnarReader implements PartitionReader<ColumnarBatch> {
    private final Iterator<KafkaLogScan.Chunk> chunks;
    private final BufferAllocator allocator = ROOT.newChildAllocator("kafka-log", 0, Long.MAX_VALUE);
    private final String decodeColumns;
    private KafkaLogScan.Chunk chunk;
    private long handle;
    private VectorSchemaRoot root; // the reader's vectors, imported with the first batch, reloaded by the next
    private ColumnVector[] arrow; // over root's vectors, by output column (null for a location column)
    private final List<BinaryViewColumnVector> views = new ArrayList<>(); // reloaded with each batch
    private final List<ColumnVector> constants = new ArrayList<>();
    private ColumnarBatch batch;
    private long decoded;
    private long skipped;

    ColumnarReader(List<KafkaLogScan.Chunk> chunks) {
      this.chunks = chunks.iterator();
      List<String> record = new ArrayList<>();
      for (String c : columns) {
        if (Schemas.isRecordColumn(c)) {
          record.add(c);
        }
      }
      // Rows are counted from a column: with none asked for (count(*) with filters), the offsets.
      this.decodeColumns = record.isEmpty() ? "offset" : String.join(",", record);
    }

    @Override
    public boolean next() {
      releaseBatch();
      while (true) {
        if (handle == 0) {
          if (!chunks.hasNext()) {
            return false;
          }
          chunk = chunks.next();
          long[] kept = options.withErrors ? null : bounds;
          handle = chunk.segment().remote()
              ? Native.decodeBytes(readRemote(chunk), chunk.start(), decodeColumns, options.verifyCrc,
                  Options.DEFAULT_MAX_DECOMPRESSED, kept, options.withErrors)
              : Native.decode(chunk.segment().path(), chunk.start(), chunk.end(), decodeColumns,
                  options.verifyCrc, Options.DEFAULT_MAX_DECOMPRESSED, kept, options.withErrors);
        }
        try (ArrowArray array = ArrowArray.allocateNew(allocator);
             ArrowSchema schema = root == null ? ArrowSchema.allocateNew(allocator) : null) {
          int rows = Native.next(handle, array.memoryAddress(), schema == null ? 0 : schema.memoryAddress());
          if (rows == -2) {
            String problem = Native.problem(handle);
            int space = problem.indexOf(' ');
            batch = new ColumnarBatch(errorRow(Long.parseLong(problem.substring(0, space)),
                problem.substring(space + 1)), 1);
            return true;
          }
          if (rows < 0) {
            closeHandle();
            continue;
          }
          if (root == null) {
            root = Data.importVectorSchemaRoot(allocator, array, schema, null);
            arrow = new ColumnVector[columns.length];
            for (int i = 0; i < columns.length; i++) {
              if (Schemas.isRecordColumn(columns[i])) {
                arrow[i] = vectorOf(columns[i]);
              }
            }
          } else {
            Data.importIntoVectorSchemaRoot(allocator, array, root, null);
            for (BinaryViewColumnVector v : views) {
              v.reload();
            }
          }
          batch = new ColumnarBatch(vectors(rows), rows);
          return true;
        }
      }
    }

    /** Keys and values the decoder left as views are read in place; the other columns by Spark's own. */
    private ColumnVector vectorOf(String column) {
      if (root.getVector(column) instanceof ViewVarBinaryVector v) {
        BinaryViewColumnVector view = new BinaryViewColumnVector(v, Schemas.TYPES.get(column));
        views.add(view);
        return view;
      }
      return new ArrowColumnVector(root.getVector(column));
    }

    private ColumnVector[] vectors(int rows) {
      ColumnVector[] out = new ColumnVector[columns.length];
      for (int i = 0; i < columns.length; i++) {
        String c = columns[i];
        out[i] = arrow[i] != null ? arrow[i] : constant(c, rows, null, null);
      }
      return out;
    }

    /** One row for a problem: the location, the path, position and reason; null record columns. */
    private ColumnVector[] errorRow(long position, String reason) {
      ColumnVector[] out = new ColumnVector[columns.length];
      for (int i = 0; i < columns.length; i++) {
        out[i] = constant(columns[i], 1, position, reason);
      }
      return out;
    }

    /** A location column, an error column (set when {@code reason} is given), or a null record column. */
    private ColumnVector constant(String c, int rows, Long position, String reason) {
      Listing.Segment s = chunk.segment();
      ConstantColumnVector v = new ConstantColumnVector(rows, Schemas.TYPES.get(c));
      switch (c) {
        case "broker" -> v.setInt(s.broker());
        case "topic" -> v.setUtf8String(UTF8String.fromString(s.topic()));
        case "partition" -> v.setInt(s.partition());
        case "segment" -> v.setLong(s.baseOffset());
        case "path" -> setOrNull(v, reason == null ? null : UTF8String.fromString(s.path()));
        case "error_position" -> {
          if (position == null) {
            v.setNull();
          } else {
            v.setLong(position);
          }
        }
        case "error_reason" -> setOrNull(v, reason == null ? null : UTF8String.fromString(reason));
        default -> v.setNull(); // a record column of an error row
      }
      constants.add(v);
      return v;
    }

    private void setOrNull(ConstantColumnVector v, UTF8String value) {
      if (value == null) {
        v.setNull();
      } else {
        v.setUtf8String(value);
      }
    }

    @Override
    public ColumnarBatch get() {
      return batch;
    }

    /** Adds what the decode of the chunk did to the metrics, and frees it. */
    private void closeHandle() {
      long[] stats = Native.stats(handle);
      decoded += stats[0];
      skipped += stats[1];
      KafkaLogMetrics.BATCHES_DECODED.addAndGet(stats[0]);
      KafkaLogMetrics.BATCHES_SKIPPED.addAndGet(stats[1]);
      Native.close(handle);
      handle = 0;
    }

    private void releaseBatch() {
      for (ColumnVector v : constants) {
        v.close();
      }
      constants.clear();
      batch = null;
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      return new CustomTaskMetric[] {metric("batchesDecoded", decoded), metric("batchesSkipped", skipped)};
    }

    @Override
    public void close() {
      releaseBatch();
      if (handle != 0) {
        closeHandle();
      }
      if (root != null) {
        root.close(); // closes the vectors the ArrowColumnVectors read
        root = null;
      }
      allocator.close();
    }
  }

  /** The chunk's bytes, read through Hadoop's FileSystem into a direct buffer for the decoder. */
  private java.nio.ByteBuffer readRemote(KafkaLogScan.Chunk chunk) {
    long length = chunk.end() - chunk.start();
    if (length > Integer.MAX_VALUE - 8) {
      throw new KafkaLogException("kafka-log: " + chunk.segment().path() + " is over 2 GiB: read it with read_kafka_logs");
    }
    try {
      org.apache.hadoop.conf.Configuration conf = new org.apache.hadoop.conf.Configuration(false);
      conf.readFields(new java.io.DataInputStream(new java.io.ByteArrayInputStream(hadoopConf)));
      org.apache.hadoop.fs.Path path = new org.apache.hadoop.fs.Path(chunk.segment().path());
      byte[] bytes = new byte[(int) length];
      try (org.apache.hadoop.fs.FSDataInputStream in = path.getFileSystem(conf).open(path)) {
        in.readFully(chunk.start(), bytes);
      }
      java.nio.ByteBuffer direct = java.nio.ByteBuffer.allocateDirect(bytes.length);
      direct.put(bytes).flip();
      return direct;
    } catch (java.io.IOException e) {
      throw new KafkaLogException("kafka-log: cannot read " + chunk.segment().path() + ": " + e);
    }
  }

  private static CustomTaskMetric metric(String name, long value) {
    return new CustomTaskMetric() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public long value() {
        return value;
      }
    };
  }

  /** One row: the partial aggregates of the partition's chunks, in the pushed order. */
  private final class CountReader implements PartitionReader<InternalRow> {
    private final List<KafkaLogScan.Chunk> chunks;
    private boolean done;

    CountReader(List<KafkaLogScan.Chunk> chunks) {
      this.chunks = chunks;
    }

    @Override
    public boolean next() {
      return !done;
    }

    @Override
    public InternalRow get() {
      done = true;
      long rows = 0;
      long min = Long.MAX_VALUE;
      long max = Long.MIN_VALUE;
      for (KafkaLogScan.Chunk c : chunks) {
        long[] got = Native.count(c.segment().path(), c.start(), c.end(), options.verifyCrc,
            Options.DEFAULT_MAX_DECOMPRESSED);
        rows += got[0];
        min = Math.min(min, got[1]);
        max = Math.max(max, got[2]);
        KafkaLogMetrics.CHUNKS_COUNTED.incrementAndGet();
      }
      Object[] values = new Object[aggregates.length];
      for (int i = 0; i < values.length; i++) {
        values[i] = switch (aggregates[i]) {
          case "count" -> rows;
          case "min" -> rows == 0 ? null : min;
          default -> rows == 0 ? null : max;
        };
      }
      return new GenericInternalRow(values);
    }

    @Override
    public void close() {}
  }
}

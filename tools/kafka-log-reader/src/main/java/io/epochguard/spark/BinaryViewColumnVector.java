package io.epochguard.spark;

import java.util.List;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.vector.ViewVarBinaryVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/** A key or value column of Arrow binary views read where the Rust decoder left the bytes: in the
 *  window of the segment it read, or in a batch's decompressed records. A view is 16 bytes a row: the
 *  length, then the value itself when it is at most 12 bytes, else a 4-byte prefix, the index of a
 *  data buffer and the offset in it. Spark's {@code ArrowColumnVector} reads no binary view: handing
 *  it a plain binary array copied every value once more (issue 37's profile). Reloaded with each batch
 *  loaded into the vector; little-endian, as Arrow and the one bundled platform (linux-x86_64). */
final class BinaryViewColumnVector extends ColumnVector {
  private static final int VIEW = 16;
  private static final int INLINE = 12;

  private final ViewVarBinaryVector vector;
  private long views; // address of the view buffer
  private long[] data = new long[0]; // addresses of the data buffers, by index
  private long nulls;

  BinaryViewColumnVector(ViewVarBinaryVector vector, DataType type) {
    super(type);
    this.vector = vector;
    reload();
  }

  /** Takes the addresses of the buffers the vector holds now (after a batch was loaded into it). */
  void reload() {
    views = vector.getDataBuffer().memoryAddress();
    List<ArrowBuf> buffers = vector.getDataBuffers();
    if (data.length != buffers.size()) {
      data = new long[buffers.size()];
    }
    for (int i = 0; i < data.length; i++) {
      data[i] = buffers.get(i).memoryAddress();
    }
    nulls = vector.getNullCount();
  }

  @Override
  public boolean isNullAt(int rowId) {
    return nulls > 0 && vector.isNull(rowId);
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return (int) nulls;
  }

  /** Where the bytes of the value whose view is at {@code view} start. */
  private long address(long view, int length) {
    if (length <= INLINE) {
      return view + 4;
    }
    int buffer = Platform.getInt(null, view + 8);
    if (buffer < 0 || buffer >= data.length) {
      throw new KafkaLogException("kafka-log: a binary view names data buffer " + buffer + " of " + data.length);
    }
    return data[buffer] + Integer.toUnsignedLong(Platform.getInt(null, view + 12));
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    long view = views + (long) VIEW * rowId;
    int length = Platform.getInt(null, view);
    byte[] out = new byte[length];
    Platform.copyMemory(null, address(view, length), out, Platform.BYTE_ARRAY_OFFSET, length);
    return out;
  }

  @Override
  public void close() {
    // The vector belongs to the reader's VectorSchemaRoot, which frees it.
  }

  private UnsupportedOperationException notBinary() {
    return new UnsupportedOperationException("kafka-log: a binary column read as another type");
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw notBinary();
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw notBinary();
  }

  @Override
  public byte getByte(int rowId) {
    throw notBinary();
  }

  @Override
  public short getShort(int rowId) {
    throw notBinary();
  }

  @Override
  public int getInt(int rowId) {
    throw notBinary();
  }

  @Override
  public long getLong(int rowId) {
    throw notBinary();
  }

  @Override
  public float getFloat(int rowId) {
    throw notBinary();
  }

  @Override
  public double getDouble(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw notBinary();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw notBinary();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw notBinary();
  }
}

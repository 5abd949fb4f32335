package io.epochguard.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The columns of a kafka-log read, as the Python source has them (epochguard.spark.logs):
 *  the location (broker, topic, partition, segment), the decoder's record and computed columns,
 *  and with {@code withErrors} the error columns last. Every field nullable. */
final class Schemas {
  static final List<String> LOCATION = List.of("broker", "topic", "partition", "segment");
  static final List<String> RECORD = List.of("offset", "timestamp", "timestamp_type", "key", "value", "headers",
      "leader_epoch", "batch_offset", "producer_id", "producer_epoch", "sequence", "is_transactional",
      "is_control", "magic");
  static final List<String> ERRORS = List.of("path", "error_position", "error_reason");
  static final Map<String, DataType> TYPES = new LinkedHashMap<>();

  static {
    DataType header = DataTypes.createStructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.StringType, true),
        DataTypes.createStructField("value", DataTypes.BinaryType, true)});
    TYPES.put("broker", DataTypes.IntegerType);
    TYPES.put("topic", DataTypes.StringType);
    TYPES.put("partition", DataTypes.IntegerType);
    TYPES.put("segment", DataTypes.LongType);
    TYPES.put("offset", DataTypes.LongType);
    TYPES.put("timestamp", DataTypes.LongType);
    TYPES.put("timestamp_type", DataTypes.ByteType);
    TYPES.put("key", DataTypes.BinaryType);
    TYPES.put("value", DataTypes.BinaryType);
    TYPES.put("headers", new ArrayType(header, true));
    TYPES.put("leader_epoch", DataTypes.IntegerType);
    TYPES.put("batch_offset", DataTypes.LongType);
    TYPES.put("producer_id", DataTypes.LongType);
    TYPES.put("producer_epoch", DataTypes.ShortType);
    TYPES.put("sequence", DataTypes.IntegerType);
    TYPES.put("is_transactional", DataTypes.BooleanType);
    TYPES.put("is_control", DataTypes.BooleanType);
    TYPES.put("magic", DataTypes.ByteType);
    TYPES.put("key_length", DataTypes.IntegerType);
    TYPES.put("value_length", DataTypes.IntegerType);
    TYPES.put("headers_count", DataTypes.IntegerType);
    TYPES.put("record_digest", DataTypes.LongType);
    TYPES.put("batch_position", DataTypes.LongType);
    TYPES.put("batch_size", DataTypes.IntegerType);
    TYPES.put("path", DataTypes.StringType);
    TYPES.put("error_position", DataTypes.LongType);
    TYPES.put("error_reason", DataTypes.StringType);
  }

  private Schemas() {}

  /** The schema of a read projected to {@code columns} (null: location then every record column). */
  static StructType projection(List<String> columns, boolean withErrors) {
    List<String> names = new ArrayList<>();
    if (columns == null) {
      names.addAll(LOCATION);
      names.addAll(RECORD);
    } else {
      for (String c : columns) {
        if (!TYPES.containsKey(c) || ERRORS.contains(c) || names.contains(c)) {
          throw new IllegalArgumentException("kafka-log: columns must be distinct names among "
              + knownColumns() + "; got " + columns + (TYPES.containsKey(c) ? "" : " (unknown: " + c + ")"));
        }
        names.add(c);
      }
    }
    if (withErrors) {
      names.addAll(ERRORS);
    }
    return of(names);
  }

  static StructType of(List<String> names) {
    StructField[] fields = new StructField[names.size()];
    for (int i = 0; i < fields.length; i++) {
      fields[i] = DataTypes.createStructField(names.get(i), TYPES.get(names.get(i)), true);
    }
    return DataTypes.createStructType(fields);
  }

  /** Checks a schema a user gave ({@code .schema(...)}): known names with their own types. */
  static void check(StructType schema) {
    for (StructField f : schema.fields()) {
      DataType want = TYPES.get(f.name());
      if (want == null) {
        throw new IllegalArgumentException("kafka-log: unknown column " + f.name() + " (known: " + knownColumns() + ")");
      }
      if (!want.sameType(f.dataType())) {
        throw new IllegalArgumentException("kafka-log: column " + f.name() + " is " + want.simpleString()
            + ", not " + f.dataType().simpleString());
      }
    }
  }

  static List<String> knownColumns() {
    List<String> known = new ArrayList<>(TYPES.keySet());
    known.removeAll(ERRORS);
    return known;
  }

  static boolean isRecordColumn(String name) {
    return TYPES.containsKey(name) && !LOCATION.contains(name) && !ERRORS.contains(name);
  }
}

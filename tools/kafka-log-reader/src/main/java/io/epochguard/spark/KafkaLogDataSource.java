package io.epochguard.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** {@code spark.read.format("kafka-log")} on the JVM: Kafka log directories read by the Rust
 *  decoder into Arrow-backed columnar batches (the same schema and options as the Python source,
 *  epochguard.spark.datasource, which stays registered as {@code kafka-log-python}). */
public class KafkaLogDataSource implements TableProvider, DataSourceRegister {
  public static final String NAME = "kafka-log";

  @Override
  public String shortName() {
    return NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    Options o = new Options(options);
    return Schemas.projection(o.columns, o.withErrors);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true; // .schema("topic string, offset long") is a projection
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    Schemas.check(schema);
    return new KafkaLogTable(schema);
  }

  static final class KafkaLogTable implements SupportsRead {
    private final StructType schema;

    KafkaLogTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return NAME;
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new KafkaLogScanBuilder(schema, new Options(options));
    }
  }
}

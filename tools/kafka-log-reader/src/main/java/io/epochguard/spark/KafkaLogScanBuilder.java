package io.epochguard.spark;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/** Projection, filters and COUNT(*)/min/max(offset) pushed into a {@link KafkaLogScan}. */
final class KafkaLogScanBuilder
    implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters, SupportsPushDownAggregates {
  private final Options options;
  private StructType required;
  private final Pushdown pushdown = new Pushdown();
  private String[] aggregates; // "count", "min", "max" in the aggregation's order; null: none pushed

  KafkaLogScanBuilder(StructType schema, Options options) {
    this.required = schema;
    this.options = options;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    this.required = requiredSchema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    return pushdown.push(filters);
  }

  @Override
  public Filter[] pushedFilters() {
    return pushdown.pushed();
  }

  /** COUNT(*), MIN(offset), MAX(offset) without GROUP BY, answered per chunk from batch headers
   *  (Spark adds up the chunks' partial results). Not with filters on offset, timestamp or epoch:
   *  those need rows (Spark pushes aggregates only when every filter was taken whole anyway). */
  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    if (aggregation.groupByExpressions().length > 0 || pushdown.hasBounds() || options.withErrors
        || options.paths.stream().anyMatch(Options::hasScheme)) { // headers of remote files: not yet
      return false;
    }
    AggregateFunc[] funcs = aggregation.aggregateExpressions();
    String[] kinds = new String[funcs.length];
    for (int i = 0; i < funcs.length; i++) {
      AggregateFunc f = funcs[i];
      if (f instanceof CountStar) {
        kinds[i] = "count";
      } else if (f instanceof Min m && isOffset(m.column())) {
        kinds[i] = "min";
      } else if (f instanceof Max m && isOffset(m.column())) {
        kinds[i] = "max";
      } else {
        return false;
      }
    }
    aggregates = kinds;
    return true;
  }

  private static boolean isOffset(Expression e) {
    return e instanceof NamedReference r && r.fieldNames().length == 1 && r.fieldNames()[0].equals("offset");
  }

  @Override
  public Scan build() {
    return new KafkaLogScan(options, required, pushdown, aggregates);
  }
}

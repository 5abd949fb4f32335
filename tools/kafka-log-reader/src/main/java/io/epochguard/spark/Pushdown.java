package io.epochguard.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/** What pushed filters let the reader skip. Comparisons of {@code broker}, {@code topic},
 *  {@code partition} and {@code segment} prune whole segments exactly (those columns are constant
 *  per segment), so Spark need not apply them again; comparisons of {@code offset},
 *  {@code timestamp} and {@code leader_epoch} become bounds that skip whole segments (offset)
 *  and whole batches (all three, from their headers), and Spark applies them per row. */
final class Pushdown implements Serializable {
  static final Set<String> LOCATED = Set.of("broker", "topic", "partition", "segment");
  static final Set<String> BOUNDED = Set.of("offset", "timestamp", "leader_epoch");

  final List<Filter> located = new ArrayList<>();
  final List<Filter> bounded = new ArrayList<>();
  // [offset lo, hi, timestamp lo, hi, epoch lo, hi], inclusive
  final long[] bounds = {Long.MIN_VALUE, Long.MAX_VALUE, Long.MIN_VALUE, Long.MAX_VALUE, Long.MIN_VALUE, Long.MAX_VALUE};

  /** Takes what it can use of {@code filters}; returns those Spark must still evaluate per row. */
  Filter[] push(Filter[] filters) {
    List<Filter> left = new ArrayList<>();
    for (Filter f : filters) {
      String column = attribute(f);
      if (column != null && LOCATED.contains(column) && literalsFit(f, column)) {
        located.add(f);
      } else {
        if (column != null && BOUNDED.contains(column) && narrow(f, column)) {
          bounded.add(f);
        }
        left.add(f);
      }
    }
    return left.toArray(new Filter[0]);
  }

  Filter[] pushed() {
    List<Filter> all = new ArrayList<>(located);
    all.addAll(bounded);
    return all.toArray(new Filter[0]);
  }

  boolean hasBounds() {
    return !bounded.isEmpty();
  }

  /** Whether the segment can hold a row every pushed filter admits. */
  boolean keeps(Listing.Segment s) {
    for (Filter f : located) {
      Object actual = switch (attribute(f)) {
        case "broker" -> (long) s.broker();
        case "topic" -> s.topic();
        case "partition" -> (long) s.partition();
        default -> s.baseOffset();
      };
      if (!holds(f, actual)) {
        return false;
      }
    }
    long last = s.nextBaseOffset() == Long.MAX_VALUE ? Long.MAX_VALUE : s.nextBaseOffset() - 1;
    return last >= bounds[0] && s.baseOffset() <= bounds[1];
  }

  /** The column a comparison this class knows is on (null for any other filter). */
  private static String attribute(Filter f) {
    boolean known = f instanceof EqualTo || f instanceof GreaterThan || f instanceof GreaterThanOrEqual
        || f instanceof LessThan || f instanceof LessThanOrEqual || f instanceof In;
    return known && f.references().length == 1 ? f.references()[0] : null;
  }

  private static boolean literalsFit(Filter f, String column) {
    Object[] values = f instanceof In in ? in.values() : new Object[] {value(f)};
    for (Object v : values) {
      boolean ok = column.equals("topic") ? v instanceof String : (v instanceof Integer || v instanceof Long);
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  private static Object value(Filter f) {
    if (f instanceof EqualTo e) return e.value();
    if (f instanceof GreaterThan e) return e.value();
    if (f instanceof GreaterThanOrEqual e) return e.value();
    if (f instanceof LessThan e) return e.value();
    if (f instanceof LessThanOrEqual e) return e.value();
    return null;
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private static int compare(Object actual, Object literal) {
    if (actual instanceof Long a) {
      return Long.compare(a, ((Number) literal).longValue());
    }
    return ((Comparable) actual).compareTo(literal);
  }

  private static boolean holds(Filter f, Object actual) {
    if (f instanceof In in) {
      for (Object v : in.values()) {
        if (compare(actual, v) == 0) {
          return true;
        }
      }
      return false;
    }
    int c = compare(actual, value(f));
    if (f instanceof EqualTo) return c == 0;
    if (f instanceof GreaterThan) return c > 0;
    if (f instanceof GreaterThanOrEqual) return c >= 0;
    if (f instanceof LessThan) return c < 0;
    return c <= 0; // LessThanOrEqual
  }

  /** Narrows the column's bounds by the filter; false when it cannot (a literal of another type). */
  private boolean narrow(Filter f, String column) {
    int at = switch (column) {
      case "offset" -> 0;
      case "timestamp" -> 2;
      default -> 4;
    };
    long lo;
    long hi;
    if (f instanceof In in) {
      if (in.values().length == 0) {
        return false;
      }
      lo = Long.MAX_VALUE;
      hi = Long.MIN_VALUE;
      for (Object v : in.values()) {
        if (!(v instanceof Integer || v instanceof Long)) {
          return false;
        }
        lo = Math.min(lo, ((Number) v).longValue());
        hi = Math.max(hi, ((Number) v).longValue());
      }
    } else {
      Object v = value(f);
      if (!(v instanceof Integer || v instanceof Long)) {
        return false;
      }
      long x = ((Number) v).longValue();
      lo = Long.MIN_VALUE;
      hi = Long.MAX_VALUE;
      if (f instanceof EqualTo) {
        lo = x;
        hi = x;
      } else if (f instanceof GreaterThan) {
        if (x == Long.MAX_VALUE) { lo = x; hi = Long.MIN_VALUE; } else { lo = x + 1; }
      } else if (f instanceof GreaterThanOrEqual) {
        lo = x;
      } else if (f instanceof LessThan) {
        if (x == Long.MIN_VALUE) { hi = x; lo = Long.MAX_VALUE; } else { hi = x - 1; }
      } else {
        hi = x;
      }
    }
    bounds[at] = Math.max(bounds[at], lo);
    bounds[at + 1] = Math.min(bounds[at + 1], hi);
    return true;
  }
}

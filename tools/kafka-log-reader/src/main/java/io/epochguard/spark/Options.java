package io.epochguard.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;

/** The options of {@code format("kafka-log")}, named as the Python source names them: path(s),
 *  {@code columns}, {@code tasks}, {@code chunkBytes}, {@code verifyCrc}, {@code withErrors}; and
 *  {@code nativeLibrary} (the decoder's .so, when not the one bundled in the jar). */
final class Options implements Serializable {
  static final long DEFAULT_CHUNK_BYTES = 64L << 20;
  static final long DEFAULT_MAX_DECOMPRESSED = 64L << 20;
  private static final Pattern SCHEME = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*:");

  final List<String> paths;
  final List<String> columns; // null: all
  final int tasks;
  final long chunkBytes;
  final boolean verifyCrc;
  final boolean withErrors;
  final String nativeLibrary;

  Options(Map<String, String> options) {
    this.paths = paths(options);
    String cols = get(options, "columns");
    this.columns = cols == null ? null : Arrays.stream(cols.split(",")).map(String::trim).filter(s -> !s.isEmpty()).toList();
    this.tasks = (int) number(options, "tasks", 0);
    this.chunkBytes = number(options, "chunkBytes", DEFAULT_CHUNK_BYTES);
    this.verifyCrc = flag(options, "verifyCrc", true);
    this.withErrors = flag(options, "withErrors", false);
    this.nativeLibrary = get(options, "nativeLibrary");
    if (chunkBytes <= 0) {
      throw new IllegalArgumentException("kafka-log: chunkBytes must be > 0, got " + chunkBytes);
    }
  }

  /** Options are case-insensitive in Spark: look a name up either way. */
  private static String get(Map<String, String> options, String name) {
    String v = options.get(name);
    return v != null ? v : options.get(name.toLowerCase(Locale.ROOT));
  }

  private static String getOr(Map<String, String> options, String name, String fallback) {
    String v = get(options, name);
    return v == null ? fallback : v;
  }

  private static long number(Map<String, String> options, String name, long fallback) {
    String v = get(options, name);
    try {
      return v == null ? fallback : Long.parseLong(v.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("kafka-log: option " + name + " must be a whole number, got " + v);
    }
  }

  private static boolean flag(Map<String, String> options, String name, boolean fallback) {
    String v = get(options, name);
    if (v == null) {
      return fallback;
    }
    String s = v.trim().toLowerCase(Locale.ROOT);
    return s.equals("true") || s.equals("1") || s.equals("yes");
  }

  /** {@code load(path)} gives {@code path}; {@code load([p1, p2])} gives {@code paths} as a JSON array. */
  private static List<String> paths(Map<String, String> options) {
    String raw = get(options, "paths");
    List<String> out = new ArrayList<>();
    if (raw != null && raw.stripLeading().startsWith("[")) {
      try {
        out.addAll(Arrays.asList(new ObjectMapper().readValue(raw, String[].class)));
      } catch (java.io.IOException e) {
        throw new IllegalArgumentException("kafka-log: option paths is not a JSON array of strings: " + raw);
      }
    } else if (raw != null) {
      out.addAll(Arrays.asList(raw.split(",")));
    }
    String one = get(options, "path");
    if (one != null && !out.contains(one)) {
      out.add(one);
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException(
          "kafka-log needs one or more log directories: .load(path) or .load([path, ...])");
    }
    return out;
  }

  /** A path with a scheme ({@code hdfs://}, {@code s3a://}, {@code file:/}): read through Hadoop's FileSystem. */
  static boolean hasScheme(String path) {
    return SCHEME.matcher(path).find();
  }
}

package io.epochguard.spark;

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The segments of Kafka log directories, as epochguard.spark.listing finds them: one folder per
 *  broker (its id from meta.properties' {@code node.id} or {@code broker.id}, else the folder name's
 *  trailing number), one {@code <topic>-<partition>} folder per replica (folders Kafka is deleting
 *  or moving, {@code -delete}/{@code -future}/{@code -stray}, do not parse as one and are skipped),
 *  and {@code <20-digit base offset>.log} segments. */
final class Listing {
  private static final Pattern TRAILING_ID = Pattern.compile("(\\d+)$");
  private static final Pattern SEGMENT = Pattern.compile("^(\\d{20})\\.log$");

  record Segment(int broker, String topic, int partition, long baseOffset, long nextBaseOffset, String path,
                 long size) implements java.io.Serializable {}

  private Listing() {}

  static List<Segment> list(List<String> roots) {
    List<Segment> out = new ArrayList<>();
    Map<Integer, String> brokers = new HashMap<>();
    for (String root : roots) {
      Path dir = Paths.get(root);
      if (!Files.isDirectory(dir)) {
        throw new KafkaLogException("kafka-log: " + root + " is not a directory");
      }
      int broker = brokerId(dir);
      String other = brokers.put(broker, root);
      if (other != null) {
        throw new IllegalArgumentException("log dirs '" + other + "' and '" + root + "' both belong to broker " + broker);
      }
      for (Path partitionDir : sorted(dir)) {
        String name = partitionDir.getFileName().toString();
        int dash = name.lastIndexOf('-');
        if (!Files.isDirectory(partitionDir) || dash <= 0 || dash == name.length() - 1
            || !name.substring(dash + 1).chars().allMatch(Character::isDigit)) {
          continue;
        }
        String topic = name.substring(0, dash);
        int partition;
        try {
          partition = Integer.parseInt(name.substring(dash + 1));
        } catch (NumberFormatException e) {
          continue;
        }
        List<long[]> found = new ArrayList<>(); // base offset, size, index into paths
        List<String> paths = new ArrayList<>();
        for (Path file : sorted(partitionDir)) {
          Matcher m = SEGMENT.matcher(file.getFileName().toString());
          if (m.matches() && Files.isRegularFile(file)) {
            try {
              found.add(new long[] {Long.parseLong(m.group(1)), Files.size(file), paths.size()});
              paths.add(file.toString());
            } catch (IOException | NumberFormatException e) {
              throw new KafkaLogException("kafka-log: cannot read " + file + ": " + e);
            }
          }
        }
        found.sort(Comparator.comparingLong(a -> a[0]));
        for (int i = 0; i < found.size(); i++) {
          long next = i + 1 < found.size() ? found.get(i + 1)[0] : Long.MAX_VALUE;
          long[] s = found.get(i);
          out.add(new Segment(broker, topic, partition, s[0], next, paths.get((int) s[2]), s[1]));
        }
      }
    }
    return out;
  }

  private static List<Path> sorted(Path dir) {
    List<Path> entries = new ArrayList<>();
    try (DirectoryStream<Path> stream = Files.newDirectoryStream(dir)) {
      stream.forEach(entries::add);
    } catch (IOException e) {
      throw new KafkaLogException("kafka-log: cannot list " + dir + ": " + e);
    }
    entries.sort(Comparator.comparing(p -> p.getFileName().toString()));
    return entries;
  }

  static int brokerId(Path dir) {
    Path meta = dir.resolve("meta.properties");
    if (Files.isRegularFile(meta)) {
      Properties props = new Properties();
      try (Reader r = Files.newBufferedReader(meta, StandardCharsets.UTF_8)) {
        props.load(r);
        String id = props.getProperty("node.id", props.getProperty("broker.id"));
        if (id != null) {
          return Integer.parseInt(id.trim());
        }
      } catch (IOException | NumberFormatException e) {
        // as the Python listing: a malformed meta.properties leaves the folder name to tell
      }
    }
    Matcher m = TRAILING_ID.matcher(dir.getFileName().toString());
    if (!m.find()) {
      throw new IllegalArgumentException("cannot tell the broker id of '" + dir
          + "': no meta.properties and no number in its name");
    }
    return Integer.parseInt(m.group(1));
  }
}

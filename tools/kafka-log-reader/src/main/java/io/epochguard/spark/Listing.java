package io.epochguard.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/** The segments of Kafka log directories, as epochguard.spark.listing finds them: one folder per
 *  broker (its id from meta.properties' {@code node.id} or {@code broker.id}, else the folder name's
 *  trailing number), one {@code <topic>-<partition>} folder per replica (folders Kafka is deleting
 *  or moving, {@code -delete}/{@code -future}/{@code -stray}, do not parse as one and are skipped),
 *  and {@code <20-digit base offset>.log} segments. Plain paths are listed with java.nio, paths with a
 *  scheme ({@code hdfs://}, {@code file:/}, ...) through Hadoop's FileSystem. */
final class Listing {
  private static final Pattern TRAILING_ID = Pattern.compile("(\\d+)$");
  private static final Pattern SEGMENT = Pattern.compile("^(\\d{20})\\.log$");

  record Segment(int broker, String topic, int partition, long baseOffset, long nextBaseOffset, String path,
                 long size) implements java.io.Serializable {
    boolean remote() {
      return Options.hasScheme(path);
    }
  }

  /** One entry of a directory: its name, full path, whether a directory, its size. */
  private record Entry(String name, String path, boolean dir, long size) {}

  private interface Fs {
    List<Entry> list(String dir);

    byte[] read(String file); // null when missing
  }

  private static final class Local implements Fs {
    @Override
    public List<Entry> list(String dir) {
      List<Entry> out = new ArrayList<>();
      try (DirectoryStream<java.nio.file.Path> stream = Files.newDirectoryStream(Paths.get(dir))) {
        for (java.nio.file.Path p : stream) {
          boolean isDir = Files.isDirectory(p);
          out.add(new Entry(p.getFileName().toString(), p.toString(), isDir, isDir ? 0 : Files.size(p)));
        }
      } catch (IOException e) {
        throw new KafkaLogException("kafka-log: cannot list " + dir + ": " + e);
      }
      return out;
    }

    @Override
    public byte[] read(String file) {
      try {
        return Files.isRegularFile(Paths.get(file)) ? Files.readAllBytes(Paths.get(file)) : null;
      } catch (IOException e) {
        return null;
      }
    }
  }

  private static final class Hadoop implements Fs {
    private final Configuration conf;

    Hadoop(Configuration conf) {
      this.conf = conf;
    }

    @Override
    public List<Entry> list(String dir) {
      List<Entry> out = new ArrayList<>();
      try {
        Path p = new Path(dir);
        for (FileStatus s : p.getFileSystem(conf).listStatus(p)) {
          out.add(new Entry(s.getPath().getName(), s.getPath().toString(), s.isDirectory(), s.getLen()));
        }
      } catch (IOException e) {
        throw new KafkaLogException("kafka-log: cannot list " + dir + ": " + e);
      }
      return out;
    }

    @Override
    public byte[] read(String file) {
      Path p = new Path(file);
      try (InputStream in = p.getFileSystem(conf).open(p)) {
        return in.readAllBytes();
      } catch (IOException e) {
        return null;
      }
    }
  }

  private Listing() {}

  static List<Segment> list(List<String> roots, Configuration conf) {
    List<Segment> out = new ArrayList<>();
    Map<Integer, String> brokers = new HashMap<>();
    for (String root : roots) {
      Fs fs = Options.hasScheme(root) ? new Hadoop(conf) : new Local();
      String base = root.replaceAll("/+$", "");
      if (!Options.hasScheme(root) && !Files.isDirectory(Paths.get(root))) {
        throw new KafkaLogException("kafka-log: " + root + " is not a directory");
      }
      int broker = brokerId(base, fs.read(base + "/meta.properties"));
      String other = brokers.put(broker, root);
      if (other != null) {
        throw new IllegalArgumentException("log dirs '" + other + "' and '" + root + "' both belong to broker " + broker);
      }
      for (Entry partitionDir : sorted(fs.list(base))) {
        String name = partitionDir.name();
        int dash = name.lastIndexOf('-');
        if (!partitionDir.dir() || dash <= 0 || dash == name.length() - 1
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
        List<Entry> segments = new ArrayList<>();
        for (Entry file : fs.list(partitionDir.path())) {
          if (!file.dir() && SEGMENT.matcher(file.name()).matches()) {
            segments.add(file);
          }
        }
        segments.sort(Comparator.comparing(Entry::name)); // 20 digits: by name is by base offset
        for (int i = 0; i < segments.size(); i++) {
          Entry s = segments.get(i);
          long next = i + 1 < segments.size() ? baseOffset(segments.get(i + 1)) : Long.MAX_VALUE;
          out.add(new Segment(broker, topic, partition, baseOffset(s), next, s.path(), s.size()));
        }
      }
    }
    return out;
  }

  private static long baseOffset(Entry segment) {
    Matcher m = SEGMENT.matcher(segment.name());
    if (!m.matches()) {
      throw new IllegalStateException(segment.name());
    }
    return Long.parseLong(m.group(1));
  }

  private static List<Entry> sorted(List<Entry> entries) {
    List<Entry> out = new ArrayList<>(entries);
    out.sort(Comparator.comparing(Entry::name));
    return out;
  }

  /** Kafka's rules, as epochguard.storage.logdir_format.parse_meta_properties reads them: version
   *  (default 0) 0 takes the id from {@code broker.id}, version 1 from {@code node.id} (with
   *  {@code cluster.id}); the other key is ignored. A file that breaks them (an unknown version, a
   *  missing or non-numeric id) leaves the folder name's trailing number to tell, as in the Python
   *  listing (which also reports it as a listing error). */
  static int brokerId(String dir, byte[] metaProperties) {
    if (metaProperties != null) {
      Properties props = new Properties();
      try (Reader r = new InputStreamReader(new ByteArrayInputStream(metaProperties), StandardCharsets.UTF_8)) {
        props.load(r);
        int version = Integer.parseInt(props.getProperty("version", "0").trim());
        String id = switch (version) {
          case 0 -> props.getProperty("broker.id");
          case 1 -> props.getProperty("cluster.id") == null ? null : props.getProperty("node.id");
          default -> null;
        };
        if (id != null) {
          return Integer.parseInt(id.trim());
        }
      } catch (IOException | NumberFormatException e) {
        // malformed: the folder name tells
      }
    }
    String name = dir.substring(dir.lastIndexOf('/') + 1);
    Matcher m = TRAILING_ID.matcher(name);
    if (!m.find()) {
      throw new IllegalArgumentException("cannot tell the broker id of '" + dir
          + "': no meta.properties and no number in its name");
    }
    return Integer.parseInt(m.group(1));
  }
}

package io.epochguard.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/** The Rust decoder's JNI entry points (rust/jni/mod.rs) and the loading of its library: the path
 *  the {@code nativeLibrary} option names, else {@code -Depochguard.jni.library}, else
 *  {@code $EPOCHGUARD_JNI_LIBRARY}, else the copy bundled in this jar, extracted once into a
 *  directory named by its hash under {@code java.io.tmpdir}. */
public final class Native {
  static final String RESOURCE = "/native/linux-x86_64/libepochguard_jni.so";
  private static String loaded;

  private Native() {}

  /** Decode bytes [start, end) of a segment into the projected columns (comma-separated names),
   *  skipping batches whose headers fall outside {@code bounds} (offset, timestamp, epoch: lo, hi,
   *  inclusive; null for none; not with {@code withErrors}, which reports a batch that does not
   *  decode, or an incomplete last one, as a problem between batches). A handle for {@link #next}
   *  and {@link #close}. */
  static native long decode(String path, long start, long end, String columns, boolean verifyCrc,
                            long maxDecompressedSize, long[] bounds, boolean withErrors);

  /** As {@link #decode}, over the bytes of a direct buffer (a range read through Hadoop's
   *  FileSystem), its first byte at absolute position {@code base}. */
  static native long decodeBytes(java.nio.ByteBuffer direct, long base, String columns, boolean verifyCrc,
                                 long maxDecompressedSize, long[] bounds, boolean withErrors);

  /** Moves the next batch (a struct array) into the C Data Interface structs at those addresses
   *  ({@code arrowSchema} 0: the array alone, for a reader that has the schema); its rows, -1 when
   *  there is none left, -2 when the next piece is a problem ({@link #problem}). Decodes the next
   *  window of the range when none is left decoded. */
  static native int next(long handle, long arrowArray, long arrowSchema);

  /** With {@code withErrors}: the problem {@link #next} announced, "byte-position reason". */
  static native String problem(long handle);

  /** {batches decoded, batches skipped by their headers, partial tail position or -1}. */
  static native long[] stats(long handle);

  static native void close(long handle);

  /** {records, min offset, max offset} of bytes [start, end), from the batch headers. */
  static native long[] count(String path, long start, long end, boolean verifyCrc, long maxDecompressedSize);

  /** (position, size) of each batch of the segment, flattened. */
  static native long[] batchIndex(String path);

  /** Load the library once per JVM; {@code explicit} is the nativeLibrary option (may be null). */
  static synchronized void load(String explicit) {
    if (loaded != null) {
      return;
    }
    String path = firstNonEmpty(explicit, System.getProperty("epochguard.jni.library"),
        System.getenv("EPOCHGUARD_JNI_LIBRARY"));
    if (path == null) {
      path = extractBundled().toString();
    }
    if (!Files.isRegularFile(Paths.get(path))) {
      throw new KafkaLogException("kafka-log: the native decoder library " + path + " does not exist");
    }
    System.load(path);
    loaded = path;
  }

  /** The library this JVM loaded, or null before the first read. */
  public static synchronized String loadedFrom() {
    return loaded;
  }

  private static String firstNonEmpty(String... values) {
    for (String v : values) {
      if (v != null && !v.isEmpty()) {
        return v;
      }
    }
    return null;
  }

  private static Path extractBundled() {
    byte[] bytes;
    try (InputStream in = Native.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new KafkaLogException("kafka-log: this jar bundles no native decoder for linux-x86_64 ("
            + RESOURCE + "); give its path with option(\"nativeLibrary\", ...) or $EPOCHGUARD_JNI_LIBRARY");
      }
      bytes = in.readAllBytes();
    } catch (IOException e) {
      throw new KafkaLogException("kafka-log: cannot read the bundled native decoder: " + e);
    }
    try {
      String hash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes)).substring(0, 16);
      Path dir = Paths.get(System.getProperty("java.io.tmpdir"), "epochguard-jni-" + hash);
      Path lib = dir.resolve("libepochguard_jni.so");
      if (Files.isRegularFile(lib) && Files.size(lib) == bytes.length) {
        return lib;
      }
      Files.createDirectories(dir);
      Path tmp = Files.createTempFile(dir, ".lib", ".so");
      Files.write(tmp, bytes);
      Files.move(tmp, lib, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
      return lib;
    } catch (IOException | NoSuchAlgorithmException e) {
      throw new KafkaLogException("kafka-log: cannot extract the bundled native decoder: " + e);
    }
  }
}

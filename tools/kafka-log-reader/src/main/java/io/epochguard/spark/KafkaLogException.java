package io.epochguard.spark;

/** A segment the decoder could not read (corrupt bytes, an I/O error, a bad option): the native
 *  decoder's message, with the byte position where it has one. */
public class KafkaLogException extends RuntimeException {
  public KafkaLogException(String message) {
    super(message);
  }
}

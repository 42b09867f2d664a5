// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

import java.nio.charset.StandardCharsets;

/**
 * A failed edgellm call: the C API's status and the message of {@code edgellm_last_error()},
 * which names what failed (the file, tensor or argument).
 */
public final class EdgellmException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The C API's {@code edgellm_status} values (other than {@code EDGELLM_OK}). */
  public enum Status {
    OK, INVALID_ARGUMENT, SHAPE_MISMATCH, IO, FORMAT, UNSUPPORTED, OUT_OF_RANGE, CAPACITY,
    OUT_OF_MEMORY, INTERNAL,
    /** The session is inside another call (Session checks this first: IllegalStateException). */
    BUSY;

    /** The status for a C value; unknown values map to {@link #INTERNAL}. */
    static Status of(int code) {
      Status[] all = values();
      return code >= 0 && code < all.length ? all[code] : INTERNAL;
    }
  }

  private final int code;

  /** Called from the JNI glue: the message comes as UTF-8 bytes (not modified UTF-8). */
  EdgellmException(int code, byte[] message) {
    super(Status.of(code).name().toLowerCase(java.util.Locale.ROOT) + ": "
        + new String(message, StandardCharsets.UTF_8));
    this.code = code;
  }

  /** The status. */
  public Status status() {
    return Status.of(code);
  }

  /** The C value of the status ({@code edgellm_status}). */
  public int statusCode() {
    return code;
  }
}

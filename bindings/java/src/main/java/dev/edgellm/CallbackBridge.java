// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * Called by the JNI glue for each piece: decodes the UTF-8 bytes and runs the user's callback.
 * Whatever the callback throws is kept here (so no Java exception is pending when control goes
 * back into native code) and generate() rethrows it after the native call returns.
 */
final class CallbackBridge {
  private final TokenCallback callback;
  Throwable error;
  /** Set by Session.close() from the callback: stop after this piece. */
  volatile boolean cancelled;

  CallbackBridge(TokenCallback callback) {
    this.callback = callback;
  }

  /** Returns false to stop generating. */
  boolean onPiece(byte[] utf8, int token) {
    if (error != null || cancelled) return false;
    try {
      return callback.onToken(Utf8.decode(utf8), token) && !cancelled;
    } catch (Throwable t) {
      error = t;
      return false;
    }
  }
}

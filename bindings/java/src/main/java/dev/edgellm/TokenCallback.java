// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * Receives each piece of generated text during {@link Session#generate}. It runs on the thread
 * that called generate(), between two decode steps.
 *
 * <p>Return true to go on, false to stop: generate() then returns with {@link
 * StopReason#CALLBACK} and the session stays usable. An exception thrown here also stops the
 * generation; generate() rethrows it once the native call has returned. The callback must not
 * call back into the same Session (that throws {@link IllegalStateException}).
 */
@FunctionalInterface
public interface TokenCallback {
  /**
   * @param text the piece: whole characters (a piece that is not valid UTF-8, such as a lone
   *     byte token, arrives with U+FFFD in place of its bad bytes)
   * @param token the latest token id
   * @return true to continue, false to stop
   */
  boolean onToken(String text, int token);
}

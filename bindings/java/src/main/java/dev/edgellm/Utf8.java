// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

import java.nio.charset.StandardCharsets;

/**
 * Strings cross JNI as UTF-8 byte arrays, never through NewStringUTF/GetStringUTFChars, which
 * use modified UTF-8 (surrogate pairs instead of 4-byte sequences, 0xC0 0x80 for U+0000).
 */
final class Utf8 {
  private Utf8() {}

  /** The UTF-8 bytes of s for a C string (null stays null); a NUL character is refused. */
  static byte[] cString(String s, String what) {
    if (s == null) return null;
    int nul = s.indexOf('\0');
    if (nul >= 0) {
      throw new IllegalArgumentException(what + " contains a NUL character at index " + nul);
    }
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** Decodes UTF-8; malformed bytes become U+FFFD. */
  static String decode(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }
}

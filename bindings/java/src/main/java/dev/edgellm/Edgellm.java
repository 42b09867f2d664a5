// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/** The native library's version and build. */
public final class Edgellm {
  private Edgellm() {}

  /** "MAJOR.MINOR.PATCH" of the native library. */
  public static String version() {
    return Utf8.decode(Native.version());
  }

  /** One line: version, git sha, compiler, target architecture and the int4 microkernel used. */
  public static String buildInfo() {
    return Utf8.decode(Native.buildInfo());
  }
}

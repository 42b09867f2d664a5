// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

import java.util.Arrays;

/**
 * A compiled output constraint ({@code edgellm_constraint}): any JSON value, a JSON object, JSON
 * valid against a JSON Schema, a sentence of a GBNF grammar, a whole match of a regular
 * expression, or exactly one of a list of choices. Set it on a {@link Session} with {@link
 * Session#setConstraint}: tokens that would leave the language are never drawn, and the
 * generation ends (at the model's eos) only where the output is a whole document; the token
 * budget (maxNewTokens) closes the document within it. {@link Session#constraintResult()} says
 * how the latest generation went.
 *
 * <p><b>Threads and memory:</b> immutable once compiled; one Constraint may be set on any
 * number of sessions on any threads. A session keeps its own native reference, so the
 * Constraint may be closed while sessions still use it. close() frees it (try-with-resources);
 * one never closed is freed by a Cleaner with a warning, as {@link Model} and {@link Session}.
 */
public final class Constraint implements AutoCloseable {
  /** The C API's {@code edgellm_constraint_kind} (same order). */
  public enum Kind { JSON, JSON_OBJECT, JSON_SCHEMA, GRAMMAR, REGEX, CHOICES }

  private final NativeHandle handle;
  private final Kind kind;

  private Constraint(long h, Kind kind) {
    this.handle = new NativeHandle(this, "Constraint", h, Native::constraintFree);
    this.kind = kind;
  }

  private static Constraint compile(Kind kind, String source, String[] choices) {
    byte[] src = Utf8.cString(source, "source");
    byte[][] ch = null;
    if (choices != null) {
      ch = new byte[choices.length][];
      for (int i = 0; i < choices.length; ++i) {
        if (choices[i] == null) throw new NullPointerException("choices[" + i + "]");
        ch[i] = Utf8.cString(choices[i], "choices[" + i + "]");
      }
    }
    return new Constraint(Native.constraintCompile(kind.ordinal(), src, ch), kind);
  }

  private static String required(String s, String what) {
    if (s == null) throw new NullPointerException(what);
    return s;
  }

  /** Any JSON value. */
  public static Constraint json() {
    return compile(Kind.JSON, null, null);
  }

  /** A JSON object (OpenAI's {@code json_object}). */
  public static Constraint jsonObject() {
    return compile(Kind.JSON_OBJECT, null, null);
  }

  /**
   * JSON valid against a JSON Schema.
   *
   * @param schema the schema's JSON text
   * @throws EdgellmException (INVALID_ARGUMENT or UNSUPPORTED) naming the schema keyword and its
   *     JSON pointer when the schema is refused
   */
  public static Constraint jsonSchema(String schema) {
    return compile(Kind.JSON_SCHEMA, required(schema, "schema"), null);
  }

  /**
   * A sentence of a GBNF grammar (llama.cpp's syntax; the start rule is {@code root}).
   *
   * @throws EdgellmException naming the line and column of a grammar that does not parse
   */
  public static Constraint grammar(String gbnf) {
    return compile(Kind.GRAMMAR, required(gbnf, "gbnf"), null);
  }

  /**
   * A whole match of a regular expression.
   *
   * @throws EdgellmException naming the offset of a pattern that does not parse
   */
  public static Constraint regex(String pattern) {
    return compile(Kind.REGEX, required(pattern, "pattern"), null);
  }

  /** Exactly one of the choices (at least one). */
  public static Constraint choices(String... choices) {
    if (choices == null) throw new NullPointerException("choices");
    if (choices.length == 0) throw new IllegalArgumentException("choices: none given");
    return compile(Kind.CHOICES, null, Arrays.copyOf(choices, choices.length));
  }

  /** What the constraint constrains the output to. */
  public Kind kind() {
    return kind;
  }

  /** Frees the native constraint now (idempotent); sessions it is set on keep their own. */
  @Override
  public void close() {
    handle.close();
  }

  public boolean isClosed() {
    return handle.isClosed();
  }

  long acquire() {
    return handle.acquire();
  }

  void release() {
    handle.release();
  }

  @Override
  public String toString() {
    return "Constraint{" + kind + (isClosed() ? ", closed" : "") + "}";
  }
}

// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * A loaded checkpoint directory: weights, tokenizer and stop ids ({@code edgellm_model}).
 *
 * <p><b>Threads:</b> a Model is read-only once loaded and may be shared by any number of
 * threads; each thread uses its own {@link Session} over it. {@link #close()} waits for calls
 * running on other threads to return.
 *
 * <p><b>Memory:</b> close() releases the model's handle. Sessions created from it keep the
 * native model alive, so its memory is freed once the Model and all its Sessions are closed, in
 * any order. A Model that is never closed is freed by a Cleaner once unreachable, with a
 * warning logged to the "dev.edgellm" java.util.logging logger; do not rely on that: native
 * memory does not press the Java GC, so close explicitly (try-with-resources).
 */
public final class Model implements AutoCloseable {
  private final NativeHandle handle;
  private final String dir;

  private Model(long h, String dir) {
    this.handle = new NativeHandle(this, "Model", h, Native::modelFree);
    this.dir = dir;
  }

  /** Loads a Hugging Face / AutoAWQ checkpoint directory with the default options. */
  public static Model load(String dir) {
    return load(dir, null);
  }

  /**
   * Loads a Hugging Face / AutoAWQ checkpoint directory.
   *
   * @param options null for {@link ModelOptions#defaults()}
   * @throws EdgellmException naming the directory or file that failed (IO, FORMAT, ...), or
   *     OUT_OF_MEMORY when the memory plan exceeds the options' budget
   */
  public static Model load(String dir, ModelOptions options) {
    if (dir == null) throw new NullPointerException("dir");
    ModelOptions o = options != null ? options : ModelOptions.defaults();
    long h = Native.modelLoad(Utf8.cString(dir, "model directory"), o.longs(), o.strings());
    return new Model(h, dir);
  }

  /** The directory this model was loaded from. */
  public String directory() {
    return dir;
  }

  /** A new session with the default options. */
  public Session newSession() {
    return newSession(null);
  }

  /**
   * A new conversation over this model (its own KV cache, sampler, decoder).
   *
   * @param options null for {@link SessionOptions#defaults()}
   */
  public Session newSession(SessionOptions options) {
    SessionOptions o = options != null ? options : SessionOptions.defaults();
    long h = acquire();
    try {
      Model draft = o.draft;
      long d = draft != null ? draft.acquire() : 0;
      try {
        long s = Native.sessionCreate(h, o.longs(d), o.sampling.floats(), o.sampling.longs());
        return new Session(s, draft);
      } finally {
        if (draft != null) draft.release();
      }
    } finally {
      release();
    }
  }

  public long vocabSize() {
    long h = acquire();
    try {
      return Native.modelVocabSize(h);
    } finally {
      release();
    }
  }

  /** The model's maximum context in tokens. */
  public long maxContext() {
    long h = acquire();
    try {
      return Native.modelMaxContext(h);
    } finally {
      release();
    }
  }

  /** Token ids of text, with the tokenizer's bos etc. and no special-token parsing. */
  public int[] tokenize(String text) {
    return tokenize(text, true, false);
  }

  /**
   * Token ids of text.
   *
   * @param addSpecial add the tokenizer's bos etc.
   * @param parseSpecial special-token text ("&lt;|im_start|&gt;") becomes special ids
   */
  public int[] tokenize(String text, boolean addSpecial, boolean parseSpecial) {
    // NUL is ordinary text here: the C call takes a length.
    byte[] bytes = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    long h = acquire();
    try {
      return Native.tokenize(h, bytes, addSpecial, parseSpecial);
    } finally {
      release();
    }
  }

  /** The text of ids; bytes that do not form valid UTF-8 become U+FFFD. */
  public String detokenize(int[] ids, boolean skipSpecial) {
    if (ids == null) throw new NullPointerException("ids");
    long h = acquire();
    try {
      return Utf8.decode(Native.detokenize(h, ids, skipSpecial));
    } finally {
      release();
    }
  }

  /** Releases the handle (idempotent); open sessions keep the native model alive. */
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
}

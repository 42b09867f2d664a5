// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * One conversation over a {@link Model}: its own KV cache, sampler and decoder ({@code
 * edgellm_session}). Create it with {@link Model#newSession}.
 *
 * <p><b>Threads:</b> a Session is not thread-safe: use it from one thread at a time (several
 * Sessions over one Model may run on different threads at once). The generate() callback runs
 * on the calling thread and must not call this Session's methods (they throw {@link
 * IllegalStateException}); return false from it to stop instead. close() is the exception: from
 * the callback (or another thread) it stops the generation and closes the session when
 * generate() returns.
 *
 * <p><b>Memory:</b> close() frees the KV cache and scratch at once (try-with-resources). A
 * Session that is never closed is freed by a Cleaner once unreachable, with a warning logged to
 * the "dev.edgellm" logger. After close() every method throws IllegalStateException("Session is
 * closed"); close() itself may be called again.
 */
public final class Session implements AutoCloseable {
  private final NativeHandle handle;
  @SuppressWarnings("unused") // keeps a draft model reachable as long as the session
  private final Model draft;
  // generate() in progress, its callback bridge, and a close() deferred until it returns;
  // changed under `this` so that a close() cannot slip between generate()'s end and its check.
  private volatile boolean generating;
  private CallbackBridge running;
  private boolean closeAfterGenerate;

  Session(long h, Model draft) {
    this.handle = new NativeHandle(this, "Session", h, Native::sessionFree);
    this.draft = draft;
  }

  private long acquire() {
    if (generating) {
      throw new IllegalStateException(
          "Session is busy in generate(): return false from the callback to stop it");
    }
    return handle.acquire();
  }

  private void release() {
    handle.release();
  }

  /**
   * Generates after a text prompt, streaming each piece to callback. A prompt that extends what
   * the session already holds (a chat's next turn) forwards only its new tokens.
   *
   * @param options null for {@link GenerateOptions#defaults()}
   * @param callback null to only collect the stats
   * @return what the call did; {@link StopReason#CALLBACK} when the callback stopped it
   * @throws EdgellmException when the native call fails (the session stays usable)
   * @throws RuntimeException or Error: whatever the callback threw (generation stopped)
   */
  public GenerationStats generate(String prompt, GenerateOptions options, TokenCallback callback) {
    if (prompt == null) throw new NullPointerException("prompt");
    return run(Utf8.cString(prompt, "prompt"), null, options, callback);
  }

  /** The same after token ids (for example from {@link Model#tokenize}). */
  public GenerationStats generate(int[] promptIds, GenerateOptions options, TokenCallback callback) {
    if (promptIds == null) throw new NullPointerException("promptIds");
    return run(null, promptIds.clone(), options, callback);
  }

  /** Generates after prompt and returns the whole text. */
  public String generateText(String prompt, GenerateOptions options) {
    final StringBuilder sb = new StringBuilder();
    generate(prompt, options, (text, token) -> {
      sb.append(text);
      return true;
    });
    return sb.toString();
  }

  private GenerationStats run(byte[] prompt, int[] ids, GenerateOptions options,
      TokenCallback callback) {
    GenerateOptions o = options != null ? options : GenerateOptions.defaults();
    CallbackBridge bridge = callback != null ? new CallbackBridge(callback) : null;
    double[] stats = new double[6];
    long h = acquire();
    synchronized (this) {
      if (generating) { // another thread got in between acquire()'s check and here
        release();
        throw new IllegalStateException("Session is busy in generate() on another thread");
      }
      generating = true;
      running = bridge;
    }
    try {
      Native.generate(h, prompt, ids, o.maxNewTokens, o.stopBytes(), o.ignoreEos, o.addSpecial,
          o.parseSpecial, bridge, stats);
    } finally {
      boolean close;
      synchronized (this) {
        generating = false;
        running = null;
        close = closeAfterGenerate;
      }
      release();
      if (close) handle.close(); // deferred from the callback (or another thread)
    }
    if (bridge != null && bridge.error != null) rethrow(bridge.error);
    return new GenerationStats(stats);
  }

  private static void rethrow(Throwable t) {
    if (t instanceof RuntimeException) throw (RuntimeException) t;
    if (t instanceof Error) throw (Error) t;
    throw new RuntimeException("the token callback threw", t); // a checked exception, smuggled
  }

  /** Forgets the conversation: the cache holds no tokens, the sampler restarts from its seed. */
  public void reset() {
    long h = acquire();
    try {
      Native.sessionReset(h);
    } finally {
      release();
    }
  }

  /** New sampling settings for the next calls. */
  public void setSampling(Sampling sampling) {
    if (sampling == null) throw new NullPointerException("sampling");
    long h = acquire();
    try {
      Native.sessionSetSampling(h, sampling.floats(), sampling.longs());
    } finally {
      release();
    }
  }

  /**
   * Constrains every following generate() call until set again ({@link Constraint}); null
   * returns to free text. The session keeps its own reference: the Constraint may be closed
   * afterwards. A constrained generate() with {@link GenerateOptions#withIgnoreEos} true is
   * refused (EdgellmException INVALID_ARGUMENT): the document could never end.
   *
   * @throws EdgellmException for a model loaded without a tokenizer
   * @throws IllegalStateException when the constraint is closed
   */
  public void setConstraint(Constraint constraint) {
    long h = acquire();
    try {
      if (constraint == null) {
        Native.sessionSetConstraint(h, 0);
        return;
      }
      long c = constraint.acquire();
      try {
        Native.sessionSetConstraint(h, c);
      } finally {
        constraint.release();
      }
    } finally {
      release();
    }
  }

  /**
   * How the latest generate() call went under its constraint: a whole document or not, and
   * whether the token budget forced the closing.
   *
   * @throws EdgellmException (INVALID_ARGUMENT) when the latest call was not constrained,
   *     failed, or there was none since the session was created or reset
   */
  public ConstraintResult constraintResult() {
    int[] out = new int[2];
    long h = acquire();
    try {
      Native.sessionConstraintResult(h, out);
    } finally {
      release();
    }
    return new ConstraintResult(out[0] != 0, out[1] != 0);
  }

  /** Tokens the session's cache holds. */
  public long position() {
    long h = acquire();
    try {
      return Native.sessionPosition(h);
    } finally {
      release();
    }
  }

  /** Tokens the session's cache can hold. */
  public long contextSize() {
    long h = acquire();
    try {
      return Native.sessionContextSize(h);
    } finally {
      release();
    }
  }

  /** Writes the KV state after the latest generate() call's prompt to path (atomically). */
  public void savePromptCache(String path) {
    byte[] p = Utf8.cString(path, "path");
    long h = acquire();
    try {
      Native.savePromptCache(h, p);
    } finally {
      release();
    }
  }

  /**
   * Restores a state written by {@link #savePromptCache}; a state from another model or KV type
   * is refused (EdgellmException) and the session is unchanged. Plain decoding only.
   *
   * @return the number of tokens the state holds
   */
  public long loadPromptCache(String path) {
    byte[] p = Utf8.cString(path, "path");
    long h = acquire();
    try {
      return Native.loadPromptCache(h, p);
    } finally {
      release();
    }
  }

  /**
   * Frees the session now (idempotent). From this session's generate() callback, or from another
   * thread while generate() runs, it stops the generation (after the current piece, as returning
   * false does) and frees the session when generate() returns.
   */
  @Override
  public void close() {
    synchronized (this) {
      if (generating) {
        closeAfterGenerate = true;
        if (running != null) running.cancelled = true;
        return;
      }
    }
    handle.close();
  }

  public boolean isClosed() {
    return handle.isClosed();
  }
}

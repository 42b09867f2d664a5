// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/** How to create a session ({@code edgellm_session_options}); immutable, {@code with*} copies. */
public final class SessionOptions {
  final KvType kvType;
  final int contextSize;
  final int maxBatch;
  final Sampling sampling;
  final Model draft;
  final boolean promptLookup;
  final int draftTokens;

  private SessionOptions(KvType kvType, int contextSize, int maxBatch, Sampling sampling,
      Model draft, boolean promptLookup, int draftTokens) {
    this.kvType = kvType;
    this.contextSize = contextSize;
    this.maxBatch = maxBatch;
    this.sampling = sampling;
    this.draft = draft;
    this.promptLookup = promptLookup;
    this.draftTokens = draftTokens;
  }

  /** The library's defaults ({@code edgellm_session_options_default()}). */
  public static SessionOptions defaults() {
    long[] l = new long[5]; // kv_type, context_size, max_batch, prompt_lookup, draft_tokens
    Native.sessionOptionsDefault(l);
    return new SessionOptions(KvType.values()[(int) l[0]], (int) l[1], (int) l[2],
        Sampling.defaults(), null, l[3] != 0, (int) l[4]);
  }

  public SessionOptions withKvType(KvType v) {
    if (v == null) throw new NullPointerException("kvType");
    return new SessionOptions(v, contextSize, maxBatch, sampling, draft, promptLookup, draftTokens);
  }

  /**
   * Tokens the session holds; 0 is the model's default. Above the model's {@link
   * Model#maxContext()} (max_position_embeddings) newSession() throws EdgellmException
   * (INVALID_ARGUMENT).
   */
  public SessionOptions withContextSize(int v) {
    if (v < 0) throw new IllegalArgumentException("context size must be >= 0, got " + v);
    return new SessionOptions(kvType, v, maxBatch, sampling, draft, promptLookup, draftTokens);
  }

  /** Most tokens run through the layers at once; 0 is the default. */
  public SessionOptions withMaxBatch(int v) {
    if (v < 0) throw new IllegalArgumentException("max batch must be >= 0, got " + v);
    return new SessionOptions(kvType, contextSize, v, sampling, draft, promptLookup, draftTokens);
  }

  public SessionOptions withSampling(Sampling v) {
    if (v == null) throw new NullPointerException("sampling");
    return new SessionOptions(kvType, contextSize, maxBatch, v, draft, promptLookup, draftTokens);
  }

  /**
   * Speculative decoding with this draft model (same tokenizer; it may be loaded without one).
   * The session keeps the draft reachable; null for none.
   */
  public SessionOptions withDraft(Model v) {
    return new SessionOptions(kvType, contextSize, maxBatch, sampling, v, promptLookup, draftTokens);
  }

  /** Speculative decoding by n-gram lookup in the prompt (not with a draft model). */
  public SessionOptions withPromptLookup(boolean v) {
    return new SessionOptions(kvType, contextSize, maxBatch, sampling, draft, v, draftTokens);
  }

  /** Tokens drafted per step; 0 is the default. */
  public SessionOptions withDraftTokens(int v) {
    if (v < 0) throw new IllegalArgumentException("draft tokens must be >= 0, got " + v);
    return new SessionOptions(kvType, contextSize, maxBatch, sampling, draft, promptLookup, v);
  }

  public KvType kvType() { return kvType; }
  public int contextSize() { return contextSize; }
  public int maxBatch() { return maxBatch; }
  public Sampling sampling() { return sampling; }
  public Model draft() { return draft; }
  public boolean promptLookup() { return promptLookup; }
  public int draftTokens() { return draftTokens; }

  /** For the JNI glue: kv_type, context_size, max_batch, prompt_lookup, draft_tokens, draft. */
  long[] longs(long draftHandle) {
    return new long[] {
      kvType.ordinal(), contextSize, maxBatch, promptLookup ? 1 : 0, draftTokens, draftHandle
    };
  }
}

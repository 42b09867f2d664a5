// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * What loading a model and creating one session will need ({@code edgellm_plan}), computed from
 * config.json and the safetensors headers before anything large is allocated. Bytes.
 */
public final class MemoryPlan {
  private final long weightsMappedBytes;
  private final long weightsResidentBytes;
  private final long kvCacheBytes;
  private final long scratchBytes;
  private final long loadPeakBytes;
  private final long peakBytes;
  private final int contextSize;

  private MemoryPlan(long[] p) {
    weightsMappedBytes = p[0];
    weightsResidentBytes = p[1];
    kvCacheBytes = p[2];
    scratchBytes = p[3];
    loadPeakBytes = p[4];
    peakBytes = p[5];
    contextSize = (int) p[6];
  }

  /**
   * The plan for {@code Model.load(modelDir, modelOptions)} followed by one {@code
   * newSession(sessionOptions)}. Either options may be null (the defaults).
   *
   * @throws EdgellmException naming the file that could not be read
   */
  public static MemoryPlan compute(String modelDir, ModelOptions modelOptions,
      SessionOptions sessionOptions) {
    if (modelDir == null) throw new NullPointerException("modelDir");
    ModelOptions m = modelOptions != null ? modelOptions : ModelOptions.defaults();
    SessionOptions s = sessionOptions != null ? sessionOptions : SessionOptions.defaults();
    long[] out = new long[7];
    // The plan only reads the draft's handle value for its numbers; the draft must stay open.
    Model draft = s.draft;
    long draftHandle = draft != null ? draft.acquire() : 0;
    try {
      Native.plan(Utf8.cString(modelDir, "modelDir"), m.longs(), m.strings(),
          s.longs(draftHandle), s.sampling.floats(), s.sampling.longs(), out);
    } finally {
      if (draft != null) draft.release();
    }
    return new MemoryPlan(out);
  }

  /** The phone profile for {@link #fitBudget}: 3.8 GiB, or 90 % of the available memory when less. */
  public static final long BUDGET_PHONE = 0;

  /** Settings chosen to fit a memory budget: the options, their plan, and what changed. */
  public static final class Fit {
    public final ModelOptions modelOptions;
    public final SessionOptions sessionOptions;
    public final MemoryPlan plan;
    /** What was changed and why; "" when the options fit as given. */
    public final String note;

    private Fit(ModelOptions m, SessionOptions s, MemoryPlan plan, String note) {
      this.modelOptions = m;
      this.sessionOptions = s;
      this.plan = plan;
      this.note = note;
    }
  }

  /**
   * Options that fit {@code budgetBytes} ({@link #BUDGET_PHONE}: the phone profile), starting from
   * the given ones (null: the defaults) and changing, in this order and each only when what comes
   * before does not fit, the lm_head format, the KV type and the context ({@code
   * edgellm_fit_budget}).
   *
   * @throws EdgellmException with status OUT_OF_MEMORY and the smallest plan when nothing fits
   */
  public static Fit fitBudget(String modelDir, long budgetBytes, ModelOptions modelOptions,
      SessionOptions sessionOptions) {
    if (modelDir == null) throw new NullPointerException("modelDir");
    if (budgetBytes < 0) throw new IllegalArgumentException("budget must be >= 0, got " + budgetBytes);
    ModelOptions m = modelOptions != null ? modelOptions : ModelOptions.defaults();
    SessionOptions s = sessionOptions != null ? sessionOptions : SessionOptions.defaults();
    long[] out = new long[9];
    byte[][] strings = new byte[2][];
    Model draft = s.draft;
    long draftHandle = draft != null ? draft.acquire() : 0;
    try {
      Native.fitBudget(Utf8.cString(modelDir, "modelDir"), budgetBytes, m.longs(), m.strings(),
          s.longs(draftHandle), s.sampling.floats(), s.sampling.longs(), out, strings);
    } finally {
      if (draft != null) draft.release();
    }
    return new Fit(m.withLmHead(Utf8.decode(strings[0])),
        s.withKvType(KvType.values()[(int) out[7]]).withContextSize((int) out[8]),
        new MemoryPlan(out), Utf8.decode(strings[1]));
  }

  public long weightsMappedBytes() { return weightsMappedBytes; }
  /** Owned weight bytes plus the mapped bytes that loading touches. */
  public long weightsResidentBytes() { return weightsResidentBytes; }
  /** One session's KV cache at its context and KV type. */
  public long kvCacheBytes() { return kvCacheBytes; }
  /** One session's activations, logits and workspace. */
  public long scratchBytes() { return scratchBytes; }
  public long loadPeakBytes() { return loadPeakBytes; }
  /** The most resident: load, then one session generating. */
  public long peakBytes() { return peakBytes; }
  public int contextSize() { return contextSize; }

  @Override
  public String toString() {
    return "MemoryPlan{weightsMappedBytes=" + weightsMappedBytes + ", weightsResidentBytes="
        + weightsResidentBytes + ", kvCacheBytes=" + kvCacheBytes + ", scratchBytes="
        + scratchBytes + ", loadPeakBytes=" + loadPeakBytes + ", peakBytes=" + peakBytes
        + ", contextSize=" + contextSize + "}";
  }
}

// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/** How to load a model ({@code edgellm_model_options}); immutable, {@code with*} returns a copy. */
public final class ModelOptions {
  final int threads;
  final String backend;
  final String lmHead;
  final String packedCache;
  final boolean loadTokenizer;
  final long memoryBudgetBytes;

  private ModelOptions(int threads, String backend, String lmHead, String packedCache,
      boolean loadTokenizer, long memoryBudgetBytes) {
    this.threads = threads;
    this.backend = backend;
    this.lmHead = lmHead;
    this.packedCache = packedCache;
    this.loadTokenizer = loadTokenizer;
    this.memoryBudgetBytes = memoryBudgetBytes;
  }

  /** The library's defaults ({@code edgellm_model_options_default()}). */
  public static ModelOptions defaults() {
    long[] l = new long[3]; // threads, load_tokenizer, memory_budget_bytes
    Native.modelOptionsDefault(l);
    return new ModelOptions((int) l[0], null, null, null, l[1] != 0, l[2]);
  }

  /** > 1: the model owns a pool of this many threads that its sessions take turns on. */
  public ModelOptions withThreads(int v) {
    if (v < 0) throw new IllegalArgumentException("threads must be >= 0, got " + v);
    return new ModelOptions(v, backend, lmHead, packedCache, loadTokenizer, memoryBudgetBytes);
  }

  /** null or "cpu" ("vulkan" where the library is built with it). */
  public ModelOptions withBackend(String v) {
    return new ModelOptions(threads, v, lmHead, packedCache, loadTokenizer, memoryBudgetBytes);
  }

  /** null or "stored": as stored; "q4": int4 (falls back to stored). */
  public ModelOptions withLmHead(String v) {
    return new ModelOptions(threads, backend, v, packedCache, loadTokenizer, memoryBudgetBytes);
  }

  /** null: none; "auto": beside the checkpoint; else a file path. */
  public ModelOptions withPackedCache(String v) {
    return new ModelOptions(threads, backend, lmHead, v, loadTokenizer, memoryBudgetBytes);
  }

  /** Load tokenizer.json (needed for text prompts and output text). */
  public ModelOptions withLoadTokenizer(boolean v) {
    return new ModelOptions(threads, backend, lmHead, packedCache, v, memoryBudgetBytes);
  }

  /** 0: none; else loading refuses (OUT_OF_MEMORY) when the memory plan exceeds this. */
  public ModelOptions withMemoryBudgetBytes(long v) {
    if (v < 0) throw new IllegalArgumentException("memory budget must be >= 0, got " + v);
    return new ModelOptions(threads, backend, lmHead, packedCache, loadTokenizer, v);
  }

  public int threads() { return threads; }
  public String backend() { return backend; }
  public String lmHead() { return lmHead; }
  public String packedCache() { return packedCache; }
  public boolean loadTokenizer() { return loadTokenizer; }
  public long memoryBudgetBytes() { return memoryBudgetBytes; }

  long[] longs() {
    return new long[] {threads, loadTokenizer ? 1 : 0, memoryBudgetBytes};
  }

  byte[][] strings() {
    return new byte[][] {
      Utf8.cString(backend, "backend"), Utf8.cString(lmHead, "lmHead"),
      Utf8.cString(packedCache, "packedCache")
    };
  }
}

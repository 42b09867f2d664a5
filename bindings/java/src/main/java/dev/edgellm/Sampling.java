// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * Sampling settings ({@code edgellm_sampling}); immutable, each {@code with*} returns a copy.
 * Values are checked by the native library when they are used (an out-of-range value gives
 * {@link EdgellmException} with status INVALID_ARGUMENT naming the field).
 */
public final class Sampling {
  final float temperature;
  final int topK;
  final float topP;
  final float minP;
  final float repetitionPenalty;
  final int penaltyLastN;
  final long seed;

  private Sampling(float temperature, int topK, float topP, float minP, float repetitionPenalty,
      int penaltyLastN, long seed) {
    this.temperature = temperature;
    this.topK = topK;
    this.topP = topP;
    this.minP = minP;
    this.repetitionPenalty = repetitionPenalty;
    this.penaltyLastN = penaltyLastN;
    this.seed = seed;
  }

  private static Sampling fromNative(boolean greedy) {
    float[] f = new float[4]; // temperature, top_p, min_p, repetition_penalty
    long[] l = new long[3];   // top_k, penalty_last_n, seed
    Native.samplingDefault(greedy, f, l);
    return new Sampling(f[0], (int) l[0], f[1], f[2], f[3], (int) l[1], l[2]);
  }

  /** The library's defaults ({@code edgellm_sampling_default()}). */
  public static Sampling defaults() {
    return fromNative(false);
  }

  /** Greedy decoding: temperature 0 ({@code edgellm_sampling_greedy()}). */
  public static Sampling greedy() {
    return fromNative(true);
  }

  /** >= 0; 0 is greedy. */
  public Sampling withTemperature(float v) {
    return new Sampling(v, topK, topP, minP, repetitionPenalty, penaltyLastN, seed);
  }

  /** Keep the k most probable tokens; 0 is off. */
  public Sampling withTopK(int v) {
    return new Sampling(temperature, v, topP, minP, repetitionPenalty, penaltyLastN, seed);
  }

  /** In (0, 1]; 1 is off. */
  public Sampling withTopP(float v) {
    return new Sampling(temperature, topK, v, minP, repetitionPenalty, penaltyLastN, seed);
  }

  /** In [0, 1); 0 is off. */
  public Sampling withMinP(float v) {
    return new Sampling(temperature, topK, topP, v, repetitionPenalty, penaltyLastN, seed);
  }

  /** > 0; 1 is off. */
  public Sampling withRepetitionPenalty(float v) {
    return new Sampling(temperature, topK, topP, minP, v, penaltyLastN, seed);
  }

  /** History window of the penalty in tokens; 0 is the whole history. */
  public Sampling withPenaltyLastN(int v) {
    return new Sampling(temperature, topK, topP, minP, repetitionPenalty, v, seed);
  }

  /** Seed of the random stream (all 64 bits are used, as unsigned). */
  public Sampling withSeed(long v) {
    return new Sampling(temperature, topK, topP, minP, repetitionPenalty, penaltyLastN, v);
  }

  public float temperature() { return temperature; }
  public int topK() { return topK; }
  public float topP() { return topP; }
  public float minP() { return minP; }
  public float repetitionPenalty() { return repetitionPenalty; }
  public int penaltyLastN() { return penaltyLastN; }
  public long seed() { return seed; }

  /** The float fields for the JNI glue: temperature, top_p, min_p, repetition_penalty. */
  float[] floats() {
    return new float[] {temperature, topP, minP, repetitionPenalty};
  }

  /** The integer fields for the JNI glue: top_k, penalty_last_n, seed. */
  long[] longs() {
    return new long[] {topK, penaltyLastN, seed};
  }

  @Override
  public String toString() {
    return "Sampling{temperature=" + temperature + ", topK=" + topK + ", topP=" + topP
        + ", minP=" + minP + ", repetitionPenalty=" + repetitionPenalty + ", penaltyLastN="
        + penaltyLastN + ", seed=" + Long.toUnsignedString(seed) + "}";
  }
}

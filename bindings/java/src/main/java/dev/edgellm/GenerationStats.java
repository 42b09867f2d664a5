// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/** What one generate() call did ({@code edgellm_generation_stats}). Times in seconds. */
public final class GenerationStats {
  private final int promptTokens;
  private final int newTokens;
  private final double prefillSeconds;
  private final double decodeSeconds;
  private final double timeToFirstTokenSeconds;
  private final StopReason stopReason;

  /** From the JNI glue's array: prompt_tokens, new_tokens, prefill_s, decode_s, ttft_s, stop. */
  GenerationStats(double[] s) {
    this.promptTokens = (int) s[0];
    this.newTokens = (int) s[1];
    this.prefillSeconds = s[2];
    this.decodeSeconds = s[3];
    this.timeToFirstTokenSeconds = s[4];
    this.stopReason = StopReason.of((int) s[5]);
  }

  /** Prompt tokens forwarded by this call (a continued chat forwards only its new tokens). */
  public int promptTokens() { return promptTokens; }
  public int newTokens() { return newTokens; }
  public double prefillSeconds() { return prefillSeconds; }
  public double decodeSeconds() { return decodeSeconds; }
  public double timeToFirstTokenSeconds() { return timeToFirstTokenSeconds; }
  public StopReason stopReason() { return stopReason; }

  @Override
  public String toString() {
    return "GenerationStats{promptTokens=" + promptTokens + ", newTokens=" + newTokens
        + ", prefillSeconds=" + prefillSeconds + ", decodeSeconds=" + decodeSeconds
        + ", timeToFirstTokenSeconds=" + timeToFirstTokenSeconds + ", stopReason=" + stopReason
        + "}";
  }
}

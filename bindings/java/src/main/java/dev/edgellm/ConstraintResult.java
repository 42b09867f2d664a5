// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * How the latest generate() call on a constrained {@link Session} went ({@code
 * edgellm_session_constraint_result}).
 */
public final class ConstraintResult {
  private final boolean complete;
  private final boolean forced;

  ConstraintResult(boolean complete, boolean forced) {
    this.complete = complete;
    this.forced = forced;
  }

  /**
   * The output is a whole document (the generation ended at the model's eos, which the
   * constraint allows only there); false when it stopped first (maxNewTokens, a stop string, a
   * full context, the callback).
   */
  public boolean complete() {
    return complete;
  }

  /** The token budget overrode the model's choice at least once to close the document in time. */
  public boolean forced() {
    return forced;
  }

  @Override
  public String toString() {
    return "ConstraintResult{complete=" + complete + ", forced=" + forced + "}";
  }
}

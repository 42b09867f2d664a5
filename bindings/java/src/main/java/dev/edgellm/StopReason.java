// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/** Why a generation ended ({@code edgellm_stop_reason}; same order). */
public enum StopReason {
  EOS, STRING, MAX_TOKENS, CONTEXT_FULL,
  /** The callback returned false or threw. */
  CALLBACK;

  static StopReason of(int code) {
    StopReason[] all = values();
    if (code < 0 || code >= all.length) throw new IllegalStateException("unknown stop reason " + code);
    return all[code];
  }
}

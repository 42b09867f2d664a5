// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/** How a session's KV cache stores keys and values ({@code edgellm_kv_type}; same order). */
public enum KvType {
  /** One byte per value with a scale per position and head: half the memory of F16. */
  INT8,
  F16,
  F32,
  /** Four bits per value with a scale per position, head and 32 values: 0.28 of F16's memory. */
  INT4
}

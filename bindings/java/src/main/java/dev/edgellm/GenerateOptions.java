// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** One generate() call's settings ({@code edgellm_generate_options}); immutable. */
public final class GenerateOptions {
  final int maxNewTokens;
  final List<String> stopStrings;
  final boolean ignoreEos;
  final boolean addSpecial;
  final boolean parseSpecial;

  private GenerateOptions(int maxNewTokens, List<String> stopStrings, boolean ignoreEos,
      boolean addSpecial, boolean parseSpecial) {
    this.maxNewTokens = maxNewTokens;
    this.stopStrings = stopStrings;
    this.ignoreEos = ignoreEos;
    this.addSpecial = addSpecial;
    this.parseSpecial = parseSpecial;
  }

  /** The library's defaults ({@code edgellm_generate_options_default()}). */
  public static GenerateOptions defaults() {
    long[] l = new long[4]; // max_new_tokens, ignore_eos, add_special, parse_special
    Native.generateOptionsDefault(l);
    return new GenerateOptions((int) l[0], Collections.<String>emptyList(), l[1] != 0, l[2] != 0,
        l[3] != 0);
  }

  /** > 0. */
  public GenerateOptions withMaxNewTokens(int v) {
    if (v <= 0) throw new IllegalArgumentException("maxNewTokens must be > 0, got " + v);
    return new GenerateOptions(v, stopStrings, ignoreEos, addSpecial, parseSpecial);
  }

  /** Generation ends before the first occurrence of any of these. */
  public GenerateOptions withStopStrings(List<String> v) {
    List<String> copy = Collections.unmodifiableList(new ArrayList<String>(v));
    for (String s : copy) if (s == null) throw new NullPointerException("a stop string is null");
    return new GenerateOptions(maxNewTokens, copy, ignoreEos, addSpecial, parseSpecial);
  }

  /** Do not stop at the model's end-of-sequence ids. */
  public GenerateOptions withIgnoreEos(boolean v) {
    return new GenerateOptions(maxNewTokens, stopStrings, v, addSpecial, parseSpecial);
  }

  /** Text prompts: add the tokenizer's bos etc. */
  public GenerateOptions withAddSpecial(boolean v) {
    return new GenerateOptions(maxNewTokens, stopStrings, ignoreEos, v, parseSpecial);
  }

  /** Text prompts: special-token text ("&lt;|im_start|&gt;") becomes special ids. */
  public GenerateOptions withParseSpecial(boolean v) {
    return new GenerateOptions(maxNewTokens, stopStrings, ignoreEos, addSpecial, v);
  }

  public int maxNewTokens() { return maxNewTokens; }
  public List<String> stopStrings() { return stopStrings; }
  public boolean ignoreEos() { return ignoreEos; }
  public boolean addSpecial() { return addSpecial; }
  public boolean parseSpecial() { return parseSpecial; }

  byte[][] stopBytes() {
    byte[][] out = new byte[stopStrings.size()][];
    for (int i = 0; i < out.length; ++i) out[i] = Utf8.cString(stopStrings.get(i), "stop string");
    return out;
  }
}

// SPDX-License-Identifier: Apache-2.0
package dev.edgellm;

/**
 * The JNI glue (bindings/java/jni/edgellm_jni.c) over the C API. Handles are the C pointers as
 * longs; the public classes never pass 0. Strings are UTF-8 byte arrays ({@link Utf8}). A
 * failing call throws {@link EdgellmException} with the C status and edgellm_last_error().
 */
final class Native {
  private Native() {}

  static {
    // -Dedgellm.jni.library=/abs/path/libedgellm_jni.so overrides the java.library.path lookup.
    String path = System.getProperty("edgellm.jni.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      System.loadLibrary("edgellm_jni");
    }
  }

  static native byte[] version();
  static native byte[] buildInfo();

  static native void modelOptionsDefault(long[] out);
  static native void samplingDefault(boolean greedy, float[] floats, long[] longs);
  static native void sessionOptionsDefault(long[] out);
  static native void generateOptionsDefault(long[] out);

  static native long modelLoad(byte[] dir, long[] modelLongs, byte[][] modelStrings);
  static native void modelFree(long model);
  static native long modelVocabSize(long model);
  static native long modelMaxContext(long model);

  static native int[] tokenize(long model, byte[] text, boolean addSpecial, boolean parseSpecial);
  static native byte[] detokenize(long model, int[] ids, boolean skipSpecial);

  static native long sessionCreate(long model, long[] sessionLongs, float[] samplingFloats,
      long[] samplingLongs);
  static native void sessionFree(long session);
  static native void sessionReset(long session);
  static native void sessionSetSampling(long session, float[] samplingFloats, long[] samplingLongs);
  static native long sessionPosition(long session);
  static native long sessionContextSize(long session);

  /** prompt (text) or promptIds (tokens): exactly one is non-null. stats gets 6 values. */
  static native void generate(long session, byte[] prompt, int[] promptIds, int maxNewTokens,
      byte[][] stopStrings, boolean ignoreEos, boolean addSpecial, boolean parseSpecial,
      CallbackBridge bridge, double[] stats);

  /** kind: edgellm_constraint_kind; source and choices may be null. */
  static native long constraintCompile(int kind, byte[] source, byte[][] choices);
  static native void constraintFree(long constraint);
  /** constraint 0: none (free text). */
  static native void sessionSetConstraint(long session, long constraint);
  /** out gets {complete, forced}. */
  static native void sessionConstraintResult(long session, int[] out);

  static native void savePromptCache(long session, byte[] path);
  static native long loadPromptCache(long session, byte[] path);

  static native void plan(byte[] dir, long[] modelLongs, byte[][] modelStrings,
      long[] sessionLongs, float[] samplingFloats, long[] samplingLongs, long[] out);
  /** out gets the plan's 7 figures, the chosen kv type and context; outStrings the chosen lm_head and the note. */
  static native void fitBudget(byte[] dir, long budgetBytes, long[] modelLongs,
      byte[][] modelStrings, long[] sessionLongs, float[] samplingFloats, long[] samplingLongs,
      long[] out, byte[][] outStrings);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* JNI glue of the Java binding (package dev.edgellm, class Native) over the C API only.
 *
 * Rules this file keeps:
 *  - Strings cross as UTF-8 byte arrays in both directions (NewStringUTF and GetStringUTFChars
 *    use modified UTF-8, which mangles non-BMP characters and NUL).
 *  - A failed edgellm call throws dev.edgellm.EdgellmException(status, last error bytes) at
 *    once, before any other edgellm call on this thread could replace the message.
 *  - No JNI call is made while an exception is pending, and no pending exception is carried
 *    back into the C library: the streaming callback takes it out (ExceptionOccurred +
 *    ExceptionClear), returns 0 to stop, and generate() throws it again afterwards.
 *  - The streaming loop deletes its local references each token, so a long generation stays
 *    within the local reference table.
 *  - No global state: classes and method ids are looked up per call (once per generate, not
 *    per token). */
#include <jni.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgellm/c/edgellm.h"

#define JNI_FN(name) Java_dev_edgellm_Native_##name

typedef char edgellm_jni_jint_is_int32[sizeof(jint) == sizeof(int32_t) ? 1 : -1];

/* ---- exceptions ------------------------------------------------------------------------- */

static void throw_class(JNIEnv* env, const char* cls_name, const char* msg) {
  jclass cls = (*env)->FindClass(env, cls_name);
  if (cls != NULL) (*env)->ThrowNew(env, cls, msg); /* else FindClass left its own error */
}

static void throw_oom(JNIEnv* env, const char* what) {
  throw_class(env, "java/lang/OutOfMemoryError", what);
}

static jbyteArray new_bytes(JNIEnv* env, const char* data, size_t len) {
  if (len > (size_t)INT32_MAX) {
    throw_oom(env, "edgellm: text longer than a Java array");
    return NULL;
  }
  jbyteArray arr = (*env)->NewByteArray(env, (jsize)len);
  if (arr != NULL && len > 0) (*env)->SetByteArrayRegion(env, arr, 0, (jsize)len, (const jbyte*)data);
  return arr;
}

/* Throws EdgellmException for a failed call; returns 1 if st was a failure. */
static int check(JNIEnv* env, edgellm_status st) {
  if (st == EDGELLM_OK) return 0;
  const char* msg = edgellm_last_error(); /* valid until our next edgellm_* call */
  if (msg == NULL || msg[0] == '\0') msg = edgellm_status_string(st);
  jbyteArray bytes = new_bytes(env, msg, strlen(msg));
  if (bytes == NULL) return 1;
  jclass cls = (*env)->FindClass(env, "dev/edgellm/EdgellmException");
  if (cls == NULL) return 1;
  jmethodID ctor = (*env)->GetMethodID(env, cls, "<init>", "(I[B)V");
  if (ctor == NULL) return 1;
  jobject ex = (*env)->NewObject(env, cls, ctor, (jint)st, bytes);
  if (ex != NULL) (*env)->Throw(env, (jthrowable)ex);
  return 1;
}

/* ---- arrays in ------------------------------------------------------------------------ */

/* A NUL-terminated malloc'd copy of a byte[] (NULL for a null array: *ok stays 1). The Java side
 * refuses strings with NUL. On failure throws, sets *ok = 0 and returns NULL. */
static char* c_string(JNIEnv* env, jbyteArray arr, int* ok) {
  if (arr == NULL) return NULL;
  jsize n = (*env)->GetArrayLength(env, arr);
  char* s = (char*)malloc((size_t)n + 1);
  if (s == NULL) {
    throw_oom(env, "edgellm: copying a string");
    *ok = 0;
    return NULL;
  }
  (*env)->GetByteArrayRegion(env, arr, 0, n, (jbyte*)s);
  s[n] = '\0';
  return s;
}

/* Copies up to n longs of a long[] into out (the Java side sizes them). */
static int get_longs(JNIEnv* env, jlongArray arr, jlong* out, jsize n) {
  if (arr == NULL || (*env)->GetArrayLength(env, arr) < n) {
    throw_class(env, "java/lang/IllegalArgumentException", "edgellm: short option array");
    return 0;
  }
  (*env)->GetLongArrayRegion(env, arr, 0, n, out);
  return 1;
}

static int get_floats(JNIEnv* env, jfloatArray arr, jfloat* out, jsize n) {
  if (arr == NULL || (*env)->GetArrayLength(env, arr) < n) {
    throw_class(env, "java/lang/IllegalArgumentException", "edgellm: short option array");
    return 0;
  }
  (*env)->GetFloatArrayRegion(env, arr, 0, n, out);
  return 1;
}

/* ---- options --------------------------------------------------------------------------- */

/* Model options from Java: longs {threads, load_tokenizer, budget}, strings {backend, lm_head,
 * packed_cache} (each may be null). strs[3] receive malloc'd copies the caller frees. */
static int model_options(JNIEnv* env, jlongArray longs, jobjectArray strings,
                         edgellm_model_options* o, char* strs[3]) {
  jlong l[3];
  int ok = 1;
  strs[0] = strs[1] = strs[2] = NULL;
  *o = edgellm_model_options_default();
  if (!get_longs(env, longs, l, 3)) return 0;
  o->threads = (int32_t)l[0];
  o->load_tokenizer = l[1] != 0;
  o->memory_budget_bytes = (uint64_t)l[2];
  if (strings == NULL || (*env)->GetArrayLength(env, strings) < 3) {
    throw_class(env, "java/lang/IllegalArgumentException", "edgellm: short option array");
    return 0;
  }
  for (int i = 0; i < 3 && ok; ++i) {
    jbyteArray s = (jbyteArray)(*env)->GetObjectArrayElement(env, strings, i);
    strs[i] = c_string(env, s, &ok);
    if (s != NULL) (*env)->DeleteLocalRef(env, s);
  }
  if (!ok) return 0;
  o->backend = strs[0];
  o->lm_head = strs[1];
  o->packed_cache = strs[2];
  return 1;
}

/* Sampling from Java: floats {temperature, top_p, min_p, repetition_penalty}, longs {top_k,
 * penalty_last_n, seed}. */
static int sampling(JNIEnv* env, jfloatArray floats, jlongArray longs, edgellm_sampling* s) {
  jfloat f[4];
  jlong l[3];
  if (!get_floats(env, floats, f, 4) || !get_longs(env, longs, l, 3)) return 0;
  *s = edgellm_sampling_default();
  s->temperature = f[0];
  s->top_p = f[1];
  s->min_p = f[2];
  s->repetition_penalty = f[3];
  s->top_k = (int32_t)l[0];
  s->penalty_last_n = (int32_t)l[1];
  s->seed = (uint64_t)l[2];
  return 1;
}

/* Session options from Java: longs {kv_type, context_size, max_batch, prompt_lookup,
 * draft_tokens, draft handle}. */
static int session_options(JNIEnv* env, jlongArray longs, jfloatArray sf, jlongArray sl,
                           edgellm_session_options* o) {
  jlong l[6];
  *o = edgellm_session_options_default();
  if (!get_longs(env, longs, l, 6) || !sampling(env, sf, sl, &o->sampling)) return 0;
  o->kv_type = (edgellm_kv_type)l[0];
  o->context_size = (uint32_t)l[1];
  o->max_batch = (uint32_t)l[2];
  o->prompt_lookup = l[3] != 0;
  o->draft_tokens = (uint32_t)l[4];
  o->draft = (const edgellm_model*)(intptr_t)l[5];
  return 1;
}

/* ---- version, defaults ------------------------------------------------------------------ */

JNIEXPORT jbyteArray JNICALL JNI_FN(version)(JNIEnv* env, jclass cls) {
  (void)cls;
  const char* v = edgellm_version();
  return new_bytes(env, v, strlen(v));
}

JNIEXPORT jbyteArray JNICALL JNI_FN(buildInfo)(JNIEnv* env, jclass cls) {
  (void)cls;
  const char* v = edgellm_build_info();
  return new_bytes(env, v, strlen(v));
}

JNIEXPORT void JNICALL JNI_FN(modelOptionsDefault)(JNIEnv* env, jclass cls, jlongArray out) {
  (void)cls;
  edgellm_model_options o = edgellm_model_options_default();
  jlong l[3] = {o.threads, o.load_tokenizer != 0, (jlong)o.memory_budget_bytes};
  (*env)->SetLongArrayRegion(env, out, 0, 3, l);
}

JNIEXPORT void JNICALL JNI_FN(samplingDefault)(JNIEnv* env, jclass cls, jboolean greedy,
                                               jfloatArray floats, jlongArray longs) {
  (void)cls;
  edgellm_sampling s = greedy ? edgellm_sampling_greedy() : edgellm_sampling_default();
  jfloat f[4] = {s.temperature, s.top_p, s.min_p, s.repetition_penalty};
  jlong l[3] = {s.top_k, s.penalty_last_n, (jlong)s.seed};
  (*env)->SetFloatArrayRegion(env, floats, 0, 4, f);
  (*env)->SetLongArrayRegion(env, longs, 0, 3, l);
}

JNIEXPORT void JNICALL JNI_FN(sessionOptionsDefault)(JNIEnv* env, jclass cls, jlongArray out) {
  (void)cls;
  edgellm_session_options o = edgellm_session_options_default();
  jlong l[5] = {(jlong)o.kv_type, o.context_size, o.max_batch, o.prompt_lookup != 0,
                o.draft_tokens};
  (*env)->SetLongArrayRegion(env, out, 0, 5, l);
}

JNIEXPORT void JNICALL JNI_FN(generateOptionsDefault)(JNIEnv* env, jclass cls, jlongArray out) {
  (void)cls;
  edgellm_generate_options o = edgellm_generate_options_default();
  jlong l[4] = {o.max_new_tokens, o.ignore_eos != 0, o.add_special != 0, o.parse_special != 0};
  (*env)->SetLongArrayRegion(env, out, 0, 4, l);
}

/* ---- model ------------------------------------------------------------------------------ */

JNIEXPORT jlong JNICALL JNI_FN(modelLoad)(JNIEnv* env, jclass cls, jbyteArray dir,
                                          jlongArray longs, jobjectArray strings) {
  (void)cls;
  edgellm_model_options o;
  char* strs[3] = {NULL, NULL, NULL};
  int ok = 1;
  edgellm_model* m = NULL;
  char* d = c_string(env, dir, &ok);
  if (ok && model_options(env, longs, strings, &o, strs) &&
      check(env, edgellm_model_load(d, &o, &m))) {
    m = NULL; /* the header promises NULL on failure; do not trust a stray value */
  }
  free(strs[0]);
  free(strs[1]);
  free(strs[2]);
  free(d);
  return (jlong)(intptr_t)m;
}

JNIEXPORT void JNICALL JNI_FN(modelFree)(JNIEnv* env, jclass cls, jlong model) {
  (void)env;
  (void)cls;
  edgellm_model_free((edgellm_model*)(intptr_t)model);
}

JNIEXPORT jlong JNICALL JNI_FN(modelVocabSize)(JNIEnv* env, jclass cls, jlong model) {
  (void)env;
  (void)cls;
  return (jlong)edgellm_model_vocab_size((const edgellm_model*)(intptr_t)model);
}

JNIEXPORT jlong JNICALL JNI_FN(modelMaxContext)(JNIEnv* env, jclass cls, jlong model) {
  (void)env;
  (void)cls;
  return (jlong)edgellm_model_max_context((const edgellm_model*)(intptr_t)model);
}

/* ---- tokenizer -------------------------------------------------------------------------- */

JNIEXPORT jintArray JNICALL JNI_FN(tokenize)(JNIEnv* env, jclass cls, jlong model,
                                             jbyteArray text, jboolean add_special,
                                             jboolean parse_special) {
  (void)cls;
  const edgellm_model* m = (const edgellm_model*)(intptr_t)model;
  jsize n = (*env)->GetArrayLength(env, text);
  jintArray result = NULL;
  char* bytes = (char*)malloc((size_t)n + 1);
  /* Byte-level BPE gives at most one id per byte, plus the specials added: a first guess. */
  size_t capacity = (size_t)n + 8, count = 0;
  int32_t* ids = NULL;
  if (bytes == NULL) {
    throw_oom(env, "edgellm: tokenize");
    return NULL;
  }
  (*env)->GetByteArrayRegion(env, text, 0, n, (jbyte*)bytes);
  bytes[n] = '\0';
  for (int attempt = 0; attempt < 2; ++attempt) {
    free(ids);
    ids = (int32_t*)malloc(capacity * sizeof(int32_t));
    if (ids == NULL) {
      throw_oom(env, "edgellm: tokenize");
      goto done;
    }
    edgellm_status st = edgellm_tokenize(m, bytes, (size_t)n, add_special, parse_special, ids,
                                         capacity, &count);
    if (st == EDGELLM_ERR_CAPACITY && count > capacity) {
      capacity = count;
      continue;
    }
    if (check(env, st)) goto done;
    if (count > (size_t)INT32_MAX) {
      throw_oom(env, "edgellm: too many tokens for a Java array");
      goto done;
    }
    result = (*env)->NewIntArray(env, (jsize)count);
    if (result != NULL) (*env)->SetIntArrayRegion(env, result, 0, (jsize)count, (const jint*)ids);
    goto done;
  }
  throw_class(env, "java/lang/IllegalStateException", "edgellm: tokenize count changed");
done:
  free(ids);
  free(bytes);
  return result;
}

JNIEXPORT jbyteArray JNICALL JNI_FN(detokenize)(JNIEnv* env, jclass cls, jlong model,
                                                jintArray ids_arr, jboolean skip_special) {
  (void)cls;
  const edgellm_model* m = (const edgellm_model*)(intptr_t)model;
  jsize n = (*env)->GetArrayLength(env, ids_arr);
  jbyteArray result = NULL;
  int32_t* ids = (int32_t*)malloc(((size_t)n + 1) * sizeof(int32_t));
  size_t capacity = (size_t)n * 8 + 16, len = 0;
  char* out = NULL;
  if (ids == NULL) {
    throw_oom(env, "edgellm: detokenize");
    return NULL;
  }
  (*env)->GetIntArrayRegion(env, ids_arr, 0, n, (jint*)ids);
  for (int attempt = 0; attempt < 8; ++attempt) {
    free(out);
    out = (char*)malloc(capacity);
    if (out == NULL) {
      throw_oom(env, "edgellm: detokenize");
      goto done;
    }
    len = 0;
    edgellm_status st = edgellm_detokenize(m, ids, (size_t)n, skip_special, out, capacity, &len);
    if (st == EDGELLM_ERR_CAPACITY) {
      /* *out_len should be the whole length; grow geometrically if the library did not say */
      capacity = len + 1 > capacity ? len + 1 : capacity * 4;
      continue;
    }
    if (!check(env, st)) result = new_bytes(env, out, len);
    goto done;
  }
  throw_class(env, "java/lang/IllegalStateException", "edgellm: detokenize length kept growing");
done:
  free(out);
  free(ids);
  return result;
}

/* ---- session ---------------------------------------------------------------------------- */

JNIEXPORT jlong JNICALL JNI_FN(sessionCreate)(JNIEnv* env, jclass cls, jlong model,
                                              jlongArray longs, jfloatArray sf, jlongArray sl) {
  (void)cls;
  edgellm_session_options o;
  edgellm_session* s = NULL;
  if (!session_options(env, longs, sf, sl, &o)) return 0;
  if (check(env, edgellm_session_create((const edgellm_model*)(intptr_t)model, &o, &s))) return 0;
  return (jlong)(intptr_t)s;
}

JNIEXPORT void JNICALL JNI_FN(sessionFree)(JNIEnv* env, jclass cls, jlong session) {
  (void)env;
  (void)cls;
  edgellm_session_free((edgellm_session*)(intptr_t)session);
}

JNIEXPORT void JNICALL JNI_FN(sessionReset)(JNIEnv* env, jclass cls, jlong session) {
  (void)cls;
  check(env, edgellm_session_reset((edgellm_session*)(intptr_t)session));
}

JNIEXPORT void JNICALL JNI_FN(sessionSetSampling)(JNIEnv* env, jclass cls, jlong session,
                                                  jfloatArray sf, jlongArray sl) {
  (void)cls;
  edgellm_sampling s;
  if (!sampling(env, sf, sl, &s)) return;
  check(env, edgellm_session_set_sampling((edgellm_session*)(intptr_t)session, &s));
}

JNIEXPORT jlong JNICALL JNI_FN(sessionPosition)(JNIEnv* env, jclass cls, jlong session) {
  (void)env;
  (void)cls;
  return (jlong)edgellm_session_position((const edgellm_session*)(intptr_t)session);
}

JNIEXPORT jlong JNICALL JNI_FN(sessionContextSize)(JNIEnv* env, jclass cls, jlong session) {
  (void)env;
  (void)cls;
  return (jlong)edgellm_session_context_size((const edgellm_session*)(intptr_t)session);
}

/* ---- generation ------------------------------------------------------------------------- */

typedef struct stream_ctx {
  JNIEnv* env;
  jobject bridge;        /* dev.edgellm.CallbackBridge */
  jmethodID on_piece;    /* boolean onPiece(byte[], int) */
  jthrowable pending;    /* an exception raised in JNI or Java during a callback, taken out */
} stream_ctx;

/* Runs on the thread that called generate(): env is valid here. */
static int32_t on_token(const char* text, size_t text_len, int32_t token, void* user_data) {
  stream_ctx* c = (stream_ctx*)user_data;
  JNIEnv* env = c->env;
  if (c->pending != NULL) return 0; /* stopped already; never call JNI with it pending */
  jbyteArray piece = new_bytes(env, text, text_len);
  jboolean go = JNI_FALSE;
  if (piece != NULL) {
    go = (*env)->CallBooleanMethod(env, c->bridge, c->on_piece, piece, (jint)token);
    (*env)->DeleteLocalRef(env, piece); /* one local ref per token: keep the table flat */
  }
  if ((*env)->ExceptionCheck(env)) {
    c->pending = (*env)->ExceptionOccurred(env);
    (*env)->ExceptionClear(env);
    return 0;
  }
  return go ? 1 : 0;
}

JNIEXPORT void JNICALL JNI_FN(generate)(JNIEnv* env, jclass cls, jlong session, jbyteArray prompt,
                                        jintArray prompt_ids, jint max_new_tokens,
                                        jobjectArray stop_strings, jboolean ignore_eos,
                                        jboolean add_special, jboolean parse_special,
                                        jobject bridge, jdoubleArray stats_out) {
  (void)cls;
  edgellm_session* s = (edgellm_session*)(intptr_t)session;
  edgellm_generate_options o = edgellm_generate_options_default();
  edgellm_generation_stats stats;
  stream_ctx ctx = {env, bridge, NULL, NULL};
  int ok = 1;
  char* text = NULL;
  int32_t* ids = NULL;
  size_t n_ids = 0;
  jsize n_stops = stop_strings != NULL ? (*env)->GetArrayLength(env, stop_strings) : 0;
  char** stops = (char**)calloc((size_t)n_stops + 1, sizeof(char*));
  edgellm_status st;

  memset(&stats, 0, sizeof stats);
  if (stops == NULL) {
    throw_oom(env, "edgellm: generate");
    return;
  }
  for (jsize i = 0; i < n_stops && ok; ++i) {
    jbyteArray b = (jbyteArray)(*env)->GetObjectArrayElement(env, stop_strings, i);
    stops[i] = c_string(env, b, &ok);
    if (b != NULL) (*env)->DeleteLocalRef(env, b);
  }
  if (!ok) goto done;
  if (prompt != NULL) {
    text = c_string(env, prompt, &ok);
    if (!ok) goto done;
  } else {
    jsize n = (*env)->GetArrayLength(env, prompt_ids);
    n_ids = (size_t)n;
    ids = (int32_t*)malloc(((size_t)n + 1) * sizeof(int32_t));
    if (ids == NULL) {
      throw_oom(env, "edgellm: generate");
      goto done;
    }
    (*env)->GetIntArrayRegion(env, prompt_ids, 0, n, (jint*)ids);
  }
  if (bridge != NULL) {
    jclass bc = (*env)->GetObjectClass(env, bridge);
    ctx.on_piece = (*env)->GetMethodID(env, bc, "onPiece", "([BI)Z");
    (*env)->DeleteLocalRef(env, bc);
    if (ctx.on_piece == NULL) goto done;
  }
  o.max_new_tokens = (uint32_t)max_new_tokens;
  o.stop_strings = (const char* const*)stops;
  o.n_stop_strings = (size_t)n_stops;
  o.ignore_eos = ignore_eos;
  o.add_special = add_special;
  o.parse_special = parse_special;

  if (text != NULL) {
    st = edgellm_generate(s, text, &o, bridge != NULL ? on_token : NULL, &ctx, &stats);
  } else {
    st = edgellm_generate_tokens(s, ids, n_ids, &o, bridge != NULL ? on_token : NULL, &ctx,
                                 &stats);
  }
  if (ctx.pending != NULL) {
    /* The callback's JNI-level failure wins over the status (the C side stopped because of it). */
    (*env)->Throw(env, ctx.pending);
    goto done;
  }
  if (check(env, st)) goto done;
  {
    jdouble v[6] = {(jdouble)stats.prompt_tokens, (jdouble)stats.new_tokens, stats.prefill_s,
                    stats.decode_s, stats.time_to_first_token_s, (jdouble)stats.stop_reason};
    (*env)->SetDoubleArrayRegion(env, stats_out, 0, 6, v);
  }
done:
  for (jsize i = 0; i < n_stops; ++i) free(stops[i]);
  free(stops);
  free(text);
  free(ids);
}

/* ---- constrained decoding ----------------------------------------------------------------- */

JNIEXPORT jlong JNICALL JNI_FN(constraintCompile)(JNIEnv* env, jclass cls, jint kind,
                                                  jbyteArray source, jobjectArray choices) {
  (void)cls;
  edgellm_constraint* c = NULL;
  int ok = 1;
  jsize n = choices != NULL ? (*env)->GetArrayLength(env, choices) : 0;
  char** strs = (char**)calloc((size_t)n + 1, sizeof(char*));
  char* src = NULL;
  if (strs == NULL) {
    throw_oom(env, "edgellm: constraint");
    return 0;
  }
  for (jsize i = 0; i < n && ok; ++i) {
    jbyteArray b = (jbyteArray)(*env)->GetObjectArrayElement(env, choices, i);
    strs[i] = c_string(env, b, &ok);
    if (b != NULL) (*env)->DeleteLocalRef(env, b);
  }
  if (ok) src = c_string(env, source, &ok);
  if (ok && check(env, edgellm_constraint_compile((edgellm_constraint_kind)kind, src,
                                                  choices != NULL ? (const char* const*)strs : NULL,
                                                  (size_t)n, &c))) {
    c = NULL; /* the header promises NULL on failure */
  }
  for (jsize i = 0; i < n; ++i) free(strs[i]);
  free(strs);
  free(src);
  return (jlong)(intptr_t)c;
}

JNIEXPORT void JNICALL JNI_FN(constraintFree)(JNIEnv* env, jclass cls, jlong constraint) {
  (void)env;
  (void)cls;
  edgellm_constraint_free((edgellm_constraint*)(intptr_t)constraint);
}

JNIEXPORT void JNICALL JNI_FN(sessionSetConstraint)(JNIEnv* env, jclass cls, jlong session,
                                                    jlong constraint) {
  (void)cls;
  check(env, edgellm_session_set_constraint((edgellm_session*)(intptr_t)session,
                                            (const edgellm_constraint*)(intptr_t)constraint));
}

JNIEXPORT void JNICALL JNI_FN(sessionConstraintResult)(JNIEnv* env, jclass cls, jlong session,
                                                       jintArray out) {
  (void)cls;
  int32_t complete = 0, forced = 0;
  if (check(env, edgellm_session_constraint_result((const edgellm_session*)(intptr_t)session,
                                                   &complete, &forced)))
    return;
  {
    jint v[2] = {complete, forced};
    (*env)->SetIntArrayRegion(env, out, 0, 2, v);
  }
}

/* ---- prompt cache ----------------------------------------------------------------------- */

JNIEXPORT void JNICALL JNI_FN(savePromptCache)(JNIEnv* env, jclass cls, jlong session,
                                               jbyteArray path) {
  (void)cls;
  int ok = 1;
  char* p = c_string(env, path, &ok);
  if (ok) check(env, edgellm_session_save_prompt_cache((const edgellm_session*)(intptr_t)session, p));
  free(p);
}

JNIEXPORT jlong JNICALL JNI_FN(loadPromptCache)(JNIEnv* env, jclass cls, jlong session,
                                                jbyteArray path) {
  (void)cls;
  int ok = 1;
  size_t n = 0;
  char* p = c_string(env, path, &ok);
  if (ok) check(env, edgellm_session_load_prompt_cache((edgellm_session*)(intptr_t)session, p, &n));
  free(p);
  return (jlong)n;
}

/* ---- memory plan ------------------------------------------------------------------------ */

/* out: the plan's 7 figures, then the chosen kv_type and context_size; out_strings: the chosen
 * lm_head and the note, as UTF-8 bytes. */
JNIEXPORT void JNICALL JNI_FN(fitBudget)(JNIEnv* env, jclass cls, jbyteArray dir, jlong budget,
                                         jlongArray ml, jobjectArray mstrings, jlongArray sl,
                                         jfloatArray sampf, jlongArray sampl, jlongArray out,
                                         jobjectArray out_strings) {
  (void)cls;
  edgellm_model_options mo;
  edgellm_session_options so;
  edgellm_memory_plan p;
  char note[1024];
  char* strs[3] = {NULL, NULL, NULL};
  int ok = 1;
  char* d = c_string(env, dir, &ok);
  if (ok && model_options(env, ml, mstrings, &mo, strs) &&
      session_options(env, sl, sampf, sampl, &so) &&
      !check(env, edgellm_fit_budget(d, (uint64_t)budget, &mo, &so, &p, note, sizeof note))) {
    jlong v[9] = {(jlong)p.weights_mapped_bytes, (jlong)p.weights_resident_bytes,
                  (jlong)p.kv_cache_bytes, (jlong)p.scratch_bytes, (jlong)p.load_peak_bytes,
                  (jlong)p.peak_bytes, (jlong)p.context_size, (jlong)so.kv_type,
                  (jlong)so.context_size};
    (*env)->SetLongArrayRegion(env, out, 0, 9, v);
    const char* texts[2] = {mo.lm_head, note};
    for (int i = 0; i < 2; ++i) {
      jbyteArray b = new_bytes(env, texts[i], strlen(texts[i]));
      if (b == NULL) break;
      (*env)->SetObjectArrayElement(env, out_strings, i, b);
      (*env)->DeleteLocalRef(env, b);
    }
  }
  free(strs[0]);
  free(strs[1]);
  free(strs[2]);
  free(d);
}

JNIEXPORT void JNICALL JNI_FN(plan)(JNIEnv* env, jclass cls, jbyteArray dir, jlongArray ml,
                                    jobjectArray mstrings, jlongArray sl, jfloatArray sampf,
                                    jlongArray sampl, jlongArray out) {
  (void)cls;
  edgellm_model_options mo;
  edgellm_session_options so;
  edgellm_memory_plan p;
  char* strs[3] = {NULL, NULL, NULL};
  int ok = 1;
  char* d = c_string(env, dir, &ok);
  if (ok && model_options(env, ml, mstrings, &mo, strs) &&
      session_options(env, sl, sampf, sampl, &so) &&
      !check(env, edgellm_plan(d, &mo, &so, &p))) {
    jlong v[7] = {(jlong)p.weights_mapped_bytes, (jlong)p.weights_resident_bytes,
                  (jlong)p.kv_cache_bytes, (jlong)p.scratch_bytes, (jlong)p.load_peak_bytes,
                  (jlong)p.peak_bytes, (jlong)p.context_size};
    (*env)->SetLongArrayRegion(env, out, 0, 7, v);
  }
  free(strs[0]);
  free(strs[1]);
  free(strs[2]);
  free(d);
}

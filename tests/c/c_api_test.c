/* SPDX-License-Identifier: Apache-2.0 */
/* The C API from C99, as an app sees it: every entry point, every error path (NULL handles and
 * pointers, bad options and enums, missing files, small output buffers, token ids out of range),
 * last_error naming the argument, cancellation from the callback, the prompt cache, speculative
 * decoding, constrained decoding (JSON Schema, choices, regex, GBNF), and two sessions over one
 * model on two threads. On the bundled model
 * (models/kjv-target-awq); the C output equals the C++ Session's in ctest c_api.greedy_equals_cpp. */
#define _POSIX_C_SOURCE 200809L

#include <edgellm/c/edgellm.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef EDGELLM_SOURCE_DIR
#define EDGELLM_SOURCE_DIR "."
#endif

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    ++g_checks;                                                              \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                          \
    }                                                                        \
  } while (0)

/* The call returns `want`; on failure, the last error is non-empty and contains `needle`. */
#define CHECK_STATUS(expr, want, needle) check_status(__FILE__, __LINE__, #expr, (expr), (want), (needle))

static void check_status(const char* file, int line, const char* expr, edgellm_status got,
                         edgellm_status want, const char* needle) {
  const char* msg = edgellm_last_error();
  ++g_checks;
  if (getenv("EDGELLM_C_API_TEST_VERBOSE") != NULL && got != EDGELLM_OK)
    printf("%s:%d: %s -> %s: %s\n", file, line, expr, edgellm_status_string(got), msg);
  if (got != want) {
    fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s); last error: %s\n", file, line, expr,
            (int)got, edgellm_status_string(got), (int)want, edgellm_status_string(want), msg);
    ++g_failures;
    return;
  }
  if (want != EDGELLM_OK && (msg == NULL || msg[0] == '\0' || (needle && !strstr(msg, needle)))) {
    fprintf(stderr, "%s:%d: %s: last error '%s' does not name '%s'\n", file, line, expr,
            msg ? msg : "(null)", needle ? needle : "");
    ++g_failures;
  }
}

#define REQUIRE_OK(expr)                                                                    \
  do {                                                                                      \
    edgellm_status st_ = (expr);                                                            \
    if (st_ != EDGELLM_OK) {                                                                \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr,              \
              edgellm_status_string(st_), edgellm_last_error());                            \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static char g_target[4096], g_draft[4096];

/* Tokens per generation: fewer at EDGELLM_TEST_SCALE=small (sanitizers, emulation). */
static uint32_t g_tokens = 24;

static void model_paths(void) {
  const char* root = getenv("EDGELLM_SOURCE_DIR");
  if (root == NULL || root[0] == '\0') root = EDGELLM_SOURCE_DIR;
  snprintf(g_target, sizeof g_target, "%s/models/kjv-target-awq", root);
  snprintf(g_draft, sizeof g_draft, "%s/models/kjv-draft-awq", root);
  {
    const char* scale = getenv("EDGELLM_TEST_SCALE");
    if (scale != NULL && strcmp(scale, "small") == 0) g_tokens = 8;
  }
}

/* ---- what the token callback collects ---------------------------------------------------- */

typedef struct {
  char text[8192];
  size_t len;
  int calls;
  int stop_after; /* > 0: return 0 on this call */
  int32_t last_token;
} Collect;

static int32_t collect(const char* text, size_t text_len, int32_t token, void* user_data) {
  Collect* c = (Collect*)user_data;
  size_t n = text_len;
  if (n > sizeof c->text - 1 - c->len) n = sizeof c->text - 1 - c->len;
  memcpy(c->text + c->len, text, n);
  c->len += n;
  c->text[c->len] = '\0';
  c->last_token = token;
  ++c->calls;
  return c->stop_after > 0 && c->calls >= c->stop_after ? 0 : 1;
}

static edgellm_session_options greedy_options(void) {
  edgellm_session_options o = edgellm_session_options_default();
  o.sampling = edgellm_sampling_greedy();
  o.context_size = 256;
  return o;
}

static edgellm_generate_options n_tokens(uint32_t n) {
  edgellm_generate_options g = edgellm_generate_options_default();
  g.max_new_tokens = n;
  g.ignore_eos = 1;
  return g;
}

/* Greedy text of `n` tokens after `prompt` in a fresh session over `model`. */
static void greedy_text(const edgellm_model* model, const edgellm_session_options* so,
                        const char* prompt, uint32_t n, Collect* out) {
  edgellm_session* s = NULL;
  edgellm_generate_options g = n_tokens(n);
  edgellm_generation_stats stats;
  memset(out, 0, sizeof *out);
  REQUIRE_OK(edgellm_session_create(model, so, &s));
  REQUIRE_OK(edgellm_generate(s, prompt, &g, collect, out, &stats));
  CHECK(stats.new_tokens == n);
  CHECK(stats.stop_reason == EDGELLM_STOP_MAX_TOKENS);
  edgellm_session_free(s);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_version_and_status(void) {
  const char* v = edgellm_version();
  const char* info = edgellm_build_info();
  int major = -1, minor = -1, patch = -1;
  edgellm_status s;
  CHECK(v != NULL && sscanf(v, "%d.%d.%d", &major, &minor, &patch) == 3);
  CHECK(major >= 0 && minor >= 0 && patch >= 0);
  CHECK(info != NULL && strstr(info, v) != NULL);
  CHECK(strstr(info, "git ") != NULL && strstr(info, "arch ") != NULL);
  CHECK(strstr(info, "int4 ") != NULL);
  printf("build info: %s\n", info);
  for (s = EDGELLM_OK; s <= EDGELLM_ERR_BUSY; s = (edgellm_status)(s + 1)) {
    const char* name = edgellm_status_string(s);
    CHECK(name != NULL && name[0] != '\0' && strcmp(name, "unknown status") != 0);
  }
  CHECK(strcmp(edgellm_status_string(EDGELLM_OK), "ok") == 0);
  CHECK(strcmp(edgellm_status_string(EDGELLM_ERR_BUSY), "session busy") == 0);
  CHECK(strcmp(edgellm_status_string((edgellm_status)42), "unknown status") == 0);
}

static void test_model_load_errors(void) {
  edgellm_model* m = (edgellm_model*)&g_failures; /* any non-NULL: a failed load sets NULL */
  edgellm_model_options o = edgellm_model_options_default();
  CHECK(o.threads == 1 && o.backend == NULL && o.load_tokenizer == 1 && o.memory_budget_bytes == 0);

  CHECK_STATUS(edgellm_model_load(g_target, NULL, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "out_model");
  CHECK_STATUS(edgellm_model_load(NULL, NULL, &m), EDGELLM_ERR_INVALID_ARGUMENT, "model_dir");
  CHECK(m == NULL);
  CHECK_STATUS(edgellm_model_load("", NULL, &m), EDGELLM_ERR_INVALID_ARGUMENT, "model_dir");
  CHECK_STATUS(edgellm_model_load("/nonexistent/edgellm-model", NULL, &m), EDGELLM_ERR_IO,
               "/nonexistent/edgellm-model");
  CHECK(m == NULL);
  /* A directory that is not a checkpoint: the loader names what is missing. */
  CHECK(edgellm_model_load(EDGELLM_SOURCE_DIR "/include", NULL, &m) != EDGELLM_OK);
  CHECK(m == NULL && edgellm_last_error()[0] != '\0');

  o.backend = "vulkan";
  CHECK_STATUS(edgellm_model_load(g_target, &o, &m), EDGELLM_ERR_UNSUPPORTED, "vulkan");
  o.backend = "cpu";
  o.lm_head = "int3";
  CHECK_STATUS(edgellm_model_load(g_target, &o, &m), EDGELLM_ERR_INVALID_ARGUMENT, "lm_head");
  o.lm_head = NULL;
  o.threads = -2;
  CHECK_STATUS(edgellm_model_load(g_target, &o, &m), EDGELLM_ERR_INVALID_ARGUMENT, "threads");
  o.threads = 1;
  o.memory_budget_bytes = 1u << 30; /* ample for the bundled model: it loads */
  CHECK_STATUS(edgellm_model_load(g_target, &o, &m), EDGELLM_OK, NULL);
  CHECK(m != NULL);
  edgellm_model_free(m);
  m = NULL;
  o.memory_budget_bytes = 1024; /* refused before loading, naming the budget */
  CHECK_STATUS(edgellm_model_load(g_target, &o, &m), EDGELLM_ERR_OUT_OF_MEMORY,
               "memory_budget_bytes");
  CHECK(m == NULL);
}

static void test_model_facts(const edgellm_model* model) {
  CHECK(edgellm_model_vocab_size(model) > 0);
  CHECK(edgellm_model_max_context(model) > 0);
  CHECK(edgellm_model_vocab_size(NULL) == 0);
  CHECK(edgellm_model_max_context(NULL) == 0);
  edgellm_model_free(NULL);
  edgellm_session_free(NULL);
}

static void test_tokenizer(const edgellm_model* model) {
  const char* text = "And God said";
  int32_t ids[16] = {0};
  int32_t bad[3];
  size_t count = 99, len = 99;
  char out[64];
  const size_t vocab = edgellm_model_vocab_size(model);

  /* Asking for the size first: capacity 0 reports the count with CAPACITY. */
  CHECK_STATUS(edgellm_tokenize(model, text, strlen(text), 1, 0, NULL, 0, &count),
               EDGELLM_ERR_CAPACITY, "out_ids");
  CHECK(count == 3);
  count = 0;
  CHECK_STATUS(edgellm_tokenize(model, text, strlen(text), 1, 0, ids, 2, &count),
               EDGELLM_ERR_CAPACITY, "capacity 2");
  CHECK(count == 3);
  CHECK_STATUS(edgellm_tokenize(model, text, strlen(text), 1, 0, ids, 16, &count), EDGELLM_OK, NULL);
  CHECK(count == 3 && ids[0] == 296 && ids[1] == 389 && ids[2] == 385); /* tests/data/bundled */
  CHECK_STATUS(edgellm_tokenize(model, NULL, 0, 1, 0, ids, 16, &count), EDGELLM_OK, NULL);
  CHECK(count == 0);
  CHECK_STATUS(edgellm_tokenize(NULL, text, 3, 1, 0, ids, 16, &count), EDGELLM_ERR_INVALID_ARGUMENT, "model");
  CHECK_STATUS(edgellm_tokenize(model, NULL, 3, 1, 0, ids, 16, &count), EDGELLM_ERR_INVALID_ARGUMENT, "text");
  CHECK_STATUS(edgellm_tokenize(model, text, 3, 1, 0, NULL, 16, &count), EDGELLM_ERR_INVALID_ARGUMENT, "out_ids");
  CHECK_STATUS(edgellm_tokenize(model, text, 3, 1, 0, ids, 16, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "out_count");
  CHECK_STATUS(edgellm_tokenize(model, "\xff\xfe", 2, 1, 0, ids, 16, &count),
               EDGELLM_ERR_INVALID_ARGUMENT, "UTF-8");

  /* Detokenize back; a small buffer reports the length and keeps a NUL-terminated prefix. */
  CHECK_STATUS(edgellm_detokenize(model, ids, 0, 0, out, sizeof out, &len), EDGELLM_OK, NULL);
  CHECK(len == 0 && out[0] == '\0');
  edgellm_tokenize(model, text, strlen(text), 1, 0, ids, 16, &count);
  CHECK_STATUS(edgellm_detokenize(model, ids, count, 1, out, sizeof out, &len), EDGELLM_OK, NULL);
  CHECK(len == strlen(text) && strcmp(out, text) == 0);
  CHECK_STATUS(edgellm_detokenize(model, ids, count, 1, out, 5, &len), EDGELLM_ERR_CAPACITY, "out");
  CHECK(len == strlen(text) && strcmp(out, "And ") == 0);
  CHECK_STATUS(edgellm_detokenize(model, ids, count, 1, NULL, 0, &len), EDGELLM_ERR_CAPACITY, "capacity 0");
  CHECK(len == strlen(text));
  CHECK_STATUS(edgellm_detokenize(model, ids, count, 1, out, 13, &len), EDGELLM_OK, NULL);
  CHECK_STATUS(edgellm_detokenize(NULL, ids, count, 1, out, 64, &len), EDGELLM_ERR_INVALID_ARGUMENT, "model");
  CHECK_STATUS(edgellm_detokenize(model, NULL, 1, 1, out, 64, &len), EDGELLM_ERR_INVALID_ARGUMENT, "ids");
  CHECK_STATUS(edgellm_detokenize(model, ids, count, 1, NULL, 64, &len), EDGELLM_ERR_INVALID_ARGUMENT, "out");
  CHECK_STATUS(edgellm_detokenize(model, ids, count, 1, out, 64, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "out_len");
  bad[0] = 296;
  bad[1] = (int32_t)vocab;
  bad[2] = 385;
  CHECK_STATUS(edgellm_detokenize(model, bad, 3, 1, out, 64, &len), EDGELLM_ERR_OUT_OF_RANGE, "ids[1]");
  bad[1] = -1;
  CHECK_STATUS(edgellm_detokenize(model, bad, 3, 1, out, 64, &len), EDGELLM_ERR_OUT_OF_RANGE, "ids[1]");
}

static void test_session_errors(const edgellm_model* model, const edgellm_model* draft) {
  edgellm_session* s = (edgellm_session*)&g_failures;
  edgellm_session_options o = edgellm_session_options_default();
  edgellm_sampling d = edgellm_sampling_default();
  CHECK(o.kv_type == EDGELLM_KV_INT8 && o.context_size == 0 && o.draft == NULL);
  CHECK(d.temperature > 0.0f && d.top_k == 40 && d.top_p > 0.9f && d.repetition_penalty == 1.0f);
  CHECK(edgellm_sampling_greedy().temperature == 0.0f);

  CHECK_STATUS(edgellm_session_create(NULL, NULL, &s), EDGELLM_ERR_INVALID_ARGUMENT, "model");
  CHECK(s == NULL);
  CHECK_STATUS(edgellm_session_create(model, NULL, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "out_session");
  o.kv_type = (edgellm_kv_type)7;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "kv_type");
  o = edgellm_session_options_default();
  o.sampling.top_p = 2.0f;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "top_p");
  o = edgellm_session_options_default();
  o.sampling.top_k = -1;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "top_k");
  o = edgellm_session_options_default();
  o.sampling.temperature = -1.0f;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "temperature");
  o = edgellm_session_options_default();
  o.sampling.penalty_last_n = -3;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "penalty_last_n");
  o = edgellm_session_options_default();
  o.draft = draft;
  o.prompt_lookup = 1;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "prompt_lookup");
  o = edgellm_session_options_default();
  o.prompt_lookup = 1;
  o.draft_tokens = 1000;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT, "draft_tokens");
  o = edgellm_session_options_default();
  o.context_size = 1u << 30; /* far past what the model's positions allow */
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT,
               "max_position_embeddings");
  CHECK(s == NULL);
  /* Above max_position_embeddings (2048): refused, naming both; the limit itself is fine. */
  CHECK(edgellm_model_max_context(model) == 2048);
  o.context_size = 100000;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT,
               "options->context_size: 100000 is above the model's max_position_embeddings 2048");
  CHECK(s == NULL);
  o.context_size = 2049;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_ERR_INVALID_ARGUMENT,
               "context_size: 2049");
  o.context_size = 2048;
  CHECK_STATUS(edgellm_session_create(model, &o, &s), EDGELLM_OK, NULL);
  CHECK(s != NULL && edgellm_session_context_size(s) == 2048);
  edgellm_session_free(s);
  s = NULL;

  CHECK_STATUS(edgellm_session_reset(NULL), EDGELLM_ERR_INVALID_ARGUMENT, "session");
  CHECK_STATUS(edgellm_session_set_sampling(NULL, &d), EDGELLM_ERR_INVALID_ARGUMENT, "session");
  CHECK(edgellm_session_position(NULL) == 0 && edgellm_session_context_size(NULL) == 0);
}

static void test_generate_errors(const edgellm_model* model) {
  edgellm_session_options so = greedy_options();
  edgellm_session* s = NULL;
  edgellm_generate_options g = n_tokens(4);
  edgellm_generation_stats stats;
  const char* stops[2] = {"x", NULL};
  int32_t ids[3] = {296, 389, 385};
  edgellm_sampling bad = edgellm_sampling_greedy();
  size_t n = 99;

  REQUIRE_OK(edgellm_session_create(model, &so, &s));
  CHECK(edgellm_session_context_size(s) == 256 && edgellm_session_position(s) == 0);
  CHECK_STATUS(edgellm_generate(NULL, "And", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "session");
  CHECK_STATUS(edgellm_generate(s, NULL, &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "prompt");
  CHECK_STATUS(edgellm_generate(s, "", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "prompt");
  g.max_new_tokens = 0;
  CHECK_STATUS(edgellm_generate(s, "And", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "max_new_tokens");
  CHECK(stats.new_tokens == 0 && stats.prompt_tokens == 0);
  g = n_tokens(4);
  g.n_stop_strings = 1;
  CHECK_STATUS(edgellm_generate(s, "And", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "stop_strings");
  g.stop_strings = stops;
  g.n_stop_strings = 2;
  CHECK_STATUS(edgellm_generate(s, "And", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "stop_strings[1]");
  stops[1] = "";
  CHECK_STATUS(edgellm_generate(s, "And", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "stop_strings[1]");
  g = n_tokens(4);
  CHECK_STATUS(edgellm_generate_tokens(s, NULL, 3, &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "prompt_ids");
  CHECK_STATUS(edgellm_generate_tokens(s, ids, 0, &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT, "n_ids");
  ids[1] = (int32_t)edgellm_model_vocab_size(model);
  CHECK_STATUS(edgellm_generate_tokens(s, ids, 3, &g, NULL, NULL, &stats), EDGELLM_ERR_OUT_OF_RANGE, "prompt_ids[1]");
  ids[1] = -5;
  CHECK_STATUS(edgellm_generate_tokens(s, ids, 3, &g, NULL, NULL, &stats), EDGELLM_ERR_OUT_OF_RANGE, "prompt_ids[1]");
  CHECK(edgellm_session_position(s) == 0);

  /* The prompt cache needs a generate() first; bad paths and files are named. */
  CHECK_STATUS(edgellm_session_save_prompt_cache(s, "/tmp/never-written.bin"), EDGELLM_ERR_INVALID_ARGUMENT, "generate");
  CHECK_STATUS(edgellm_session_save_prompt_cache(NULL, "/tmp/x"), EDGELLM_ERR_INVALID_ARGUMENT, "session");
  CHECK_STATUS(edgellm_session_save_prompt_cache(s, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "path");
  CHECK_STATUS(edgellm_session_load_prompt_cache(NULL, "/tmp/x", &n), EDGELLM_ERR_INVALID_ARGUMENT, "session");
  CHECK_STATUS(edgellm_session_load_prompt_cache(s, NULL, &n), EDGELLM_ERR_INVALID_ARGUMENT, "path");
  CHECK_STATUS(edgellm_session_load_prompt_cache(s, "", &n), EDGELLM_ERR_INVALID_ARGUMENT, "path");
  CHECK(edgellm_session_load_prompt_cache(s, "/nonexistent/edgellm.cache", &n) != EDGELLM_OK);
  CHECK(n == 0 && strstr(edgellm_last_error(), "/nonexistent/edgellm.cache") != NULL);

  /* Sampling: checked like at creation. */
  CHECK_STATUS(edgellm_session_set_sampling(s, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "sampling");
  bad.min_p = 1.5f;
  CHECK_STATUS(edgellm_session_set_sampling(s, &bad), EDGELLM_ERR_INVALID_ARGUMENT, "min_p");
  bad = edgellm_sampling_greedy();
  bad.repetition_penalty = 0.0f;
  CHECK_STATUS(edgellm_session_set_sampling(s, &bad), EDGELLM_ERR_INVALID_ARGUMENT, "repetition_penalty");
  edgellm_session_free(s);

  /* A prompt longer than the context is refused; one that fills it stops with CONTEXT_FULL. */
  so.context_size = 8;
  REQUIRE_OK(edgellm_session_create(model, &so, &s));
  CHECK(edgellm_generate(s, "In the beginning God created the heaven and the earth.", &g, NULL, NULL,
                         &stats) != EDGELLM_OK);
  CHECK(edgellm_last_error()[0] != '\0');
  g = n_tokens(100);
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, NULL, NULL, &stats), EDGELLM_OK, NULL);
  CHECK(stats.stop_reason == EDGELLM_STOP_CONTEXT_FULL);
  CHECK(stats.new_tokens > 0 && stats.new_tokens < 8);
  edgellm_session_free(s);
}

static void test_generate(const edgellm_model* model) {
  edgellm_session_options so = greedy_options();
  edgellm_session* s = NULL;
  edgellm_generate_options g = n_tokens(g_tokens);
  edgellm_generation_stats stats;
  Collect a, b;
  const char* stops[1] = {","};

  REQUIRE_OK(edgellm_session_create(model, &so, &s));
  memset(&a, 0, sizeof a);
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &a, &stats), EDGELLM_OK, NULL);
  CHECK(stats.prompt_tokens == 3 && stats.new_tokens == g_tokens);
  CHECK(stats.stop_reason == EDGELLM_STOP_MAX_TOKENS);
  CHECK(stats.time_to_first_token_s > 0.0 && stats.prefill_s > 0.0 && stats.decode_s >= 0.0);
  CHECK(a.len > 0 && a.calls > 0 && a.last_token >= 0);
  CHECK(edgellm_session_position(s) > 3 && edgellm_session_position(s) <= 3 + g_tokens);
  printf("greedy: And God said%s\n", a.text);

  /* Same prompt again (the cache keeps the common prefix): the same text. NULL callback/stats. */
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, NULL, NULL, NULL), EDGELLM_OK, NULL);
  memset(&b, 0, sizeof b);
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &b, NULL), EDGELLM_OK, NULL);
  CHECK(strcmp(a.text, b.text) == 0);
  /* After reset, and in a fresh session, and through token ids: the same text. */
  CHECK_STATUS(edgellm_session_reset(s), EDGELLM_OK, NULL);
  CHECK(edgellm_session_position(s) == 0);
  memset(&b, 0, sizeof b);
  {
    const int32_t ids[3] = {296, 389, 385};
    CHECK_STATUS(edgellm_generate_tokens(s, ids, 3, &g, collect, &b, &stats), EDGELLM_OK, NULL);
    CHECK(strcmp(a.text, b.text) == 0 && stats.new_tokens == g_tokens);
  }
  greedy_text(model, &so, "And God said", g_tokens, &b);
  CHECK(strcmp(a.text, b.text) == 0);
  /* Each KV type generates (int8 and f16 KV may pick other tokens than f32: no comparison). */
  so.kv_type = EDGELLM_KV_F16;
  greedy_text(model, &so, "And God said", 8, &b);
  so.kv_type = EDGELLM_KV_F32;
  greedy_text(model, &so, "And God said", 8, &b);
  so.kv_type = EDGELLM_KV_INT4;
  greedy_text(model, &so, "And God said", 8, &b);
  so.kv_type = EDGELLM_KV_INT8;

  /* Cancel: the callback returns 0 on its first call; generation stops at that token, and the
   * session generates again afterwards. */
  memset(&b, 0, sizeof b);
  b.stop_after = 1;
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &b, &stats), EDGELLM_OK, NULL);
  CHECK(stats.stop_reason == EDGELLM_STOP_CALLBACK);
  CHECK(stats.new_tokens == 1 && b.calls == 1);
  memset(&b, 0, sizeof b);
  g.max_new_tokens = 4;
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &b, &stats), EDGELLM_OK, NULL);
  CHECK(stats.stop_reason == EDGELLM_STOP_MAX_TOKENS && stats.new_tokens == 4);
  CHECK(strncmp(a.text, b.text, b.len) == 0);

  /* A stop string: generation ends before it (the first greedy token is ","). */
  memset(&b, 0, sizeof b);
  g = n_tokens(g_tokens);
  g.stop_strings = stops;
  g.n_stop_strings = 1;
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &b, &stats), EDGELLM_OK, NULL);
  CHECK(stats.stop_reason == EDGELLM_STOP_STRING && strchr(b.text, ',') == NULL);

  /* Sampling with a seed: after set_sampling, the same seed gives the same text. */
  {
    edgellm_sampling sm = edgellm_sampling_default();
    Collect c1, c2;
    sm.seed = 7;
    g = n_tokens(16);
    memset(&c1, 0, sizeof c1);
    memset(&c2, 0, sizeof c2);
    CHECK_STATUS(edgellm_session_set_sampling(s, &sm), EDGELLM_OK, NULL);
    CHECK_STATUS(edgellm_generate(s, "In the beginning", &g, collect, &c1, NULL), EDGELLM_OK, NULL);
    CHECK_STATUS(edgellm_session_set_sampling(s, &sm), EDGELLM_OK, NULL);
    CHECK_STATUS(edgellm_generate(s, "In the beginning", &g, collect, &c2, NULL), EDGELLM_OK, NULL);
    CHECK(c1.len > 0 && strcmp(c1.text, c2.text) == 0);
  }
  edgellm_session_free(s);
}

/* ---- constrained decoding ------------------------------------------------------------------ */

static const char* const kPersonSchema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static void test_constraint_compile(void) {
  edgellm_constraint* c = (edgellm_constraint*)&g_checks; /* must be set to NULL on failure */
  const char* choices[3] = {"yes", "no", NULL};
  /* Arguments. */
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON, NULL, NULL, 0, NULL),
               EDGELLM_ERR_INVALID_ARGUMENT, "out: NULL");
  CHECK_STATUS(edgellm_constraint_compile((edgellm_constraint_kind)42, NULL, NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "kind: 42 is not an edgellm_constraint_kind");
  CHECK(c == NULL);
  c = (edgellm_constraint*)&g_checks;
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON_SCHEMA, NULL, NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: NULL (EDGELLM_CONSTRAINT_JSON_SCHEMA");
  CHECK(c == NULL);
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_GRAMMAR, NULL, NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: NULL (EDGELLM_CONSTRAINT_GRAMMAR");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_REGEX, "", NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: empty");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON, "{}", NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: not NULL, but EDGELLM_CONSTRAINT_JSON takes no source");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON_OBJECT, NULL, choices, 2, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "choices: only for EDGELLM_CONSTRAINT_CHOICES");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_CHOICES, NULL, NULL, 2, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "choices: NULL with n_choices = 2");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_CHOICES, NULL, choices, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "n_choices: 0");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_CHOICES, NULL, choices, 3, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "choices[2]: NULL");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_CHOICES, "yes", choices, 2, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: not NULL");
  CHECK(c == NULL);
  /* What the compiler refuses is named: the schema keyword and its JSON pointer, the grammar's
   * position, the pattern's offset. */
  CHECK_STATUS(edgellm_constraint_compile(
                   EDGELLM_CONSTRAINT_JSON_SCHEMA,
                   "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"strnig\"}}}", NULL, 0, &c),
               EDGELLM_ERR_UNSUPPORTED, "source: ");
  CHECK(strstr(edgellm_last_error(), "\"type\"") != NULL &&
        strstr(edgellm_last_error(), "#/properties/a") != NULL);
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON_SCHEMA,
                                          "{\"type\":\"object\",\"not\":{}}", NULL, 0, &c),
               EDGELLM_ERR_UNSUPPORTED, "unsupported keyword \"not\"");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON_SCHEMA, "{\"type\":", NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: ");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_GRAMMAR, "root ::= \"a\" | (", NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: ");
  CHECK(strstr(edgellm_last_error(), "[edgellm_constraint_compile]") == edgellm_last_error());
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_GRAMMAR, "item ::= \"a\"\n", NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "root");
  CHECK_STATUS(edgellm_constraint_compile(EDGELLM_CONSTRAINT_REGEX, "[a-", NULL, 0, &c),
               EDGELLM_ERR_INVALID_ARGUMENT, "source: ");
  CHECK(c == NULL);
  /* Each kind compiles. */
  {
    const edgellm_constraint_kind kinds[6] = {EDGELLM_CONSTRAINT_JSON, EDGELLM_CONSTRAINT_JSON_OBJECT,
                                              EDGELLM_CONSTRAINT_JSON_SCHEMA, EDGELLM_CONSTRAINT_GRAMMAR,
                                              EDGELLM_CONSTRAINT_REGEX, EDGELLM_CONSTRAINT_CHOICES};
    const char* sources[6] = {NULL, NULL, NULL, "root ::= \"In the \" (\"beginning\" | \"end\")\n",
                              "[0-9]{3}", NULL};
    int i;
    sources[2] = kPersonSchema;
    for (i = 0; i < 6; ++i) {
      c = NULL;
      CHECK_STATUS(edgellm_constraint_compile(kinds[i], sources[i], i == 5 ? choices : NULL,
                                              i == 5 ? 2 : 0, &c),
                   EDGELLM_OK, NULL);
      CHECK(c != NULL);
      edgellm_constraint_free(c);
    }
  }
  edgellm_constraint_free(NULL);
}

/* Whether `text` (JSON, which may have whitespace around it) is an object: '{' first and '}' last
 * once the whitespace is left out. */
static int is_object_text(const char* text) {
  size_t b = strspn(text, " \t\r\n"), e = strlen(text);
  while (e > b && strchr(" \t\r\n", text[e - 1]) != NULL) --e;
  return e - b >= 2 && text[b] == '{' && text[e - 1] == '}';
}

/* One constrained greedy generation of at most `n` tokens after `prompt` on `s`; the text in
 * `out`, the result in *complete / *forced. */
static edgellm_status constrained(edgellm_session* s, const char* prompt, uint32_t n, Collect* out,
                                  edgellm_generation_stats* stats, int32_t* complete,
                                  int32_t* forced) {
  edgellm_generate_options g = edgellm_generate_options_default();
  edgellm_status st;
  g.max_new_tokens = n;
  memset(out, 0, sizeof *out);
  st = edgellm_generate(s, prompt, &g, collect, out, stats);
  if (st != EDGELLM_OK) return st;
  return edgellm_session_constraint_result(s, complete, forced);
}

static void test_constraint(const edgellm_model* model) {
  edgellm_session_options so = greedy_options();
  edgellm_session *s = NULL, *s2 = NULL;
  edgellm_constraint *schema = NULL, *pick = NULL, *pattern = NULL, *gbnf = NULL;
  edgellm_generate_options g = n_tokens(g_tokens);
  edgellm_generation_stats stats;
  const char* choices[3] = {"light", "darkness", "the waters"};
  int32_t complete = -1, forced = -1;
  Collect out, plain, other;

  REQUIRE_OK(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON_SCHEMA, kPersonSchema, NULL, 0, &schema));
  REQUIRE_OK(edgellm_constraint_compile(EDGELLM_CONSTRAINT_CHOICES, NULL, choices, 3, &pick));
  REQUIRE_OK(edgellm_constraint_compile(EDGELLM_CONSTRAINT_REGEX, "[0-9]{3}", NULL, 0, &pattern));
  REQUIRE_OK(edgellm_constraint_compile(EDGELLM_CONSTRAINT_GRAMMAR,
                                        "root ::= \"In the \" (\"beginning\" | \"end\")\n", NULL, 0,
                                        &gbnf));
  REQUIRE_OK(edgellm_session_create(model, &so, &s));

  /* Arguments and state. */
  CHECK_STATUS(edgellm_session_set_constraint(NULL, schema), EDGELLM_ERR_INVALID_ARGUMENT, "session: NULL");
  CHECK_STATUS(edgellm_session_constraint_result(NULL, &complete, &forced), EDGELLM_ERR_INVALID_ARGUMENT,
               "session: NULL");
  CHECK(complete == 0 && forced == 0);
  complete = forced = -1;
  CHECK_STATUS(edgellm_session_constraint_result(s, &complete, &forced), EDGELLM_ERR_INVALID_ARGUMENT,
               "not constrained");
  CHECK(complete == 0 && forced == 0);
  CHECK_STATUS(edgellm_session_set_constraint(s, NULL), EDGELLM_OK, NULL); /* already none */

  /* A JSON Schema: the output is a whole object with both properties. */
  CHECK_STATUS(edgellm_session_set_constraint(s, schema), EDGELLM_OK, NULL);
  CHECK_STATUS(constrained(s, "And God said", 48, &out, &stats, &complete, &forced), EDGELLM_OK, NULL);
  printf("json schema (%u tokens, stop %d, complete %d, forced %d): %s\n", (unsigned)stats.new_tokens,
         (int)stats.stop_reason, (int)complete, (int)forced, out.text);
  CHECK(complete == 1 && stats.stop_reason == EDGELLM_STOP_EOS && stats.new_tokens <= 48);
  CHECK(is_object_text(out.text));
  CHECK(strstr(out.text, "\"name\"") != NULL && strstr(out.text, "\"age\"") != NULL);
  /* The constraint stays for the following calls; ignore_eos cannot end a document. */
  g = n_tokens(8);
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, NULL, NULL, &stats), EDGELLM_ERR_INVALID_ARGUMENT,
               "options->ignore_eos");
  CHECK_STATUS(edgellm_session_constraint_result(s, &complete, NULL), EDGELLM_ERR_INVALID_ARGUMENT,
               "not constrained");
  /* A budget that barely covers the shortest object forces the closing, and the object is
   * whole within it. */
  CHECK_STATUS(constrained(s, "And God said", 24, &out, &stats, &complete, &forced), EDGELLM_OK, NULL);
  printf("json schema in 24 tokens (complete %d, forced %d): %s\n", (int)complete, (int)forced, out.text);
  CHECK(complete == 1 && forced == 1 && stats.new_tokens <= 24);
  CHECK(is_object_text(out.text));
  /* Through token ids too. */
  {
    const int32_t ids[3] = {296, 389, 385};
    g = edgellm_generate_options_default();
    g.max_new_tokens = 48;
    memset(&other, 0, sizeof other);
    CHECK_STATUS(edgellm_session_reset(s), EDGELLM_OK, NULL);
    CHECK_STATUS(edgellm_session_constraint_result(s, &complete, &forced), EDGELLM_ERR_INVALID_ARGUMENT,
                 "not constrained");
    CHECK_STATUS(edgellm_generate_tokens(s, ids, 3, &g, collect, &other, &stats), EDGELLM_OK, NULL);
    CHECK_STATUS(edgellm_session_constraint_result(s, &complete, &forced), EDGELLM_OK, NULL);
    CHECK(complete == 1 && is_object_text(other.text));
  }

  /* Choices: exactly one of them, the model's pick (a budget far above the longest choice
   * forces nothing). The constraint is freed by the app while the session holds it. */
  CHECK_STATUS(edgellm_session_set_constraint(s, pick), EDGELLM_OK, NULL);
  edgellm_constraint_free(pick);
  pick = NULL;
  CHECK_STATUS(constrained(s, "And God said, Let there be", 160, &out, &stats, &complete, &forced),
               EDGELLM_OK, NULL);
  printf("choices: '%s'\n", out.text);
  CHECK(complete == 1 && forced == 0 && stats.stop_reason == EDGELLM_STOP_EOS);
  CHECK(strcmp(out.text, choices[0]) == 0 || strcmp(out.text, choices[1]) == 0 ||
        strcmp(out.text, choices[2]) == 0);
  /* A regular expression and a GBNF grammar. */
  CHECK_STATUS(edgellm_session_set_constraint(s, pattern), EDGELLM_OK, NULL);
  CHECK_STATUS(constrained(s, "And God said", 16, &out, &stats, &complete, &forced), EDGELLM_OK, NULL);
  CHECK(complete == 1 && out.len == 3 && strspn(out.text, "0123456789") == 3);
  CHECK_STATUS(edgellm_session_set_constraint(s, gbnf), EDGELLM_OK, NULL);
  CHECK_STATUS(constrained(s, "And God said", 16, &out, &stats, &complete, &forced), EDGELLM_OK, NULL);
  CHECK(complete == 1 && (strcmp(out.text, "In the beginning") == 0 || strcmp(out.text, "In the end") == 0));
  /* A stop string that cuts the document: not complete. */
  {
    const char* stops[1] = {" the"};
    g = edgellm_generate_options_default();
    g.max_new_tokens = 16;
    g.stop_strings = stops;
    g.n_stop_strings = 1;
    memset(&other, 0, sizeof other);
    CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &other, &stats), EDGELLM_OK, NULL);
    CHECK_STATUS(edgellm_session_constraint_result(s, &complete, &forced), EDGELLM_OK, NULL);
    CHECK(stats.stop_reason == EDGELLM_STOP_STRING && complete == 0 && strcmp(other.text, "In") == 0);
  }

  /* NULL returns to free text: the same tokens as a session that never had a constraint. */
  CHECK_STATUS(edgellm_session_set_constraint(s, NULL), EDGELLM_OK, NULL);
  greedy_text(model, &so, "And God said", g_tokens, &plain);
  g = n_tokens(g_tokens);
  memset(&out, 0, sizeof out);
  CHECK_STATUS(edgellm_session_reset(s), EDGELLM_OK, NULL);
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, collect, &out, &stats), EDGELLM_OK, NULL);
  CHECK(strcmp(out.text, plain.text) == 0 && stats.new_tokens == g_tokens);
  CHECK_STATUS(edgellm_session_constraint_result(s, &complete, &forced), EDGELLM_ERR_INVALID_ARGUMENT,
               "not constrained");

  /* One constraint on two sessions, freed before them: the same output. */
  CHECK_STATUS(edgellm_session_set_constraint(s, schema), EDGELLM_OK, NULL);
  REQUIRE_OK(edgellm_session_create(model, &so, &s2));
  CHECK_STATUS(edgellm_session_set_constraint(s2, schema), EDGELLM_OK, NULL);
  edgellm_constraint_free(schema);
  schema = NULL;
  CHECK_STATUS(edgellm_session_reset(s), EDGELLM_OK, NULL);
  CHECK_STATUS(constrained(s, "In the beginning", 48, &out, &stats, &complete, &forced), EDGELLM_OK, NULL);
  CHECK_STATUS(constrained(s2, "In the beginning", 48, &other, &stats, &complete, &forced), EDGELLM_OK, NULL);
  CHECK(complete == 1 && strcmp(out.text, other.text) == 0);
  edgellm_session_free(s2);
  edgellm_session_free(s);
  edgellm_constraint_free(pattern);
  edgellm_constraint_free(gbnf);
}

/* Speculative decoding (a draft model, prompt lookup) under a constraint: the same whole
 * document as plain greedy decoding. */
static void test_constraint_speculative(const edgellm_model* model, const edgellm_model* draft) {
  edgellm_session_options so = greedy_options();
  edgellm_session* s = NULL;
  edgellm_constraint* gbnf = NULL;
  edgellm_generation_stats stats;
  int32_t complete = -1, forced = -1;
  Collect plain, spec;
  int i;
  REQUIRE_OK(edgellm_constraint_compile(EDGELLM_CONSTRAINT_GRAMMAR,
                                        "root ::= \"In the \" (\"beginning\" | \"end\")\n", NULL, 0,
                                        &gbnf));
  for (i = 0; i < 3; ++i) {
    so.draft = i == 1 ? draft : NULL;
    so.draft_tokens = i == 1 ? 4 : 0;
    so.prompt_lookup = i == 2;
    REQUIRE_OK(edgellm_session_create(model, &so, &s));
    CHECK_STATUS(edgellm_session_set_constraint(s, gbnf), EDGELLM_OK, NULL);
    CHECK_STATUS(constrained(s, "And God said", 16, i == 0 ? &plain : &spec, &stats, &complete, &forced),
                 EDGELLM_OK, NULL);
    CHECK(complete == 1);
    if (i > 0) CHECK(strcmp(plain.text, spec.text) == 0);
    edgellm_session_free(s);
  }
  edgellm_constraint_free(gbnf);
}

/* A model loaded without a tokenizer has no vocabulary to constrain. */
static void test_constraint_without_tokenizer(const edgellm_model* draft) {
  edgellm_session* s = NULL;
  edgellm_constraint* c = NULL;
  REQUIRE_OK(edgellm_constraint_compile(EDGELLM_CONSTRAINT_JSON, NULL, NULL, 0, &c));
  REQUIRE_OK(edgellm_session_create(draft, NULL, &s));
  CHECK_STATUS(edgellm_session_set_constraint(s, c), EDGELLM_ERR_INVALID_ARGUMENT, "tokenizer");
  edgellm_session_free(s);
  edgellm_constraint_free(c);
}

/* ---- calls on a session from inside its own token callback -------------------------------- */

enum { kReentryCalls = 8 };

typedef struct {
  edgellm_session* session;
  Collect text;
  int calls;
  int free_session;             /* nonzero: free the session (twice) on the first call */
  char cache_path[256];         /* save_prompt_cache target: must stay unwritten */
  edgellm_status got[kReentryCalls];
  int named_busy[kReentryCalls]; /* last_error said "busy in edgellm_generate" */
  size_t position;               /* edgellm_session_position() read in the callback */
  size_t held;                   /* load_prompt_cache's *out_n_tokens: 0 when refused */
  char free_error[2][512];
} Reentry;

static void note_busy(Reentry* r, int i, edgellm_status st) {
  r->got[i] = st;
  r->named_busy[i] = strstr(edgellm_last_error(), "session: busy in edgellm_generate") != NULL;
}

/* On its first call, calls back into its own session: every call must be refused (BUSY) and
 * change nothing; or frees the session, which must wait until edgellm_generate returns. */
static int32_t reenter(const char* text, size_t text_len, int32_t token, void* user_data) {
  Reentry* r = (Reentry*)user_data;
  ++r->calls;
  collect(text, text_len, token, &r->text);
  if (r->calls != 1) return 1;
  if (r->free_session) {
    edgellm_session_free(r->session);
    snprintf(r->free_error[0], sizeof r->free_error[0], "%s", edgellm_last_error());
    edgellm_session_free(r->session); /* a second free while deferred is ignored */
    snprintf(r->free_error[1], sizeof r->free_error[1], "%s", edgellm_last_error());
    return 1; /* generation stops all the same */
  }
  {
    const int32_t ids[2] = {296, 389};
    edgellm_generate_options g = n_tokens(2);
    edgellm_sampling hot = edgellm_sampling_default();
    size_t held = 99;
    hot.temperature = 1.5f;
    hot.seed = 3;
    r->position = edgellm_session_position(r->session);
    note_busy(r, 0, edgellm_generate(r->session, "In the beginning", &g, collect, &r->text, NULL));
    note_busy(r, 1, edgellm_generate_tokens(r->session, ids, 2, &g, NULL, NULL, NULL));
    note_busy(r, 2, edgellm_session_reset(r->session));
    note_busy(r, 3, edgellm_session_set_sampling(r->session, &hot));
    note_busy(r, 4, edgellm_session_save_prompt_cache(r->session, r->cache_path));
    note_busy(r, 5, edgellm_session_load_prompt_cache(r->session, r->cache_path, &held));
    r->held = held;
    note_busy(r, 6, edgellm_session_set_constraint(r->session, NULL));
    note_busy(r, 7, edgellm_session_constraint_result(r->session, NULL, NULL));
  }
  return 1;
}

static void test_reentrancy(const edgellm_model* model) {
  edgellm_session_options so = greedy_options();
  edgellm_generate_options g = n_tokens(g_tokens);
  edgellm_generation_stats stats;
  Collect want;
  Reentry r;
  int i;
  greedy_text(model, &so, "And God said", g_tokens, &want);

  memset(&r, 0, sizeof r);
  snprintf(r.cache_path, sizeof r.cache_path, "/tmp/edgellm-c-api-reentry-%ld.cache",
           (long)getpid());
  unlink(r.cache_path);
  REQUIRE_OK(edgellm_session_create(model, &so, &r.session));
  CHECK_STATUS(edgellm_generate(r.session, "And God said", &g, reenter, &r, &stats), EDGELLM_OK,
               NULL);
  for (i = 0; i < kReentryCalls; ++i) {
    if (r.got[i] != EDGELLM_ERR_BUSY || !r.named_busy[i]) {
      fprintf(stderr, "re-entrant call %d: status %d (%s), want EDGELLM_ERR_BUSY\n", i,
              (int)r.got[i], edgellm_status_string(r.got[i]));
    }
    CHECK(r.got[i] == EDGELLM_ERR_BUSY && r.named_busy[i]);
  }
  /* Nothing changed: the generation went on as if no call had been made. */
  CHECK(r.position >= 3 && r.held == 0);
  CHECK(stats.stop_reason == EDGELLM_STOP_MAX_TOKENS && stats.new_tokens == g_tokens);
  CHECK(strcmp(r.text.text, want.text) == 0);
  CHECK(access(r.cache_path, F_OK) != 0); /* save_prompt_cache wrote nothing */
  /* And the session is free again afterwards. */
  CHECK_STATUS(edgellm_session_reset(r.session), EDGELLM_OK, NULL);
  CHECK_STATUS(edgellm_generate(r.session, "And God said", &g, NULL, NULL, NULL), EDGELLM_OK,
               NULL);
  edgellm_session_free(r.session);

  /* Freed from its own callback: generation stops there, the session is freed when
   * edgellm_generate returns (ASan/UBSan would see a use after free otherwise). */
  memset(&r, 0, sizeof r);
  r.free_session = 1;
  REQUIRE_OK(edgellm_session_create(model, &so, &r.session));
  CHECK_STATUS(edgellm_generate(r.session, "And God said", &g, reenter, &r, &stats), EDGELLM_OK,
               NULL);
  CHECK(r.calls == 1 && stats.new_tokens == 1 && stats.stop_reason == EDGELLM_STOP_CALLBACK);
  CHECK(strstr(r.free_error[0], "freed when that call returns") != NULL);
  CHECK(strstr(r.free_error[1], "already freed") != NULL);
  CHECK(strcmp(edgellm_last_error(), r.free_error[1]) == 0); /* the OK return keeps it */
  /* The same through edgellm_generate_tokens. */
  memset(&r, 0, sizeof r);
  r.free_session = 1;
  REQUIRE_OK(edgellm_session_create(model, &so, &r.session));
  {
    const int32_t ids[3] = {296, 389, 385};
    CHECK_STATUS(edgellm_generate_tokens(r.session, ids, 3, &g, reenter, &r, &stats), EDGELLM_OK,
                 NULL);
  }
  CHECK(r.calls == 1 && stats.stop_reason == EDGELLM_STOP_CALLBACK);
}

static void test_prompt_cache(const edgellm_model* model) {
  char dir[] = "/tmp/edgellm-c-api-XXXXXX";
  char path[256], garbage[256];
  edgellm_session_options so = greedy_options();
  edgellm_session *s = NULL, *t = NULL;
  edgellm_generate_options g = n_tokens(12);
  Collect a, b;
  size_t n = 0;
  FILE* f;

  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/prompt.cache", dir);
  snprintf(garbage, sizeof garbage, "%s/garbage.cache", dir);
  REQUIRE_OK(edgellm_session_create(model, &so, &s));
  memset(&a, 0, sizeof a);
  REQUIRE_OK(edgellm_generate(s, "And God said", &g, collect, &a, NULL));
  CHECK_STATUS(edgellm_session_save_prompt_cache(s, path), EDGELLM_OK, NULL);
  CHECK_STATUS(edgellm_session_save_prompt_cache(s, "/nonexistent/dir/prompt.cache"), EDGELLM_ERR_IO,
               "/nonexistent/dir/prompt.cache");

  REQUIRE_OK(edgellm_session_create(model, &so, &t));
  CHECK_STATUS(edgellm_session_load_prompt_cache(t, path, &n), EDGELLM_OK, NULL);
  CHECK(n == 3 && edgellm_session_position(t) == 3);
  CHECK_STATUS(edgellm_session_load_prompt_cache(t, path, NULL), EDGELLM_OK, NULL);
  memset(&b, 0, sizeof b);
  CHECK_STATUS(edgellm_generate(t, "And God said", &g, collect, &b, NULL), EDGELLM_OK, NULL);
  CHECK(strcmp(a.text, b.text) == 0);

  /* A garbage file is refused with its name; the session is unchanged and still generates. */
  f = fopen(garbage, "wb");
  CHECK(f != NULL);
  if (f) {
    fputs("this is not a prompt cache, just some bytes that are long enough to be read", f);
    fclose(f);
  }
  n = 99;
  CHECK(edgellm_session_load_prompt_cache(t, garbage, &n) != EDGELLM_OK);
  CHECK(n == 0 && strstr(edgellm_last_error(), "garbage.cache") != NULL);
  /* A cache of another KV type is refused. */
  {
    edgellm_session* u = NULL;
    so.kv_type = EDGELLM_KV_F32;
    REQUIRE_OK(edgellm_session_create(model, &so, &u));
    CHECK(edgellm_session_load_prompt_cache(u, path, &n) != EDGELLM_OK);
    CHECK(edgellm_last_error()[0] != '\0');
    edgellm_session_free(u);
  }
  memset(&b, 0, sizeof b);
  CHECK_STATUS(edgellm_generate(t, "And God said", &g, collect, &b, NULL), EDGELLM_OK, NULL);
  CHECK(strcmp(a.text, b.text) == 0);
  edgellm_session_free(s);
  edgellm_session_free(t);
  remove(path);
  remove(garbage);
  rmdir(dir);
}

static void test_speculative(const edgellm_model* model, const edgellm_model* draft) {
  edgellm_session_options so = greedy_options();
  Collect plain, spec;
  greedy_text(model, &so, "And God said", g_tokens, &plain);
  so.draft = draft;
  so.draft_tokens = 4;
  greedy_text(model, &so, "And God said", g_tokens, &spec);
  CHECK(strcmp(plain.text, spec.text) == 0); /* greedy: drafting never changes the tokens */
  so.draft = NULL;
  so.prompt_lookup = 1;
  greedy_text(model, &so, "And God said", g_tokens, &spec);
  CHECK(strcmp(plain.text, spec.text) == 0);
  {
    /* The prompt cache is for plain decoding only. */
    edgellm_session* s = NULL;
    REQUIRE_OK(edgellm_session_create(model, &so, &s));
    CHECK_STATUS(edgellm_session_load_prompt_cache(s, "/tmp/x.cache", NULL), EDGELLM_ERR_UNSUPPORTED,
                 "speculative");
    edgellm_session_free(s);
  }
}

static void test_without_tokenizer(const edgellm_model* draft) {
  edgellm_session* s = NULL;
  edgellm_generate_options g = n_tokens(4);
  int32_t ids[3] = {296, 389, 385};
  size_t n = 0;
  char out[16];
  CHECK_STATUS(edgellm_tokenize(draft, "And", 3, 1, 0, ids, 3, &n), EDGELLM_ERR_INVALID_ARGUMENT, "tokenizer");
  CHECK_STATUS(edgellm_detokenize(draft, ids, 3, 1, out, sizeof out, &n), EDGELLM_ERR_INVALID_ARGUMENT, "tokenizer");
  REQUIRE_OK(edgellm_session_create(draft, NULL, &s));
  CHECK_STATUS(edgellm_generate(s, "And", &g, NULL, NULL, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "tokenizer");
  CHECK_STATUS(edgellm_generate_tokens(s, ids, 3, &g, NULL, NULL, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "tokenizer");
  edgellm_session_free(s);
}

static void test_plan(void) {
  edgellm_memory_plan plan;
  edgellm_session_options so = edgellm_session_options_default();
  CHECK_STATUS(edgellm_plan(g_target, NULL, NULL, NULL), EDGELLM_ERR_INVALID_ARGUMENT, "out_plan");
  CHECK_STATUS(edgellm_plan(NULL, NULL, NULL, &plan), EDGELLM_ERR_INVALID_ARGUMENT, "model_dir");
  so.kv_type = (edgellm_kv_type)-1;
  CHECK_STATUS(edgellm_plan(g_target, NULL, &so, &plan), EDGELLM_ERR_INVALID_ARGUMENT,
               "session_options->kv_type: -1");
  so = edgellm_session_options_default();
  so.context_size = 100000; /* the model's max_position_embeddings is 2048 */
  CHECK_STATUS(edgellm_plan(g_target, NULL, &so, &plan), EDGELLM_ERR_INVALID_ARGUMENT,
               "session_options->context_size: 100000 is above the model's "
               "max_position_embeddings 2048");
  so = edgellm_session_options_default();
  /* The plan of the default load and session, and a load held to a budget below it. */
  CHECK_STATUS(edgellm_plan(g_target, NULL, NULL, &plan), EDGELLM_OK, NULL);
  CHECK(plan.peak_bytes > 0 && plan.context_size > 0);
  CHECK(plan.weights_mapped_bytes > 0 && plan.kv_cache_bytes > 0 && plan.scratch_bytes > 0);
  CHECK(plan.peak_bytes >= plan.weights_resident_bytes + plan.kv_cache_bytes);
  CHECK(plan.peak_bytes >= plan.load_peak_bytes);
  {
    edgellm_model_options mo = edgellm_model_options_default();
    edgellm_model* m = NULL;
    const uint64_t peak = plan.peak_bytes;
    /* A longer context costs more KV cache. */
    so = edgellm_session_options_default();
    so.context_size = plan.context_size / 2;
    CHECK_STATUS(edgellm_plan(g_target, NULL, &so, &plan), EDGELLM_OK, NULL);
    CHECK(plan.context_size == so.context_size && plan.peak_bytes < peak);
    mo.memory_budget_bytes = peak - 1;
    CHECK_STATUS(edgellm_model_load(g_target, &mo, &m), EDGELLM_ERR_OUT_OF_MEMORY,
                 "memory_budget_bytes");
    CHECK(m == NULL);
    mo.memory_budget_bytes = peak;
    CHECK_STATUS(edgellm_model_load(g_target, &mo, &m), EDGELLM_OK, NULL);
    CHECK(m != NULL);
    edgellm_model_free(m);
  }
}

/* edgellm_fit_budget: settings as given when they fit, changed (and planned again to the same
 * figures) when they do not, refused with the options untouched when nothing fits. */
static void test_fit_budget(void) {
  edgellm_model_options mo = edgellm_model_options_default();
  edgellm_session_options so = edgellm_session_options_default();
  edgellm_memory_plan plan, again, given;
  char note[512];
  CHECK_STATUS(edgellm_fit_budget(NULL, 0, &mo, &so, &plan, note, sizeof note),
               EDGELLM_ERR_INVALID_ARGUMENT, "model_dir");
  CHECK_STATUS(edgellm_fit_budget(g_target, 0, NULL, &so, &plan, note, sizeof note),
               EDGELLM_ERR_INVALID_ARGUMENT, "model_options");
  CHECK_STATUS(edgellm_fit_budget(g_target, 0, &mo, NULL, &plan, note, sizeof note),
               EDGELLM_ERR_INVALID_ARGUMENT, "session_options");
  REQUIRE_OK(edgellm_plan(g_target, NULL, NULL, &given));
  /* The phone profile holds the bundled model as given. */
  CHECK_STATUS(edgellm_fit_budget(g_target, EDGELLM_BUDGET_PHONE, &mo, &so, &plan, note, sizeof note),
               EDGELLM_OK, NULL);
  CHECK(note[0] == '\0' && plan.peak_bytes == given.peak_bytes);
  CHECK(strcmp(mo.lm_head, "stored") == 0 && so.kv_type == EDGELLM_KV_INT8 &&
        so.context_size == given.context_size);
  /* A budget just under the given settings' peak changes something, and says what. */
  mo = edgellm_model_options_default();
  so = edgellm_session_options_default();
  CHECK_STATUS(edgellm_fit_budget(g_target, given.peak_bytes - 1, &mo, &so, &plan, note, sizeof note),
               EDGELLM_OK, NULL);
  CHECK(plan.peak_bytes <= given.peak_bytes - 1);
  CHECK(strstr(note, "to fit the budget") != NULL);
  REQUIRE_OK(edgellm_plan(g_target, &mo, &so, &again));
  CHECK(again.peak_bytes == plan.peak_bytes && again.context_size == plan.context_size);
  /* A short note is cut, NUL-terminated. */
  mo = edgellm_model_options_default();
  so = edgellm_session_options_default();
  CHECK_STATUS(edgellm_fit_budget(g_target, given.peak_bytes - 1, &mo, &so, NULL, note, 8),
               EDGELLM_OK, NULL);
  CHECK(strlen(note) == 7);
  /* Nothing fits 1 MiB: refused, the options as they were. */
  mo = edgellm_model_options_default();
  so = edgellm_session_options_default();
  CHECK_STATUS(edgellm_fit_budget(g_target, 1 << 20, &mo, &so, &plan, note, sizeof note),
               EDGELLM_ERR_OUT_OF_MEMORY, "nothing fits the budget");
  CHECK(mo.lm_head == NULL && so.kv_type == EDGELLM_KV_INT8 && so.context_size == 0);
}

/* Freeing the model before its sessions is fine: a session keeps the model alive. */
static void test_free_order(void) {
  edgellm_model* m = NULL;
  edgellm_session* s = NULL;
  edgellm_generate_options g = n_tokens(4);
  edgellm_generation_stats stats;
  REQUIRE_OK(edgellm_model_load(g_target, NULL, &m));
  REQUIRE_OK(edgellm_session_create(m, NULL, &s));
  edgellm_model_free(m);
  CHECK_STATUS(edgellm_generate(s, "And God said", &g, NULL, NULL, &stats), EDGELLM_OK, NULL);
  CHECK(stats.new_tokens == 4);
  edgellm_session_free(s);
}

/* ---- threads ----------------------------------------------------------------------------- */

typedef struct {
  const edgellm_model* model;
  const char* prompt;
  Collect out;
  edgellm_status status;
  char error[512];
} Job;

static void* run_job(void* arg) {
  Job* job = (Job*)arg;
  edgellm_session_options so = greedy_options();
  edgellm_session* s = NULL;
  edgellm_generate_options g = n_tokens(g_tokens);
  memset(&job->out, 0, sizeof job->out);
  job->status = edgellm_session_create(job->model, &so, &s);
  if (job->status == EDGELLM_OK) job->status = edgellm_generate(s, job->prompt, &g, collect, &job->out, NULL);
  snprintf(job->error, sizeof job->error, "%s", edgellm_last_error());
  edgellm_session_free(s);
  return NULL;
}

static void* last_error_of_new_thread(void* arg) {
  snprintf((char*)arg, 64, "%s", edgellm_last_error());
  return NULL;
}

static void test_threads(const edgellm_model* model) {
  const char* prompts[2] = {"And God said", "In the beginning"};
  Collect alone[2];
  Job jobs[2];
  pthread_t th[2];
  char other[64] = "unset";
  int i;
  edgellm_session_options so = greedy_options();
  for (i = 0; i < 2; ++i) {
    edgellm_session* s = NULL;
    edgellm_generate_options g = n_tokens(g_tokens);
    memset(&alone[i], 0, sizeof alone[i]);
    REQUIRE_OK(edgellm_session_create(model, &so, &s));
    REQUIRE_OK(edgellm_generate(s, prompts[i], &g, collect, &alone[i], NULL));
    edgellm_session_free(s);
  }
  CHECK(strcmp(alone[0].text, alone[1].text) != 0);
  for (i = 0; i < 2; ++i) {
    jobs[i].model = model;
    jobs[i].prompt = prompts[i];
    CHECK(pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0);
  }
  for (i = 0; i < 2; ++i) CHECK(pthread_join(th[i], NULL) == 0);
  for (i = 0; i < 2; ++i) {
    if (jobs[i].status != EDGELLM_OK) fprintf(stderr, "thread %d: %s\n", i, jobs[i].error);
    CHECK(jobs[i].status == EDGELLM_OK);
    CHECK(strcmp(jobs[i].out.text, alone[i].text) == 0);
  }
  /* The last error is per thread: this thread's failure is not another thread's. */
  CHECK(edgellm_session_reset(NULL) != EDGELLM_OK && edgellm_last_error()[0] != '\0');
  CHECK(pthread_create(&th[0], NULL, last_error_of_new_thread, other) == 0);
  CHECK(pthread_join(th[0], NULL) == 0);
  CHECK(other[0] == '\0');
}

int main(void) {
  edgellm_model *model = NULL, *pooled = NULL, *draft = NULL;
  edgellm_model_options o = edgellm_model_options_default();
  model_paths();
  CHECK(edgellm_last_error() != NULL && edgellm_last_error()[0] == '\0');

  test_version_and_status();
  test_model_load_errors();
  REQUIRE_OK(edgellm_model_load(g_target, NULL, &model));
  o.load_tokenizer = 0;
  o.lm_head = "q4";
  REQUIRE_OK(edgellm_model_load(g_draft, &o, &draft));
  test_model_facts(model);
  test_tokenizer(model);
  test_session_errors(model, draft);
  test_generate_errors(model);
  test_generate(model);
  test_reentrancy(model);
  test_prompt_cache(model);
  test_speculative(model, draft);
  test_without_tokenizer(draft);
  test_constraint_compile();
  test_constraint(model);
  test_constraint_speculative(model, draft);
  test_constraint_without_tokenizer(draft);
  test_plan();
  test_fit_budget();
  test_free_order();
  test_threads(model); /* no pool: each session computes on its own thread */
  o = edgellm_model_options_default();
  o.threads = 2; /* the model's pool, which the two sessions take turns on */
  REQUIRE_OK(edgellm_model_load(g_target, &o, &pooled));
  test_threads(pooled);

  edgellm_model_free(pooled);
  edgellm_model_free(draft);
  edgellm_model_free(model);
  printf("c_api_test: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* Load the bundled model, create a session, generate a few tokens, compile a constraint and
 * generate under it, free all three: 100 times from C.
 * Resident memory (VmRSS) after the last cycle stays within 5 MB of its value after the first, so
 * an app that opens and closes models (screen switches) does not grow. Under sanitizers, whose
 * allocators hold freed memory back, and at EDGELLM_TEST_SCALE=small, fewer cycles and no RSS
 * bound: LeakSanitizer checks that every allocation is freed. */
#define _POSIX_C_SOURCE 200809L

#include <edgellm/c/edgellm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h>
#endif

#ifndef EDGELLM_SOURCE_DIR
#define EDGELLM_SOURCE_DIR "."
#endif

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* VmRSS of this process in kB, or -1. glibc keeps freed heap memory for reuse (and its mmap
 * threshold grows after the first large free, so later cycles' buffers come from the heap):
 * malloc_trim first, so the reading is what the process still holds, not what malloc caches. */
static long rss_kb(void) {
  char line[256];
  long kb = -1;
  FILE* f;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) {
      kb = strtol(line + 6, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

static int32_t count_pieces(const char* text, size_t text_len, int32_t token, void* user_data) {
  (void)text;
  (void)text_len;
  (void)token;
  ++*(int*)user_data;
  return 1;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
  const char* root = getenv("EDGELLM_SOURCE_DIR");
  const char* scale = getenv("EDGELLM_TEST_SCALE");
  const int small = SANITIZED || (scale != NULL && strcmp(scale, "small") == 0);
  const int cycles = small ? 10 : 100;
  const long limit_kb = 5 * 1000; /* 5 MB */
  char dir[4096];
  long first = -1, last = -1;
  double t0 = seconds();
  int i;

  if (root == NULL || root[0] == '\0') root = EDGELLM_SOURCE_DIR;
  snprintf(dir, sizeof dir, "%s/models/kjv-target-awq", root);
  for (i = 1; i <= cycles; ++i) {
    edgellm_model* model = NULL;
    edgellm_session* session = NULL;
    edgellm_constraint* constraint = NULL;
    const char* choices[2] = {"light", "darkness"};
    int32_t complete = 0;
    edgellm_session_options so = edgellm_session_options_default();
    edgellm_generate_options go = edgellm_generate_options_default();
    edgellm_generation_stats stats;
    edgellm_status st;
    int pieces = 0;
    so.sampling = edgellm_sampling_greedy();
    go.max_new_tokens = 4;
    go.ignore_eos = 1;
    st = edgellm_model_load(dir, NULL, &model);
    if (st == EDGELLM_OK) st = edgellm_session_create(model, &so, &session);
    if (st == EDGELLM_OK) st = edgellm_generate(session, "And God said", &go, count_pieces, &pieces, &stats);
    if (st == EDGELLM_OK) {
      /* A constraint (the model's vocabulary index is built on the first set) freed at once:
       * the session holds it until the session is freed. */
      edgellm_generate_options cgo = edgellm_generate_options_default();
      edgellm_generation_stats cstats;
      int cpieces = 0;
      cgo.max_new_tokens = 8;
      st = edgellm_constraint_compile(EDGELLM_CONSTRAINT_CHOICES, NULL, choices, 2, &constraint);
      if (st == EDGELLM_OK) st = edgellm_session_set_constraint(session, constraint);
      edgellm_constraint_free(constraint);
      if (st == EDGELLM_OK)
        st = edgellm_generate(session, "And God said, Let there be", &cgo, count_pieces, &cpieces, &cstats);
      if (st == EDGELLM_OK) st = edgellm_session_constraint_result(session, &complete, NULL);
      if (st == EDGELLM_OK && complete != 1) {
        fprintf(stderr, "cycle %d: the constrained output is not whole\n", i);
        return 1;
      }
    }
    edgellm_session_free(session);
    edgellm_model_free(model);
    if (st != EDGELLM_OK) {
      fprintf(stderr, "cycle %d: %s: %s\n", i, edgellm_status_string(st), edgellm_last_error());
      return 1;
    }
    if (stats.new_tokens != 4 || pieces == 0) {
      fprintf(stderr, "cycle %d: %u tokens, %d pieces of text\n", i, (unsigned)stats.new_tokens, pieces);
      return 1;
    }
    if (getenv("EDGELLM_LEAK_TEST_VERBOSE") != NULL) printf("cycle %d: VmRSS %ld kB\n", i, rss_kb());
    if (i == 1) first = rss_kb();
    if (i == cycles) last = rss_kb();
  }
  printf("%d cycles in %.2f s; VmRSS after cycle 1: %ld kB, after cycle %d: %ld kB (%+ld kB)\n",
         cycles, seconds() - t0, first, cycles, last, last - first);
  if (small) {
    printf("RSS bound not checked (%s)\n", SANITIZED ? "sanitizer" : "EDGELLM_TEST_SCALE=small");
    return 0;
  }
  if (first < 0 || last < 0) {
    fprintf(stderr, "no VmRSS in /proc/self/status\n");
    return 1;
  }
  if (last - first > limit_kb) {
    fprintf(stderr, "VmRSS grew by %ld kB over %d cycles (limit %ld kB)\n", last - first, cycles, limit_kb);
    return 1;
  }
  return 0;
}

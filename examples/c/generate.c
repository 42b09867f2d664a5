/* SPDX-License-Identifier: Apache-2.0 */
/* An app over the C API alone (no C++ include): load a checkpoint directory, stream greedy text to
 * stdout, check every status and print edgellm_last_error() on failure.
 *
 *   edgellm-example-c-generate [MODEL_DIR [PROMPT [MAX_TOKENS]]]
 *
 * MODEL_DIR defaults to the bundled models/kjv-target-awq (run from the repository root). */
#include <edgellm/c/edgellm.h>

#include <stdio.h>
#include <stdlib.h>

/* Called with each new piece of text; returning 0 would stop generation. */
static int32_t print_piece(const char* text, size_t text_len, int32_t token, void* user_data) {
  (void)token;
  (void)user_data;
  fwrite(text, 1, text_len, stdout);
  fflush(stdout);
  return 1;
}

static int fail(const char* what, edgellm_status status) {
  fprintf(stderr, "%s: %s: %s\n", what, edgellm_status_string(status), edgellm_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* model_dir = argc > 1 ? argv[1] : "models/kjv-target-awq";
  const char* prompt = argc > 2 ? argv[2] : "And God said";
  edgellm_model* model = NULL;
  edgellm_session* session = NULL;
  edgellm_session_options session_options = edgellm_session_options_default();
  edgellm_generate_options options = edgellm_generate_options_default();
  edgellm_generation_stats stats;
  edgellm_status status;
  int rc = 0;

  options.max_new_tokens = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 64;
  session_options.sampling = edgellm_sampling_greedy(); /* the same text on every run */

  status = edgellm_model_load(model_dir, NULL, &model);
  if (status != EDGELLM_OK) return fail("edgellm_model_load", status);
  status = edgellm_session_create(model, &session_options, &session);
  if (status != EDGELLM_OK) {
    rc = fail("edgellm_session_create", status);
    goto done;
  }
  fputs(prompt, stdout);
  status = edgellm_generate(session, prompt, &options, print_piece, NULL, &stats);
  if (status != EDGELLM_OK) {
    rc = fail("edgellm_generate", status);
    goto done;
  }
  printf("\n");
  fprintf(stderr, "[%u prompt tokens, %u generated; time to first token %.1f ms]\n",
          (unsigned)stats.prompt_tokens, (unsigned)stats.new_tokens,
          stats.time_to_first_token_s * 1e3);
done:
  edgellm_session_free(session); /* both accept NULL */
  edgellm_model_free(model);
  return rc;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* Consumer smoke test of the installed C API: the header compiles as C, the library links. */
#include <edgellm/c/edgellm.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  edgellm_model* model = NULL;
  if (edgellm_model_load(NULL, NULL, &model) != EDGELLM_ERR_INVALID_ARGUMENT || model != NULL ||
      strstr(edgellm_last_error(), "model_dir") == NULL) {
    fprintf(stderr, "edgellm C consumer: unexpected result\n");
    return 1;
  }
  printf("edgellm C consumer: %s\n", edgellm_build_info());
  return 0;
}

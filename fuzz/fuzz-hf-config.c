/* fuzz-hf-config.c: libFuzzer target for the Hugging Face config.json parser
 * (amk-hf-model.c).
 *
 * The bytes go to amk_model_parse_hf_config(), which must either fill the
 * hyperparameters or fail with an AMK_MODEL_ERROR (never crash, leak, hang or log a
 * critical). Accepted hyperparameters are within the
 * parser's bounds: every count positive, the key/value heads dividing the query heads,
 * an even head_dim, a finite epsilon and RoPE base. Seeds: the config.json of
 * tests/data/tiny-llama and tests/data/tiny-qwen3.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <gio/gio.h>
#include "amk-model-readers-private.h"

#define FUZZ_TARGET "fuzz-hf-config"
#include "fuzz-common.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GError) error = NULL;
  AmkModelParams hp;
  gboolean accepted;

  accepted = amk_model_parse_hf_config ((const char *) data, size, "config.json", &hp, &error);
  check_parse_error (accepted, error);
  if (!accepted)
    return 0;
  if (hp.architecture == NULL || hp.n_layers == 0 || hp.hidden == 0 || hp.n_heads == 0 ||
      hp.n_kv_heads == 0 || hp.n_heads % hp.n_kv_heads != 0 || hp.head_dim == 0 ||
      hp.head_dim % 2 != 0 || hp.ffn == 0 || hp.vocab == 0 || !isfinite (hp.eps) ||
      !(hp.rope_theta > 0.0f) || !isfinite (hp.rope_theta) || hp.rope_factor < 0.0f)
    fail ("accepted hyperparameters out of bounds", NULL);
  return 0;
}

/* fuzz-safetensors.c: libFuzzer target for the safetensors parser (amk-safetensors.c).
 *
 * The bytes go to amk_safetensors_open_bytes(), which must either return a parsed file
 * or fail with an AMK_MODEL_ERROR (never crash, leak, hang or log a critical). In a file
 * that opens, every tensor lies inside the input, is found by its name, and converts to
 * bf16 (BF16, F16, F32) or fails with AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE. (The
 * sharded index is read from a folder; this target covers the per-file parser, which
 * each shard goes through.)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <gio/gio.h>
#include "amk-safetensors-private.h"

#define FUZZ_TARGET "fuzz-safetensors"
#include "fuzz-common.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GBytes) bytes = g_bytes_new_static (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkSafetensors) st = amk_safetensors_open_bytes (bytes, "fuzz.safetensors", &error);

  check_parse_error (st != NULL, error);
  if (st == NULL)
    return 0;

  (void) amk_safetensors_get_metadata (st, "format");
  for (gsize i = 0; i < amk_safetensors_get_n_tensors (st); i++)
    {
      const AmkSafetensorsTensor *t = amk_safetensors_get_tensor (st, i);
      g_autofree guint16 *out = NULL;
      gboolean convertible = t->dtype == AMK_SAFETENSORS_DTYPE_BF16 ||
                             t->dtype == AMK_SAFETENSORS_DTYPE_F16 ||
                             t->dtype == AMK_SAFETENSORS_DTYPE_F32;

      if (amk_safetensors_find_tensor (st, t->name) != t)
        fail ("a tensor is not found by its name", NULL);
      if (t->n_bytes > 0 && (t->data < data || t->data + t->n_bytes > data + size))
        fail ("a tensor's data lies outside the input", NULL);
      if (t->n_bytes != t->n_elements * amk_safetensors_dtype_size (t->dtype))
        fail ("a tensor's size disagrees with its shape", NULL);
      out = g_new (guint16, MAX (t->n_elements, 1));   /* n_elements <= size */
      if (!amk_safetensors_tensor_to_bf16 (t, out, &error))
        {
          if (convertible ||
              !g_error_matches (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE))
            fail ("a tensor failed to convert", error);
          g_clear_error (&error);
        }
    }
  return 0;
}

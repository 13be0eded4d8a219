/* fuzz-gguf.c: libFuzzer target for the GGUF parser (amk-gguf.c).
 *
 * The bytes go to amk_gguf_open_bytes(), which must either return a parsed file or
 * fail with an AMK_MODEL_ERROR (never crash, leak, hang or log a critical). A file that
 * opens must answer every metadata getter for each of its keys (a value or an
 * AMK_MODEL_ERROR), and every tensor must either convert to bf16 or, for a type the
 * converter lacks, fail with AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE; the converted rows
 * also go through amk_model_unpermute_qk(). AddressSanitizer sees the
 * exact input buffer, so any read past a tensor's bytes is caught.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <gio/gio.h>
#include "amk-gguf-private.h"

#define FUZZ_TARGET "fuzz-gguf"
#include "fuzz-common.h"

/* convert tensors of at most this many elements (an input holds up to ~2 per byte) */
#define MAX_CONVERT_ELEMENTS (1u << 24)

static void
check_getter_error (gboolean ok, GError **error)
{
  if (!ok && (*error == NULL || (*error)->domain != AMK_MODEL_ERROR))
    fail ("a getter failed without an AMK_MODEL_ERROR", *error);
  if (ok && *error != NULL)
    fail ("a getter succeeded and set an error", *error);
  g_clear_error (error);
}

static void
exercise_key (AmkGguf *g, const char *key)
{
  GError *error = NULL;
  guint32 u32;
  guint64 u64;
  gint64 i64;
  float f;
  double d;
  gboolean b;
  const char *s;
  gsize n, len;
  AmkGgufType type, element_type;
  gboolean ok;

  if (!amk_gguf_has_key (g, key))
    fail ("a listed key is missing", NULL);
  if (!amk_gguf_get_key_type (g, key, &type, &element_type, &n, &error))
    fail ("a listed key has no type", error);
  check_getter_error (amk_gguf_get_u32 (g, key, &u32, &error), &error);
  check_getter_error (amk_gguf_get_u64 (g, key, &u64, &error), &error);
  check_getter_error (amk_gguf_get_i64 (g, key, &i64, &error), &error);
  check_getter_error (amk_gguf_get_f32 (g, key, &f, &error), &error);
  check_getter_error (amk_gguf_get_f64 (g, key, &d, &error), &error);
  check_getter_error (amk_gguf_get_bool (g, key, &b, &error), &error);
  ok = amk_gguf_get_string (g, key, &s, &len, &error);
  if (ok && (s == NULL || strlen (s) > len))
    fail ("a string is longer than its length", NULL);
  check_getter_error (ok, &error);
  {
    const char * const *strv = amk_gguf_get_string_array (g, key, &n, &error);
    if (strv != NULL)
      {
        for (gsize i = 0; i < n; i++)
          if (strv[i] == NULL)
            fail ("a string array ends early", NULL);
        if (strv[n] != NULL)
          fail ("a string array is not NULL-terminated", NULL);
      }
    check_getter_error (strv != NULL, &error);
  }
  {
    g_autofree gint32 *a = amk_gguf_get_i32_array (g, key, &n, &error);
    check_getter_error (a != NULL, &error);
  }
  {
    g_autofree float *a = amk_gguf_get_f32_array (g, key, &n, &error);
    check_getter_error (a != NULL, &error);
  }
}

static gboolean
convertible (AmkGgmlType type)
{
  return type == AMK_GGML_TYPE_F32 || type == AMK_GGML_TYPE_F16 || type == AMK_GGML_TYPE_BF16 ||
         type == AMK_GGML_TYPE_Q8_0 || type == AMK_GGML_TYPE_Q4_0 || type == AMK_GGML_TYPE_Q4_1;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GBytes) bytes = g_bytes_new_static (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = amk_gguf_open_bytes (bytes, "fuzz.gguf", &error);

  check_parse_error (g != NULL, error);
  if (g == NULL)
    return 0;

  for (gsize i = 0; i < amk_gguf_get_n_keys (g); i++)
    exercise_key (g, amk_gguf_get_key (g, i));

  for (gsize i = 0; i < amk_gguf_get_n_tensors (g); i++)
    {
      const AmkGgufTensor *t = amk_gguf_get_tensor (g, i);
      g_autofree guint16 *out = NULL;

      if (amk_gguf_find_tensor (g, t->name) != t)
        fail ("a tensor is not found by its name", NULL);
      if (t->n_bytes > 0 && (t->data < data || t->data + t->n_bytes > data + size))
        fail ("a tensor's data lies outside the input", NULL);
      if (t->n_elements > MAX_CONVERT_ELEMENTS)
        continue;
      out = g_new (guint16, MAX (t->n_elements, 1));
      if (!amk_gguf_tensor_to_bf16 (t, out, &error))
        {
          if (convertible (t->type) || !g_error_matches (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE))
            fail ("a tensor failed to convert", error);
          g_clear_error (&error);
          continue;
        }
      for (guint heads = 1; heads <= 3 && t->dims[0] > 0; heads++)
        {
          gsize rows = (gsize) (t->n_elements / t->dims[0]);
          if (!amk_model_unpermute_qk (out, rows, (gsize) t->dims[0], heads, &error))
            {
              if (!g_error_matches (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE))
                fail ("unpermute failed oddly", error);
              g_clear_error (&error);
            }
        }
    }
  return 0;
}

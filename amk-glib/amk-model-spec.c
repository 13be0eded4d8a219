/* amk-model-spec.c: the neutral description of a model (see amk-model-spec-private.h):
 * its tensor table, the hyperparameter check, and the conversion of every stored
 * element type to the bf16 the program runs in.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-glib.h"
#include "amk-dtype-private.h"
#include "amk-dequant-private.h"
#include "amk-model-spec-private.h"

/* (public in amk-model.h; defined here so that every reader links it) */
G_DEFINE_QUARK (amk-model-error-quark, amk_model_error)

static void
tensor_free (AmkModelTensor *t)
{
  g_free (t->name);
  g_free (t->file);
  g_clear_pointer (&t->data, g_bytes_unref);
  g_free (t);
}

AmkModelSpec *
amk_model_spec_new (const char         *source,
                    const char * const *names,
                    const char         *layer_format)
{
  AmkModelSpec *spec = g_new0 (AmkModelSpec, 1);

  spec->source = g_strdup (source);
  spec->params.source = spec->source;
  spec->names = names;
  spec->layer_format = layer_format;
  spec->tensors = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) tensor_free);
  spec->eos_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  return spec;
}

void
amk_model_spec_free (AmkModelSpec *spec)
{
  if (spec == NULL)
    return;
  g_hash_table_unref (spec->tensors);
  g_clear_object (&spec->tokenizer);
  g_array_unref (spec->eos_ids);
  g_free (spec->architecture);
  g_free (spec->source);
  g_free (spec);
}

void
amk_model_spec_set_params (AmkModelSpec         *spec,
                           const AmkModelParams *params)
{
  g_return_if_fail (spec != NULL && params != NULL);

  g_free (spec->architecture);
  spec->params = *params;
  spec->architecture = g_strdup (params->architecture);
  spec->params.architecture = spec->architecture;
  spec->params.source = spec->source;
}

char *
amk_model_spec_tensor_name (AmkModelSpec   *spec,
                            AmkModelWeight  weight,
                            guint           layer)
{
  g_return_val_if_fail (spec != NULL, NULL);
  g_return_val_if_fail ((guint) weight < AMK_MODEL_N_WEIGHTS, NULL);

  if (weight < AMK_MODEL_WEIGHT_FIRST_LAYER)
    return g_strdup (spec->names[weight]);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  return g_strdup_printf (spec->layer_format, layer, spec->names[weight]);
#pragma GCC diagnostic pop
}

/* (the layer count is at most 65536: the key fits in 32 bits) */
static gpointer
tensor_key (AmkModelWeight weight,
            guint          layer)
{
  return GUINT_TO_POINTER ((weight < AMK_MODEL_WEIGHT_FIRST_LAYER ? 0 : layer) * AMK_MODEL_N_WEIGHTS + weight);
}

AmkModelTensor *
amk_model_spec_add_tensor (AmkModelSpec   *spec,
                           AmkModelWeight  weight,
                           guint           layer,
                           const char     *file)
{
  AmkModelTensor *t;

  g_return_val_if_fail (spec != NULL, NULL);
  g_return_val_if_fail ((guint) weight < AMK_MODEL_N_WEIGHTS, NULL);

  if ((t = amk_model_spec_tensor (spec, weight, layer)) != NULL)
    return t;
  t = g_new0 (AmkModelTensor, 1);
  t->name = amk_model_spec_tensor_name (spec, weight, layer);
  t->file = g_strdup (file);
  g_hash_table_insert (spec->tensors, tensor_key (weight, layer), t);
  return t;
}

AmkModelTensor *
amk_model_spec_tensor (AmkModelSpec   *spec,
                       AmkModelWeight  weight,
                       guint           layer)
{
  g_return_val_if_fail (spec != NULL, NULL);
  g_return_val_if_fail ((guint) weight < AMK_MODEL_N_WEIGHTS, NULL);

  return g_hash_table_lookup (spec->tensors, tensor_key (weight, layer));
}

gboolean
amk_model_spec_holds (AmkModelSpec   *spec,
                      AmkModelWeight  weight,
                      guint           layer)
{
  const AmkModelParams *hp = &spec->params;

  return amk_model_spec_tensor (spec, weight, layer) != NULL &&
         !(weight == AMK_MODEL_WEIGHT_OUTPUT && hp->tied_embeddings) &&
         !((weight == AMK_MODEL_WEIGHT_ATTN_Q_NORM || weight == AMK_MODEL_WEIGHT_ATTN_K_NORM) &&
           !hp->qk_norm);
}

guint64
amk_model_spec_bf16_bytes (AmkModelSpec *spec)
{
  guint64 bytes = 0;

  for (guint w = 0; w < AMK_MODEL_N_WEIGHTS; w++)
    for (guint layer = 0; layer < (w >= AMK_MODEL_WEIGHT_FIRST_LAYER ? spec->params.n_layers : 1); layer++)
      if (amk_model_spec_holds (spec, w, layer))
        bytes += 2 * amk_model_spec_tensor (spec, w, layer)->n_elements;
  return bytes;
}

void
amk_model_spec_set_tokenizer (AmkModelSpec *spec,
                              AmkTokenizer *tokenizer,
                              GArray       *extra_eos_ids)
{
  gint32 eos;

  g_return_if_fail (spec != NULL && AMK_IS_TOKENIZER (tokenizer));

  g_set_object (&spec->tokenizer, tokenizer);
  g_array_set_size (spec->eos_ids, 0);
  if ((eos = amk_tokenizer_get_eos_id (tokenizer)) >= 0)
    g_array_append_val (spec->eos_ids, eos);
  for (guint i = 0; extra_eos_ids != NULL && i < extra_eos_ids->len; i++)
    {
      gint32 id = g_array_index (extra_eos_ids, gint32, i);
      gboolean seen = FALSE;

      for (guint j = 0; j < spec->eos_ids->len && !seen; j++)
        seen = g_array_index (spec->eos_ids, gint32, j) == id;
      if (!seen)
        g_array_append_val (spec->eos_ids, id);
    }
}

gboolean
amk_model_params_check (const AmkModelParams  *hp,
                        GError               **error)
{
  const guint max = 1u << 20;

  if (hp->n_layers == 0 || hp->n_layers > 65536 || hp->hidden == 0 || hp->hidden > max ||
      hp->n_heads == 0 || hp->n_heads > 65536 || hp->n_kv_heads == 0 ||
      hp->n_heads % hp->n_kv_heads != 0 || hp->head_dim < 2 || hp->head_dim % 2 != 0 ||
      hp->head_dim > 65536 || (guint64) hp->n_heads * hp->head_dim > max ||
      hp->ffn == 0 || hp->ffn > max || hp->vocab == 0 || hp->vocab > G_MAXINT32 ||
      !(hp->eps >= 0.0f && hp->eps < 1.0f))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                   _("The hyperparameters of “%s” are inconsistent: %u layers, hidden size %u, "
                     "%u query heads, %u key/value heads of %u elements, MLP size %u, vocabulary "
                     "%" PRIu64 " (the heads must be grouped evenly and of even length)"),
                   hp->source != NULL ? hp->source : "?", hp->n_layers, hp->hidden, hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->ffn,
                   hp->vocab);
      return FALSE;
    }
  return TRUE;
}

static guint16 rd16 (const guint8 *p) { guint16 v; memcpy (&v, p, 2); return GUINT16_FROM_LE (v); }

static float
rdf32 (const guint8 *p)
{
  guint32 u;
  float f;

  memcpy (&u, p, 4);
  u = GUINT32_FROM_LE (u);
  memcpy (&f, &u, 4);
  return f;
}

gsize
amk_model_tensor_type_bytes (AmkModelTensorType type,
                             guint64            n)
{
  guint block = 1, bytes;

  switch (type)
    {
    case AMK_MODEL_TENSOR_F32:
      bytes = 4;
      break;
    case AMK_MODEL_TENSOR_F16:
    case AMK_MODEL_TENSOR_BF16:
      bytes = 2;
      break;
    default:
      if (!amk_dequant_block_size (type, &block, &bytes))
        return 0;
    }
  if (n % block != 0 || n / block > G_MAXSIZE / bytes)
    return 0;
  return (gsize) (n / block * bytes);
}

gboolean
amk_model_tensor_type_to_bf16 (AmkModelTensorType  type,
                               const guint8       *p,
                               gsize               n,
                               guint16            *out)
{
  switch (type)
    {
    case AMK_MODEL_TENSOR_F32:
      for (gsize i = 0; i < n; i++)
        out[i] = amk_float_to_bf16 (rdf32 (p + 4 * i));
      return TRUE;
    case AMK_MODEL_TENSOR_F16:
      for (gsize i = 0; i < n; i++)
        out[i] = amk_float_to_bf16 (amk_f16_to_float (rd16 (p + 2 * i)));
      return TRUE;
    case AMK_MODEL_TENSOR_BF16:
      for (gsize i = 0; i < n; i++)
        out[i] = rd16 (p + 2 * i);
      return TRUE;
    default:
      return amk_dequant_to_bf16 (type, p, n, out);
    }
}

gboolean
amk_model_permute_qk_rows (guint8   *rows,
                           gsize     n_rows,
                           gsize     row_bytes,
                           guint     n_heads,
                           gboolean  to_gguf,
                           GError  **error)
{
  g_autofree guint8 *head = NULL;
  gsize head_dim, half;

  if (n_heads == 0 || n_rows % n_heads != 0 || (n_rows / n_heads) % 2 != 0)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                   _("Cannot reorder %zu rows for the RoPE of %u heads: the rows must be a "
                     "multiple of twice the heads"), n_rows, n_heads);
      return FALSE;
    }
  head_dim = n_rows / n_heads;
  half = head_dim / 2;
  if (row_bytes == 0 || head_dim == 0)
    return TRUE;
  head = g_new (guint8, head_dim * row_bytes);
  /* llama.cpp's converter wrote gguf row (i * 2 + s) of a head from HF row (s * half + i) */
  for (gsize h = 0; h < n_heads; h++)
    {
      guint8 *base = rows + h * head_dim * row_bytes;

      memcpy (head, base, head_dim * row_bytes);
      for (gsize s = 0; s < 2; s++)
        for (gsize i = 0; i < half; i++)
          {
            const gsize gguf_row = i * 2 + s, hf_row = s * half + i;

            memcpy (base + (to_gguf ? gguf_row : hf_row) * row_bytes,
                    head + (to_gguf ? hf_row : gguf_row) * row_bytes, row_bytes);
          }
    }
  return TRUE;
}

gboolean
amk_model_unpermute_qk (guint16  *rows,
                        gsize     n_rows,
                        gsize     n_cols,
                        guint     n_heads,
                        GError  **error)
{
  g_return_val_if_fail (rows != NULL || n_rows == 0 || n_cols == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return amk_model_permute_qk_rows ((guint8 *) rows, n_rows, n_cols * sizeof (guint16), n_heads, FALSE, error);
}

static char *
shape_string (const guint64 *shape, guint n_dims)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < n_dims; i++)
    g_string_append_printf (s, "%s%" PRIu64, i > 0 ? ", " : "", shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

gint
amk_model_tensor_kept_dtype (const AmkModelTensor *t,
                             guint32               keep)
{
  gint dtype;

  switch (t->type)
    {
    case AMK_MODEL_TENSOR_Q8_0:
      dtype = AMK_DTYPE_Q8_0;
      break;
    case AMK_MODEL_TENSOR_Q4_K:
      dtype = AMK_DTYPE_Q4_K;
      break;
    case AMK_MODEL_TENSOR_Q5_K:
      dtype = AMK_DTYPE_Q5_K;
      break;
    case AMK_MODEL_TENSOR_Q6_K:
      dtype = AMK_DTYPE_Q6_K;
      break;
    case AMK_MODEL_TENSOR_Q5_0:
      dtype = AMK_DTYPE_Q5_0;
      break;
    case AMK_MODEL_TENSOR_Q5_1:
      dtype = AMK_DTYPE_Q5_1;
      break;
    default:
      return -1;
    }
  /* a matrix whose rows are whole blocks (a GGUF file's always are) */
  if (t->n_dims != 2 || !((keep >> dtype) & 1u) || t->shape[1] % amk_dtype_row_step ((AmkDType) dtype) != 0)
    return -1;
  if ((keep & AMK_KEEP_WHERE_GPU_FASTER) &&
      !(dtype == AMK_DTYPE_Q4_K || dtype == AMK_DTYPE_Q5_K ||
        (dtype == AMK_DTYPE_Q8_0 && t->shape[1] % 256 == 0) ||
        (dtype == AMK_DTYPE_Q6_K && t->shape[1] % 2048 == 0)))
    return -1;
  return dtype;
}

GBytes *
amk_model_spec_load_weight (AmkModelSpec    *spec,
                            AmkModelWeight   weight,
                            guint            layer,
                            guint64          rows,
                            guint64          cols,
                            guint32          keep,
                            AmkDType        *dtype,
                            const char     **name,
                            GError         **error)
{
  const AmkModelTensor *t = amk_model_spec_tensor (spec, weight, layer);
  const guint64 expected[2] = { rows > 0 ? rows : cols, cols };
  const guint n_dims = rows > 0 ? 2 : 1;
  g_autofree guint16 *data = NULL;
  const guint8 *stored;
  gint kept;

  if (t == NULL)
    {
      g_autofree char *missing = amk_model_spec_tensor_name (spec, weight, layer);

      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_MISSING_TENSOR,
                   _("The model “%s” has no tensor “%s”"), spec->source, missing);
      return NULL;
    }
  if (t->n_dims != n_dims || t->shape[0] != expected[0] || (n_dims == 2 && t->shape[1] != cols))
    {
      g_autofree char *got = shape_string (t->shape, t->n_dims);
      g_autofree char *want = shape_string (expected, n_dims);

      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                   _("The tensor “%s” of “%s” has the shape %s; the model’s hyperparameters "
                     "ask for %s"), t->name, t->file, got, want);
      return NULL;
    }
  if (t->type == AMK_MODEL_TENSOR_OTHER)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE,
                   _("The tensor “%s” of “%s” is of type %s, which cannot be converted to "
                     "bf16 (supported: F32, F16, BF16, and in GGUF files Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"),
                   t->name, t->file, t->type_name);
      return NULL;
    }
  /* (the parsers check this; a reader that did not is caught here, not by a crash) */
  if (amk_model_tensor_type_bytes (t->type, t->n_elements) != g_bytes_get_size (t->data))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("The tensor “%s” of “%s” has %zu bytes, not the %zu of its type and shape"),
                   t->name, t->file, g_bytes_get_size (t->data),
                   amk_model_tensor_type_bytes (t->type, t->n_elements));
      return NULL;
    }
  if (name != NULL)
    *name = t->name;
  stored = g_bytes_get_data (t->data, NULL);

  /* a matrix of a type the program takes: its blocks as they are (rows of whole blocks,
   * which a GGUF file's rows always are) */
  kept = amk_model_tensor_kept_dtype (t, keep);
  if (kept >= 0)
    {
      g_autofree guint8 *copy = NULL;
      const gsize size = g_bytes_get_size (t->data);

      *dtype = (AmkDType) kept;
      if (t->unpermute_heads == 0)
        return g_bytes_ref (t->data);
      copy = g_memdup2 (stored, size);
      if (!amk_model_permute_qk_rows (copy, (gsize) rows, size / (gsize) rows, t->unpermute_heads, FALSE, error))
        return NULL;
      return g_bytes_new_take (g_steal_pointer (&copy), size);
    }

  *dtype = AMK_DTYPE_BF16;
  /* bf16 as the program wants it: the mapped file's bytes themselves */
  if (t->type == AMK_MODEL_TENSOR_BF16 && t->unpermute_heads == 0 &&
      G_BYTE_ORDER == G_LITTLE_ENDIAN && ((guintptr) stored) % 2 == 0)
    return g_bytes_ref (t->data);
  data = g_try_new (guint16, MAX (t->n_elements, 1));
  if (data == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   _("Out of memory loading the tensor “%s”"), t->name);
      return NULL;
    }
  amk_model_tensor_type_to_bf16 (t->type, stored, (gsize) t->n_elements, data);
  if (t->unpermute_heads > 0 &&
      !amk_model_unpermute_qk (data, (gsize) expected[0], (gsize) cols, t->unpermute_heads, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&data), t->n_elements * sizeof (guint16));
}

GBytes *
amk_model_spec_load_bf16 (AmkModelSpec    *spec,
                          AmkModelWeight   weight,
                          guint            layer,
                          guint64          rows,
                          guint64          cols,
                          const char     **name,
                          GError         **error)
{
  AmkDType dtype;

  return amk_model_spec_load_weight (spec, weight, layer, rows, cols, 0, &dtype, name, error);
}

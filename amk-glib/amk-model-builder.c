/* amk-model-builder.c: a Llama decode step built with the op API from a GGUF file, and
 * greedy generation on the CPU executor or a launcher.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <glib/gi18n-lib.h>
#include <gio/gio.h>

#include "amk-glib.h"
#include "amk-gguf-private.h"
#include "amk-model-builder-private.h"

typedef struct {
  AmkGguf    *gguf;
  AmkProgram *program;
  const char *file;
} Loader;

/* Adds `name` of the file as a bf16 CONSTANT buffer of shape {rows, cols} (or {cols}
 * when rows is 0); with unpermute_heads > 0 undoes the converter's q/k permutation. */
static gint
load_weight (Loader     *l,
             const char *name,
             guint64     rows,
             guint64     cols,
             guint       unpermute_heads,
             GError    **error)
{
  const AmkGgufTensor *t = amk_gguf_find_tensor (l->gguf, name);
  g_autofree guint16 *data = NULL;
  g_autoptr(GBytes) bytes = NULL;
  gint64 shape[2];
  gsize n_dims;
  gint buf;

  if (t == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("The model file “%s” has no tensor “%s”"), l->file, name);
      return -1;
    }
  if (t->dims[0] != cols || (rows > 0 ? t->dims[1] != rows : t->n_dims != 1) ||
      t->n_elements != cols * MAX (rows, 1))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The tensor “%s” of “%s” has the wrong shape (expected %" PRIu64
                     " × %" PRIu64 ")"), name, l->file, rows, cols);
      return -1;
    }
  data = g_try_new (guint16, t->n_elements);
  if (data == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   _("Out of memory loading the tensor “%s”"), name);
      return -1;
    }
  if (!amk_gguf_tensor_to_bf16 (t, data, error))
    return -1;
  if (unpermute_heads > 0 && !amk_gguf_unpermute_qk (data, rows, cols, unpermute_heads, error))
    return -1;

  if (rows > 0)
    {
      shape[0] = (gint64) rows;
      shape[1] = (gint64) cols;
      n_dims = 2;
    }
  else
    {
      shape[0] = (gint64) cols;
      n_dims = 1;
    }
  buf = amk_program_add_buffer (l->program, name, AMK_DTYPE_BF16, shape, n_dims,
                                AMK_BUFFER_ROLE_CONSTANT, error);
  if (buf < 0)
    return -1;
  bytes = g_bytes_new_take (g_steal_pointer (&data), t->n_elements * sizeof (guint16));
  if (!amk_program_set_buffer_data (l->program, (guint) buf, bytes, error))
    return -1;
  return buf;
}

static gint
add_buffer (AmkProgram    *p,
            const char    *name,
            AmkDType       dtype,
            gint64         d0,
            gint64         d1,
            AmkBufferRole  role,
            GError       **error)
{
  gint64 shape[2] = { d0, d1 };

  return amk_program_add_buffer (p, name, dtype, shape, d1 > 0 ? 2 : 1, role, error);
}

static gboolean
get_u32 (AmkGguf *gguf, const char *arch, const char *key, guint32 *value, GError **error)
{
  g_autofree char *full = g_strdup_printf ("%s.%s", arch, key);

  return amk_gguf_get_u32 (gguf, full, value, error);
}

void
amk_model_build_free (AmkModelBuild *build)
{
  if (build == NULL)
    return;
  g_clear_object (&build->program);
  g_clear_object (&build->tokenizer);
  g_free (build->architecture);
  g_free (build);
}

/* A token id from the metadata: it must name a token of the vocabulary. */
static gboolean
get_token_id (AmkGguf      *gguf,
              AmkTokenizer *tok,
              const char   *file,
              const char   *key,
              guint32      *id,
              GError      **error)
{
  if (!amk_gguf_get_u32 (gguf, key, id, error))
    return FALSE;
  if (*id >= amk_tokenizer_get_vocab_size (tok))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The metadata key “%s” of the model file “%s” names the token %u, "
                     "outside the vocabulary of %u tokens"),
                   key, file, *id, amk_tokenizer_get_vocab_size (tok));
      return FALSE;
    }
  return TRUE;
}

static AmkTokenizer *
load_tokenizer (AmkGguf *gguf, const char *file, GError **error)
{
  const char * const *tokens;
  const char * const *merges;
  g_autofree gint32 *types = NULL;
  gsize n_tokens = 0, n_merges = 0, n_types = 0;
  const char *pre = "smollm";
  g_autoptr(AmkTokenizer) tok = NULL;
  guint32 id;
  gboolean add_bos;

  tokens = amk_gguf_get_string_array (gguf, "tokenizer.ggml.tokens", &n_tokens, error);
  if (tokens == NULL)
    return NULL;
  merges = amk_gguf_get_string_array (gguf, "tokenizer.ggml.merges", &n_merges, error);
  if (merges == NULL)
    return NULL;
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.token_type"))
    {
      types = amk_gguf_get_i32_array (gguf, "tokenizer.ggml.token_type", &n_types, error);
      if (types == NULL)
        return NULL;
    }
  tok = amk_tokenizer_new_from_vocab (tokens, merges, types, n_types, pre, error);
  if (tok == NULL)
    return NULL;
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.bos_token_id"))
    {
      if (!get_token_id (gguf, tok, file, "tokenizer.ggml.bos_token_id", &id, error))
        return NULL;
      amk_tokenizer_set_bos_id (tok, (gint32) id);
    }
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.eos_token_id"))
    {
      if (!get_token_id (gguf, tok, file, "tokenizer.ggml.eos_token_id", &id, error))
        return NULL;
      amk_tokenizer_set_eos_id (tok, (gint32) id);
    }
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.add_bos_token"))
    {
      if (!amk_gguf_get_bool (gguf, "tokenizer.ggml.add_bos_token", &add_bos, error))
        return NULL;
      amk_tokenizer_set_add_bos (tok, add_bos);
    }
  return g_steal_pointer (&tok);
}

/**
 * amk_model_build_from_gguf:
 * @path: a GGUF file of a llama-architecture model
 * @n_queues: the program's queue count
 * @context: the KV cache length (positions)
 * @error: return location for a #GError
 *
 * Loads every weight as a bf16 constant and builds one compiled decode step: the token
 * in element 0 of the tokens buffer at position pos goes in, the greedy next token
 * comes out in the same element and the logits in the logits buffer (an OUTPUT, for
 * sampling on the host); the KV caches are STATE buffers.
 *
 * Returns: (transfer full) (nullable): the build, free with amk_model_build_free()
 */
AmkModelBuild *
amk_model_build_from_gguf (const char  *path,
                           guint        n_queues,
                           guint        context,
                           GError     **error)
{
  g_autoptr(AmkGguf) gguf = NULL;
  g_autoptr(AmkModelBuild) build = NULL;
  g_autofree char *file = NULL;
  const char *arch = NULL;
  guint32 n_layers, hidden, n_heads, n_kv_heads, ffn;
  guint32 head_dim, kv_dim, model_context = 0;
  float theta = 10000.0f, eps = 1e-5f;
  const char *output_name;
  const AmkGgufTensor *embd;
  guint64 vocab;
  Loader l;
  AmkProgram *p;
  gint tokens, pos, x, q, k, v, attn, gate, up, act, logits, table, out_norm, out_w;

  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (n_queues > 0, NULL);
  g_return_val_if_fail (context > 0, NULL);

  file = g_filename_display_name (path);
  gguf = amk_gguf_open (path, error);
  if (gguf == NULL)
    return NULL;
  if (!amk_gguf_get_string (gguf, "general.architecture", &arch, NULL, error))
    return NULL;
  if (!g_str_equal (arch, "llama"))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                   _("The model “%s” has the architecture “%s”; only “llama” is supported"),
                   file, arch);
      return NULL;
    }
  if (!get_u32 (gguf, arch, "block_count", &n_layers, error) ||
      !get_u32 (gguf, arch, "embedding_length", &hidden, error) ||
      !get_u32 (gguf, arch, "attention.head_count", &n_heads, error) ||
      !get_u32 (gguf, arch, "feed_forward_length", &ffn, error))
    return NULL;
  n_kv_heads = n_heads;
  if (amk_gguf_has_key (gguf, "llama.attention.head_count_kv") &&
      !get_u32 (gguf, arch, "attention.head_count_kv", &n_kv_heads, error))
    return NULL;
  if (amk_gguf_has_key (gguf, "llama.context_length") &&
      !get_u32 (gguf, arch, "context_length", &model_context, error))
    return NULL;
  if (amk_gguf_has_key (gguf, "llama.rope.freq_base") &&
      !amk_gguf_get_f32 (gguf, "llama.rope.freq_base", &theta, error))
    return NULL;
  if (amk_gguf_has_key (gguf, "llama.attention.layer_norm_rms_epsilon") &&
      !amk_gguf_get_f32 (gguf, "llama.attention.layer_norm_rms_epsilon", &eps, error))
    return NULL;
  if (n_layers == 0 || hidden == 0 || n_heads == 0 || n_kv_heads == 0 || ffn == 0 ||
      hidden % n_heads != 0 || n_heads % n_kv_heads != 0 || (hidden / n_heads) % 2 != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The model “%s” has inconsistent hyperparameters"), file);
      return NULL;
    }
  head_dim = hidden / n_heads;
  kv_dim = n_kv_heads * head_dim;

  embd = amk_gguf_find_tensor (gguf, "token_embd.weight");
  if (embd == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("The model file “%s” has no tensor “%s”"), file, "token_embd.weight");
      return NULL;
    }
  vocab = embd->dims[1];
  output_name = amk_gguf_find_tensor (gguf, "output.weight") != NULL ? "output.weight"
                                                                    : "token_embd.weight";

  build = g_new0 (AmkModelBuild, 1);
  build->tokenizer = load_tokenizer (gguf, file, error);
  if (build->tokenizer == NULL)
    return NULL;
  /* every token id must have a row in the embedding (EMBED would refuse it at run time) */
  if (amk_tokenizer_get_vocab_size (build->tokenizer) > vocab)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The model file “%s” has %u tokens in “%s” but only %" PRIu64
                     " rows in the tensor “%s”"), file,
                   amk_tokenizer_get_vocab_size (build->tokenizer), "tokenizer.ggml.tokens",
                   vocab, "token_embd.weight");
      return NULL;
    }
  build->bos_id = amk_tokenizer_get_bos_id (build->tokenizer);
  build->eos_id = amk_tokenizer_get_eos_id (build->tokenizer);
  build->vocab_size = (guint) vocab;
  build->context = context;
  build->n_layers = n_layers;
  build->hidden = hidden;
  build->architecture = g_strdup (arch);
  build->model_context = model_context;
  build->program = p = amk_program_new (n_queues);
  l.gguf = gguf;
  l.program = p;
  l.file = file;

  if ((tokens = add_buffer (p, "tokens", AMK_DTYPE_I32, 1, 0, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
      (pos = add_buffer (p, "pos", AMK_DTYPE_I32, 1, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (x = add_buffer (p, "x", AMK_DTYPE_F32, hidden, 0, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
      (q = add_buffer (p, "q", AMK_DTYPE_F32, hidden, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (k = add_buffer (p, "k", AMK_DTYPE_F32, kv_dim, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (v = add_buffer (p, "v", AMK_DTYPE_F32, kv_dim, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (attn = add_buffer (p, "attn", AMK_DTYPE_F32, hidden, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (gate = add_buffer (p, "gate", AMK_DTYPE_F32, ffn, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (up = add_buffer (p, "up", AMK_DTYPE_F32, ffn, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (act = add_buffer (p, "act", AMK_DTYPE_F32, ffn, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (logits = add_buffer (p, "logits", AMK_DTYPE_F32, (gint64) vocab, 0, AMK_BUFFER_ROLE_OUTPUT, error)) < 0)
    return NULL;
  build->tokens = tokens;
  build->pos = pos;
  build->logits = logits;

  if ((table = load_weight (&l, "token_embd.weight", vocab, hidden, 0, error)) < 0)
    return NULL;
  if (amk_program_op_embed (p, x, table, tokens, 0, error) < 0)
    return NULL;

  for (guint32 i = 0; i < n_layers; i++)
    {
      g_autofree char *n_attn_norm = g_strdup_printf ("blk.%u.attn_norm.weight", i);
      g_autofree char *n_q = g_strdup_printf ("blk.%u.attn_q.weight", i);
      g_autofree char *n_k = g_strdup_printf ("blk.%u.attn_k.weight", i);
      g_autofree char *n_v = g_strdup_printf ("blk.%u.attn_v.weight", i);
      g_autofree char *n_o = g_strdup_printf ("blk.%u.attn_output.weight", i);
      g_autofree char *n_ffn_norm = g_strdup_printf ("blk.%u.ffn_norm.weight", i);
      g_autofree char *n_gate = g_strdup_printf ("blk.%u.ffn_gate.weight", i);
      g_autofree char *n_up = g_strdup_printf ("blk.%u.ffn_up.weight", i);
      g_autofree char *n_down = g_strdup_printf ("blk.%u.ffn_down.weight", i);
      g_autofree char *n_kc = g_strdup_printf ("blk.%u.k_cache", i);
      g_autofree char *n_vc = g_strdup_printf ("blk.%u.v_cache", i);
      gint an, wq, wk, wv, wo, fn, wg, wu, wd, kc, vc;

      if ((an = load_weight (&l, n_attn_norm, 0, hidden, 0, error)) < 0 ||
          (wq = load_weight (&l, n_q, hidden, hidden, n_heads, error)) < 0 ||
          (wk = load_weight (&l, n_k, kv_dim, hidden, n_kv_heads, error)) < 0 ||
          (wv = load_weight (&l, n_v, kv_dim, hidden, 0, error)) < 0 ||
          (wo = load_weight (&l, n_o, hidden, hidden, 0, error)) < 0 ||
          (fn = load_weight (&l, n_ffn_norm, 0, hidden, 0, error)) < 0 ||
          (wg = load_weight (&l, n_gate, ffn, hidden, 0, error)) < 0 ||
          (wu = load_weight (&l, n_up, ffn, hidden, 0, error)) < 0 ||
          (wd = load_weight (&l, n_down, hidden, ffn, 0, error)) < 0 ||
          (kc = add_buffer (p, n_kc, AMK_DTYPE_BF16, context, kv_dim, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
          (vc = add_buffer (p, n_vc, AMK_DTYPE_BF16, context, kv_dim, AMK_BUFFER_ROLE_STATE, error)) < 0)
        return NULL;

      if (amk_program_op_matvec (p, q, wq, x, -1, -1, an, eps, error) < 0 ||
          amk_program_op_matvec (p, k, wk, x, -1, -1, an, eps, error) < 0 ||
          amk_program_op_matvec (p, v, wv, x, -1, -1, an, eps, error) < 0 ||
          amk_program_op_rope_kv (p, q, k, v, kc, vc, pos, head_dim, n_heads, n_kv_heads,
                                  theta, 0.0f, 1.0f, 4.0f, 8192, error) < 0 ||
          amk_program_op_attention (p, attn, q, kc, vc, pos, head_dim, n_heads, n_kv_heads,
                                    0, 1.0f / sqrtf ((float) head_dim), error) < 0 ||
          amk_program_op_matvec (p, x, wo, attn, -1, x, -1, 0.0f, error) < 0 ||
          amk_program_op_matvec (p, gate, wg, x, -1, -1, fn, eps, error) < 0 ||
          amk_program_op_matvec (p, up, wu, x, -1, -1, fn, eps, error) < 0 ||
          amk_program_op_silu_mul (p, act, gate, up, error) < 0 ||
          amk_program_op_matvec (p, x, wd, act, -1, x, -1, 0.0f, error) < 0)
        return NULL;
    }

  if ((out_norm = load_weight (&l, "output_norm.weight", 0, hidden, 0, error)) < 0)
    return NULL;
  if (g_str_equal (output_name, "token_embd.weight"))
    out_w = table;   /* tied embeddings */
  else if ((out_w = load_weight (&l, output_name, vocab, hidden, 0, error)) < 0)
    return NULL;
  if (amk_program_op_matvec (p, logits, out_w, x, -1, -1, out_norm, eps, error) < 0 ||
      amk_program_op_argmax (p, tokens, 0, logits, error) < 0)
    return NULL;
  if (!amk_program_compile (p, error))
    return NULL;
  return g_steal_pointer (&build);
}

/* One decode step's executor: the CPU executor, or a launcher holding the program. */
typedef struct {
  AmkCpuExecutor *cpu;
  AmkLauncher    *gpu;
} Runner;

static gboolean
upload_i32 (Runner *r, gint buffer, gint32 value, GError **error)
{
  g_autoptr(GBytes) bytes = g_bytes_new (&value, sizeof value);

  return r->gpu != NULL ? amk_launcher_upload (r->gpu, (guint) buffer, bytes, error)
                        : amk_cpu_executor_upload (r->cpu, (guint) buffer, bytes, error);
}

static gboolean
run_step (Runner *r, GError **error)
{
  return r->gpu != NULL ? amk_launcher_launch (r->gpu, NULL, error)
                        : amk_cpu_executor_run (r->cpu, error);
}

static GBytes *
download (Runner *r, gint buffer, GError **error)
{
  return r->gpu != NULL ? amk_launcher_download (r->gpu, (guint) buffer, error)
                        : amk_cpu_executor_download (r->cpu, (guint) buffer, error);
}

gboolean
amk_model_generate_full (AmkModelBuild  *build,
                         AmkLauncher    *launcher,
                             const char     *prompt,
                             guint           max_tokens,
                             GString        *out,
                             gint32        **generated,
                             gsize          *n_generated,
                             guint          *n_prompt,
                             GError        **error)
{
  g_autoptr(AmkCpuExecutor) ex = NULL;
  Runner r = { NULL, launcher };
  g_autofree gint32 *ids = NULL;
  g_autoptr(GArray) gen = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree char *text = NULL;
  gsize n_ids = 0;
  gint32 token = 0;

  g_return_val_if_fail (build != NULL, FALSE);
  g_return_val_if_fail (prompt != NULL, FALSE);
  g_return_val_if_fail (out != NULL, FALSE);

  ids = amk_tokenizer_encode (build->tokenizer, prompt, TRUE, &n_ids, error);
  if (ids == NULL)
    return FALSE;
  if (n_ids == 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   _("The prompt encodes to no tokens"));
      return FALSE;
    }
  if (n_ids + max_tokens > build->context)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   _("The prompt (%zu tokens) and %u new tokens do not fit in the "
                     "context of %u tokens"), n_ids, max_tokens, build->context);
      return FALSE;
    }
  if (n_prompt != NULL)
    *n_prompt = (guint) n_ids;

  if (launcher != NULL)
    {
      if (!amk_launcher_load (launcher, build->program, error))
        return FALSE;
    }
  else
    {
      ex = amk_cpu_executor_new (build->program, error);
      if (ex == NULL)
        return FALSE;
      r.cpu = ex;
    }

  for (gsize i = 0; i < n_ids + max_tokens; i++)
    {
      g_autoptr(GBytes) result = NULL;
      gsize size;
      const gint32 *data;

      if (i < n_ids)
        token = ids[i];
      if (i >= n_ids && (guint) gen->len >= max_tokens)
        break;
      /* a generated token is already where EMBED reads it: ARGMAX wrote it there */
      if ((i < n_ids && !upload_i32 (&r, build->tokens, token, error)) ||
          !upload_i32 (&r, build->pos, (gint32) i, error) ||
          !run_step (&r, error))
        return FALSE;
      if (i + 1 < n_ids)
        continue;   /* the prompt's next token is known */
      result = download (&r, build->tokens, error);
      if (result == NULL)
        return FALSE;
      data = g_bytes_get_data (result, &size);
      g_assert (size == sizeof (gint32));
      token = data[0];
      if (build->eos_id >= 0 && token == build->eos_id)
        break;
      g_array_append_val (gen, token);
      if (gen->len >= max_tokens)
        break;
    }

  text = amk_tokenizer_decode (build->tokenizer, (const gint32 *) gen->data, gen->len, error);
  if (text == NULL)
    return FALSE;
  g_string_append (out, text);
  if (n_generated != NULL)
    *n_generated = gen->len;
  if (generated != NULL)
    *generated = (gint32 *) g_array_free (g_steal_pointer (&gen), FALSE);
  return TRUE;
}

/**
 * amk_model_generate_cpu:
 * @build: a model build
 * @prompt: the prompt text
 * @max_tokens: the most tokens to generate
 * @out: where the generated text is appended
 * @error: return location for a #GError
 *
 * Greedy generation on a new #AmkCpuExecutor: runs the step for every prompt token,
 * then feeds each argmax back until EOS or @max_tokens tokens.
 *
 * Returns: whether it worked
 */
gboolean
amk_model_generate_cpu (AmkModelBuild  *build,
                        const char     *prompt,
                        guint           max_tokens,
                        GString        *out,
                        GError        **error)
{
  return amk_model_generate_full (build, NULL, prompt, max_tokens, out, NULL, NULL, NULL, error);
}

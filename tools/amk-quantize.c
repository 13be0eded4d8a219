/* amk-quantize.c: a model rewritten as a GGUF file of another tensor type mix.
 *
 * A GGUF input keeps its metadata (every key, in its order; general.file_type becomes
 * the mix's) and its tensors in their order and layout; a Hugging Face checkpoint
 * folder is read with the library's reader (config.json, tokenizer.json, safetensors)
 * and written in llama.cpp's conventions (amk-gguf-convert.c), so that the GGUF reader
 * loads the same model. Every tensor is decoded to floats and encoded in its new type,
 * except where the type does not change (then its bytes are copied) or amk cannot
 * decode it (copied too).
 *
 * The mixes follow llama.cpp's usual ones, simplified:
 *   q8_0    every matrix Q8_0
 *   q6_k    every matrix Q6_K
 *   q4_k_m  matrices Q4_K, but the output matrix (the token embedding where the two
 *           are tied) Q6_K, and attn_v and ffn_down Q6_K in the layers llama.cpp gives
 *           more bits: the first and last eighth, and every third layer between
 *   q5_k_m  as q4_k_m with Q5_K
 *   f16, bf16  every matrix converted
 * Vectors (norms, rope_freqs) are F32. A matrix whose rows are not a whole number of
 * K blocks (256 values) takes, as llama.cpp does, Q5_0 for Q4_K, Q5_1 for Q5_K and Q8_0
 * for Q6_K (blocks of 32), and rows that are not whole blocks of 32 either take F16.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <gio/gio.h>

#include <amk-glib/amk-glib.h>

#include "amk-gguf-private.h"
#include "amk-gguf-writer-private.h"
#include "amk-gguf-convert-private.h"
#include "amk-model-readers-private.h"
#include "amk-quant-private.h"
#include "amk-quantize.h"

/* llama.cpp's llama_ftype of each mix, for general.file_type */
static const struct {
  const char *name;
  guint32     file_type;
} mixes[] = {
  [AMK_QUANTIZE_Q8_0] = { "q8_0", 7 },
  [AMK_QUANTIZE_Q4_K_M] = { "q4_k_m", 15 },
  [AMK_QUANTIZE_Q5_K_M] = { "q5_k_m", 17 },
  [AMK_QUANTIZE_Q6_K] = { "q6_k", 18 },
  [AMK_QUANTIZE_F16] = { "f16", 1 },
  [AMK_QUANTIZE_BF16] = { "bf16", 32 },
};

#define QUANTIZATION_VERSION 2
/* tensors of fewer elements are quantized in the calling thread */
#define MIN_PARALLEL         (1u << 16)

gboolean
amk_quantize_mix_from_name (const char      *name,
                            AmkQuantizeMix  *mix,
                            GError         **error)
{
  g_autoptr(GString) known = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (mixes); i++)
    {
      if (g_ascii_strcasecmp (name, mixes[i].name) == 0)
        {
          *mix = (AmkQuantizeMix) i;
          return TRUE;
        }
      g_string_append_printf (known, "%s%s", i > 0 ? ", " : "", mixes[i].name);
    }
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
               _("“%s” is not a type amk quantizes to: give one of %s"), name, known->str);
  return FALSE;
}

const char *
amk_quantize_mix_name (AmkQuantizeMix mix)
{
  return mixes[mix].name;
}

gboolean
amk_quantize_check_input (const char  *path,
                          GError     **error)
{
  g_autofree char *display = g_filename_display_name (path);
  g_autofree char *config = g_build_filename (path, "config.json", NULL);

  if (!g_file_test (path, G_FILE_TEST_EXISTS))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("There is no model file or folder “%s”"), display);
      return FALSE;
    }
  if (g_file_test (path, G_FILE_TEST_IS_DIR) && !g_file_test (config, G_FILE_TEST_EXISTS))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("“%s” is a folder without a config.json, not a Hugging Face checkpoint"),
                   display);
      return FALSE;
    }
  return TRUE;
}

/* ---- the plan: one job per output tensor ------------------------------------------- */

typedef struct {
  char               *name;          /* in the output */
  guint               n_dims;
  guint64             dims[AMK_GGUF_MAX_DIMS];   /* ggml order */
  guint64             n_elements;
  AmkModelTensorType  src_type;      /* OTHER: copied as it is */
  AmkGgmlType         src_ggml;      /* the source's ggml type (GGUF input) */
  const guint8       *src;
  gsize               src_bytes;
  const float        *src_floats;    /* instead of src: values made here (rope_freqs) */
  guint               permute_heads; /* llama's q/k rows: permuted for this many heads */
  AmkGgmlType         out_type;
} Job;

static void
job_clear (Job *job)
{
  g_free (job->name);
}

/* The ggml type of a neutral one; -1 for OTHER. */
static gint
ggml_type (AmkModelTensorType type)
{
  switch (type)
    {
    case AMK_MODEL_TENSOR_F32: return AMK_GGML_TYPE_F32;
    case AMK_MODEL_TENSOR_F16: return AMK_GGML_TYPE_F16;
    case AMK_MODEL_TENSOR_BF16: return AMK_GGML_TYPE_BF16;
    case AMK_MODEL_TENSOR_Q8_0: return AMK_GGML_TYPE_Q8_0;
    case AMK_MODEL_TENSOR_Q4_0: return AMK_GGML_TYPE_Q4_0;
    case AMK_MODEL_TENSOR_Q4_1: return AMK_GGML_TYPE_Q4_1;
    case AMK_MODEL_TENSOR_Q5_0: return AMK_GGML_TYPE_Q5_0;
    case AMK_MODEL_TENSOR_Q5_1: return AMK_GGML_TYPE_Q5_1;
    case AMK_MODEL_TENSOR_Q2_K: return AMK_GGML_TYPE_Q2_K;
    case AMK_MODEL_TENSOR_Q3_K: return AMK_GGML_TYPE_Q3_K;
    case AMK_MODEL_TENSOR_Q4_K: return AMK_GGML_TYPE_Q4_K;
    case AMK_MODEL_TENSOR_Q5_K: return AMK_GGML_TYPE_Q5_K;
    case AMK_MODEL_TENSOR_Q6_K: return AMK_GGML_TYPE_Q6_K;
    default: return -1;
    }
}

/* Whether layer i of n takes more bits in the _M mixes: llama.cpp's choice (the first
 * and the last eighth of the layers, and every third layer between them). */
static gboolean
more_bits (guint i, guint n)
{
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The layer of a tensor named blk.N.*, or -1. */
static gint
layer_of (const char *name)
{
  guint64 layer = 0;
  const char *end = NULL;

  if (!g_str_has_prefix (name, "blk."))
    return -1;
  layer = g_ascii_strtoull (name + 4, (char **) &end, 10);
  return end != name + 4 && *end == '.' && layer < G_MAXINT ? (gint) layer : -1;
}

/* The type of a matrix named `name` with rows of `row` elements (see the top), in a
 * model of n_layers layers whose output matrix is the token embedding if `tied`. */
static AmkModelTensorType
mix_type (AmkQuantizeMix mix, const char *name, guint64 row, guint n_layers, gboolean tied)
{
  AmkModelTensorType t = AMK_MODEL_TENSOR_Q8_0;

  switch (mix)
    {
    case AMK_QUANTIZE_Q8_0: t = AMK_MODEL_TENSOR_Q8_0; break;
    case AMK_QUANTIZE_Q6_K: t = AMK_MODEL_TENSOR_Q6_K; break;
    case AMK_QUANTIZE_F16: t = AMK_MODEL_TENSOR_F16; break;
    case AMK_QUANTIZE_BF16: t = AMK_MODEL_TENSOR_BF16; break;
    case AMK_QUANTIZE_Q4_K_M:
    case AMK_QUANTIZE_Q5_K_M:
      {
        const gint layer = layer_of (name);
        const gboolean layered = g_str_has_suffix (name, ".attn_v.weight") ||
                                 g_str_has_suffix (name, ".ffn_down.weight");

        if (g_str_equal (name, "output.weight") || (tied && g_str_equal (name, "token_embd.weight")) ||
            (layered && layer >= 0 && more_bits ((guint) layer, n_layers)))
          t = AMK_MODEL_TENSOR_Q6_K;
        else
          t = mix == AMK_QUANTIZE_Q4_K_M ? AMK_MODEL_TENSOR_Q4_K : AMK_MODEL_TENSOR_Q5_K;
        break;
      }
    }
  /* rows that are no whole K blocks: the 32-value type of about the same precision */
  if (row % 256 != 0)
    switch (t)
      {
      case AMK_MODEL_TENSOR_Q4_K: t = AMK_MODEL_TENSOR_Q5_0; break;
      case AMK_MODEL_TENSOR_Q5_K: t = AMK_MODEL_TENSOR_Q5_1; break;
      case AMK_MODEL_TENSOR_Q6_K: t = AMK_MODEL_TENSOR_Q8_0; break;
      default: break;
      }
  if (row % 32 != 0 && t != AMK_MODEL_TENSOR_F16 && t != AMK_MODEL_TENSOR_BF16)
    t = AMK_MODEL_TENSOR_F16;
  return t;
}

/* Sets every job's out_type: the mix's type for a matrix, F32 for anything else; the
 * source's own type where amk cannot decode it. The layers are counted as the blk.N
 * tensors name them; the output matrix is tied to the embedding where there is none. */
static void
choose_types (GArray *jobs, AmkQuantizeMix mix)
{
  guint n_layers = 0;
  gboolean tied = TRUE;

  for (guint i = 0; i < jobs->len; i++)
    {
      const Job *job = &g_array_index (jobs, Job, i);
      const gint layer = layer_of (job->name);

      if (layer >= 0 && (guint) layer >= n_layers)
        n_layers = (guint) layer + 1;
      if (g_str_equal (job->name, "output.weight"))
        tied = FALSE;
    }
  for (guint i = 0; i < jobs->len; i++)
    {
      Job *job = &g_array_index (jobs, Job, i);

      if (job->src_floats != NULL)
        job->out_type = AMK_GGML_TYPE_F32;
      else if (job->src_type == AMK_MODEL_TENSOR_OTHER)
        job->out_type = job->src_ggml;
      else if (job->n_dims == 2)
        job->out_type = (AmkGgmlType) ggml_type (mix_type (mix, job->name, job->dims[0], n_layers, tied));
      else
        job->out_type = AMK_GGML_TYPE_F32;
    }
}

/* Whether `a` and `b` are the same file (FALSE if either is not there). */
static gboolean
same_file (const char *a, const char *b)
{
  GStatBuf sa, sb;

  return g_stat (a, &sa) == 0 && g_stat (b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

/* A GGUF input: its keys, in its order, and its tensors. */
static gboolean
plan_gguf (AmkGguf *gguf, AmkGgufWriter *w, GArray *jobs, GError **error)
{
  for (gsize i = 0; i < amk_gguf_get_n_keys (gguf); i++)
    if (!amk_gguf_writer_copy_key (w, gguf, amk_gguf_get_key (gguf, i), error))
      return FALSE;
  for (gsize i = 0; i < amk_gguf_get_n_tensors (gguf); i++)
    {
      const AmkGgufTensor *t = amk_gguf_get_tensor (gguf, i);
      Job job = { 0 };

      job.name = g_strdup (t->name);
      job.n_dims = t->n_dims;
      memcpy (job.dims, t->dims, sizeof job.dims);
      job.n_elements = t->n_elements;
      job.src_type = amk_ggml_type_to_model (t->type);
      job.src_ggml = t->type;
      job.src = t->data;
      job.src_bytes = t->n_bytes;
      g_array_append_val (jobs, job);
    }
  return TRUE;
}

/* One weight of a checkpoint as a job: its GGUF name, its shape in ggml order. */
static gboolean
add_hf_job (AmkModelSpec *spec, AmkModelWeight weight, guint layer, gboolean permuted,
            GArray *jobs, GError **error)
{
  const AmkModelParams *hp = &spec->params;
  const AmkModelTensor *t = amk_model_spec_tensor (spec, weight, layer);
  Job job = { 0 };

  if (t == NULL)
    {
      g_autofree char *name = amk_model_spec_tensor_name (spec, weight, layer);

      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_MISSING_TENSOR,
                   _("The checkpoint “%s” has no tensor “%s”"), spec->source, name);
      return FALSE;
    }
  if (t->type == AMK_MODEL_TENSOR_OTHER || t->n_dims > AMK_GGUF_MAX_DIMS)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE,
                   _("The tensor “%s” of “%s” is of type %s, which amk cannot convert "
                     "(supported: BF16, F16, F32)"), t->name, t->file, t->type_name);
      return FALSE;
    }
  job.name = amk_gguf_model_tensor_name (weight, layer);
  job.n_dims = t->n_dims;
  for (guint d = 0; d < AMK_GGUF_MAX_DIMS; d++)
    job.dims[d] = d < t->n_dims ? t->shape[t->n_dims - 1 - d] : 1;
  job.n_elements = t->n_elements;
  job.src_type = t->type;
  job.src = g_bytes_get_data (t->data, &job.src_bytes);
  if (permuted && weight == AMK_MODEL_WEIGHT_ATTN_Q)
    job.permute_heads = hp->n_heads;
  else if (permuted && weight == AMK_MODEL_WEIGHT_ATTN_K)
    job.permute_heads = hp->n_kv_heads;
  g_array_append_val (jobs, job);
  return TRUE;
}

/* A checkpoint folder: llama.cpp's keys and tensor names, in llama.cpp's order. */
static gboolean
plan_hf (AmkModelSpec *spec, const char *dir, AmkGgufWriter *w,
         GArray *jobs, float **rope_freqs, GError **error)
{
  const AmkModelParams *hp = &spec->params;
  const gboolean permuted = !g_str_equal (hp->architecture, "qwen3");
  g_autofree char *base = g_path_get_basename (dir);
  g_autofree char *name = g_filename_display_name (base);
  GError *local = NULL;
  guint context = 0;
  gsize n_freqs = 0;

  if (!amk_gguf_convert_read_context (dir, &context, error))
    return FALSE;
  amk_gguf_convert_params (w, hp, context);
  amk_gguf_writer_set_string (w, "general.name", name, strlen (name));
  *rope_freqs = amk_gguf_convert_rope_freqs (w, hp, &n_freqs, &local);
  if (local != NULL)
    {
      g_propagate_error (error, local);
      return FALSE;
    }
  if (!amk_gguf_convert_tokenizer (w, spec->tokenizer, spec->source, error))
    return FALSE;

  if (!add_hf_job (spec, AMK_MODEL_WEIGHT_TOKEN_EMBD, 0, permuted, jobs, error))
    return FALSE;
  if (*rope_freqs != NULL)
    {
      Job job = { 0 };

      job.name = g_strdup ("rope_freqs.weight");
      job.n_dims = 1;
      job.dims[0] = n_freqs;
      job.dims[1] = job.dims[2] = job.dims[3] = 1;
      job.n_elements = n_freqs;
      job.src_type = AMK_MODEL_TENSOR_F32;
      job.src_floats = *rope_freqs;
      job.out_type = AMK_GGML_TYPE_F32;
      g_array_append_val (jobs, job);
    }
  for (guint layer = 0; layer < hp->n_layers; layer++)
    for (guint weight = AMK_MODEL_WEIGHT_FIRST_LAYER; weight < AMK_MODEL_N_WEIGHTS; weight++)
      {
        if ((weight == AMK_MODEL_WEIGHT_ATTN_Q_NORM || weight == AMK_MODEL_WEIGHT_ATTN_K_NORM) &&
            !hp->qk_norm)
          continue;
        if (!add_hf_job (spec, weight, layer, permuted, jobs, error))
          return FALSE;
      }
  if (!add_hf_job (spec, AMK_MODEL_WEIGHT_OUTPUT_NORM, 0, permuted, jobs, error))
    return FALSE;
  if (!hp->tied_embeddings &&
      !add_hf_job (spec, AMK_MODEL_WEIGHT_OUTPUT, 0, permuted, jobs, error))
    return FALSE;
  return TRUE;
}

/* ---- converting one tensor --------------------------------------------------------- */

typedef struct {
  AmkModelTensorType  type;
  const float        *x;
  gsize               n;
  guint8             *out;
  const char         *name;
  gboolean            ok;
} Chunk;

static gpointer
quantize_chunk (gpointer data)
{
  Chunk *c = data;

  c->ok = amk_quantize (c->type, c->x, c->n, c->out, c->name, NULL);
  return NULL;
}

/* amk_quantize() over the blocks of x, split between the processors. */
static gboolean
quantize_parallel (AmkModelTensorType type, const float *x, gsize n, guint8 *out,
                   const char *name, GError **error)
{
  guint block = 1, block_bytes = 0, n_threads = MIN (g_get_num_processors (), 16);
  gsize n_blocks, per;
  Chunk chunks[16];
  GThread *threads[16] = { NULL };
  gboolean ok = TRUE;

  if (type == AMK_MODEL_TENSOR_F32 || type == AMK_MODEL_TENSOR_F16 || type == AMK_MODEL_TENSOR_BF16)
    return amk_quantize (type, x, n, out, name, error);
  if (n < MIN_PARALLEL || n_threads < 2 || !amk_ggml_type_size ((AmkGgmlType) ggml_type (type), &block, &block_bytes))
    return amk_quantize (type, x, n, out, name, error);
  n_blocks = n / block;
  per = (n_blocks + n_threads - 1) / n_threads;
  for (guint i = 0; i < n_threads; i++)
    {
      gsize first = MIN (i * per, n_blocks), last = MIN (first + per, n_blocks);

      chunks[i] = (Chunk) { type, x + first * block, (last - first) * block,
                            out + first * block_bytes, name, TRUE };
      /* where no thread can start, the chunk runs here */
      if (last > first &&
          (threads[i] = g_thread_try_new ("amk-quantize", quantize_chunk, &chunks[i], NULL)) == NULL)
        quantize_chunk (&chunks[i]);
    }
  for (guint i = 0; i < n_threads; i++)
    if (threads[i] != NULL)
      {
        g_thread_join (threads[i]);
        ok = ok && chunks[i].ok;
      }
  /* the message names the tensor's element: quantized again in one piece to find it */
  return ok || amk_quantize (type, x, n, out, name, error);
}

static gboolean
convert (const Job *job, AmkGgufWriter *w, gsize index, GError **error)
{
  const AmkModelTensorType out_type = amk_ggml_type_to_model (job->out_type);
  const gsize out_bytes = amk_gguf_writer_tensor_bytes (w, index);
  g_autofree float *x = NULL;
  g_autofree guint8 *out = NULL;

  if (job->src_floats == NULL && job->src_type != AMK_MODEL_TENSOR_OTHER &&
      amk_model_tensor_type_bytes (job->src_type, job->n_elements) != job->src_bytes)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("The tensor “%s” has %zu bytes, not the %zu of its type and shape"),
                   job->name, job->src_bytes,
                   amk_model_tensor_type_bytes (job->src_type, job->n_elements));
      return FALSE;
    }
  /* the same type (or one amk cannot decode): the bytes as they are */
  if (job->src_floats == NULL && job->permute_heads == 0 &&
      (job->src_type == AMK_MODEL_TENSOR_OTHER || (gint) job->out_type == ggml_type (job->src_type)))
    return amk_gguf_writer_write_tensor (w, job->src, job->src_bytes, error);

  if (job->src_floats == NULL)
    {
      x = g_try_new (float, MAX (job->n_elements, 1));
      if (x == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                       _("Out of memory converting the tensor “%s”"), job->name);
          return FALSE;
        }
      if (!amk_quant_to_float (job->src_type, job->src, job->n_elements, x))
        g_assert_not_reached ();   /* (every type but OTHER decodes) */
      if (job->permute_heads > 0 &&
          !amk_gguf_convert_permute_qk (x, job->dims[1], job->dims[0], job->permute_heads, error))
        {
          g_prefix_error (error, _("The tensor “%s”: "), job->name);
          return FALSE;
        }
    }
  out = g_try_malloc (MAX (out_bytes, 1));
  if (out == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   _("Out of memory converting the tensor “%s”"), job->name);
      return FALSE;
    }
  if (!quantize_parallel (out_type, x != NULL ? x : job->src_floats, job->n_elements, out,
                          job->name, error))
    return FALSE;
  return amk_gguf_writer_write_tensor (w, out, out_bytes, error);
}

/* ---- the whole file ---------------------------------------------------------------- */

gboolean
amk_quantize_model (const char           *in,
                    const char           *out,
                    AmkQuantizeMix        mix,
                    AmkQuantizeProgress   progress,
                    gpointer              user_data,
                    AmkQuantizeSummary   *summary,
                    GCancellable         *cancellable,
                    GError              **error)
{
  g_autoptr(AmkGguf) gguf = NULL;
  g_autoptr(AmkModelSpec) spec = NULL;
  g_autoptr(AmkGgufWriter) w = amk_gguf_writer_new ();
  g_autoptr(GArray) jobs = g_array_new (FALSE, TRUE, sizeof (Job));
  g_autofree float *rope_freqs = NULL;
  g_autofree char *out_display = g_filename_display_name (out);
  g_autofree char *out_tmp = g_strconcat (out, ".tmp", NULL);
  gboolean is_dir;

  g_return_val_if_fail (in != NULL && out != NULL && summary != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  memset (summary, 0, sizeof *summary);
  g_array_set_clear_func (jobs, (GDestroyNotify) job_clear);
  if (!amk_quantize_check_input (in, error))
    return FALSE;
  /* the output is written through out.tmp, which is removed first: neither may be the
   * input */
  if (same_file (in, out) || same_file (in, out_tmp))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS,
                   _("“%s” is the model being quantized: give another output file"),
                   same_file (in, out) ? out_display : out_tmp);
      return FALSE;
    }
  if (g_file_test (out, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_IS_DIRECTORY,
                   _("“%s” is a folder: give the output file’s name"), out_display);
      return FALSE;
    }

  is_dir = g_file_test (in, G_FILE_TEST_IS_DIR);
  if (is_dir)
    {
      spec = amk_hf_model_read (in, error);
      if (spec == NULL || !plan_hf (spec, in, w, jobs, &rope_freqs, error))
        return FALSE;
    }
  else
    {
      gguf = amk_gguf_open (in, error);
      if (gguf == NULL || !plan_gguf (gguf, w, jobs, error))
        return FALSE;
    }
  choose_types (jobs, mix);
  amk_gguf_writer_set_u32 (w, "general.file_type", mixes[mix].file_type);
  if (mix != AMK_QUANTIZE_F16 && mix != AMK_QUANTIZE_BF16)
    amk_gguf_writer_set_u32 (w, "general.quantization_version", QUANTIZATION_VERSION);
  else
    amk_gguf_writer_remove_key (w, "general.quantization_version");

  for (guint i = 0; i < jobs->len; i++)
    {
      const Job *job = &g_array_index (jobs, Job, i);

      if (!amk_gguf_writer_add_tensor (w, job->name, job->out_type, job->n_dims, job->dims, error))
        return FALSE;
    }
  if (!amk_gguf_writer_begin (w, out, error))
    return FALSE;
  for (guint i = 0; i < jobs->len; i++)
    {
      const Job *job = &g_array_index (jobs, Job, i);
      const gsize bytes = amk_gguf_writer_tensor_bytes (w, i);

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;
      if (progress != NULL)
        progress (i, jobs->len, job->name, amk_ggml_type_name (job->out_type), user_data);
      if (!convert (job, w, i, error))
        return FALSE;
      summary->n_tensors++;
      summary->n_elements += job->n_elements;
      summary->bytes_in += job->src_floats != NULL ? job->n_elements * sizeof (float) : job->src_bytes;
      summary->bytes_out += bytes;
      if ((guint) job->out_type < AMK_QUANTIZE_MAX_TYPES)
        {
          summary->count[job->out_type]++;
          summary->bytes[job->out_type] += bytes;
        }
    }
  if (!amk_gguf_writer_finish (w, error))
    return FALSE;
  summary->file_bytes = amk_gguf_writer_get_offset (w);
  return TRUE;
}

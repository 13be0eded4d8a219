/* amk-model-info.c: `amk info --model PATH`: what a model file holds and what amk makes
 * of it on the device, without loading it: the architecture and sizes (the model
 * reader's description), the tensor types of the file (the GGUF header, or the
 * safetensors headers of a checkpoint folder) with their counts and bytes, and the bytes
 * the decode step keeps and reads: on a GPU, where the loader expands every weight to
 * bf16 where that fits its memory (AmkModel:keep-quantized), and on the CPU executor,
 * which keeps the quantized matrices it runs as stored (AmkModel:weight-bytes), against
 * those of the same weights in the file.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n.h>

#include "amk-cli.h"
#include "amk-quantize.h"
#include "amk-gguf-private.h"
#include "amk-safetensors-private.h"
#include "amk-model-loader-private.h"
#include "amk-executor-private.h"

typedef struct {
  const char *name;
  guint       count;
  guint64     bytes;
  guint64     elements;
} TypeRow;

static TypeRow *
type_row (GArray *rows, const char *name)
{
  TypeRow row = { name, 0, 0, 0 };

  for (guint i = 0; i < rows->len; i++)
    if (g_str_equal (g_array_index (rows, TypeRow, i).name, name))
      return &g_array_index (rows, TypeRow, i);
  g_array_append_val (rows, row);
  return &g_array_index (rows, TypeRow, rows->len - 1);
}

static char *
size_string (guint64 bytes)
{
  g_autofree char *human = g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);

  /* TRANSLATORS: a byte count, then the same in KiB/MiB/GiB */
  return g_strdup_printf (_("%" PRIu64 " bytes (%s)"), bytes, human);
}

/* The tensor table of a GGUF file or a checkpoint folder, by type; FALSE with the
 * reader's error. */
static gboolean
read_tensor_types (const char *path, GArray *rows, guint *n_tensors, char **format, GError **error)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr(AmkSafetensors) st = amk_safetensors_open (path, error);

      if (st == NULL)
        return FALSE;
      *n_tensors = (guint) amk_safetensors_get_n_tensors (st);
      for (gsize i = 0; i < *n_tensors; i++)
        {
          const AmkSafetensorsTensor *t = amk_safetensors_get_tensor (st, i);
          TypeRow *row = type_row (rows, amk_safetensors_dtype_name (t->dtype));

          row->count++;
          row->bytes += t->n_bytes;
          row->elements += t->n_elements;
        }
      *format = g_strdup (_("a Hugging Face checkpoint folder (safetensors)"));
    }
  else
    {
      g_autoptr(AmkGguf) gguf = amk_gguf_open (path, error);

      if (gguf == NULL)
        return FALSE;
      *n_tensors = (guint) amk_gguf_get_n_tensors (gguf);
      for (gsize i = 0; i < *n_tensors; i++)
        {
          const AmkGgufTensor *t = amk_gguf_get_tensor (gguf, i);
          TypeRow *row = type_row (rows, amk_ggml_type_name (t->type));

          row->count++;
          row->bytes += t->n_bytes;
          row->elements += t->n_elements;
        }
      /* TRANSLATORS: the GGUF version and the number of metadata keys */
      *format = g_strdup_printf (_("GGUF version %u, %zu metadata keys"),
                                 amk_gguf_get_version (gguf), amk_gguf_get_n_keys (gguf));
    }
  return TRUE;
}

/* What the decode step holds: every weight amk-model-builder.c loads (the token
 * embedding once when the output matrix is tied to it), in bf16 as it loads them for a
 * GPU, as it loads them for the CPU executor (which keeps matrices of the block types
 * it runs as stored: amk_model_spec_load_weight()), and as stored; and what one step
 * reads of them: all but the embedding's other rows, unless the output matrix is that
 * table. */
typedef struct {
  guint64 elements;
  guint64 gpu;           /* = AmkModel:weight-bytes, loaded for a launcher */
  guint64 cpu;           /* = AmkModel:weight-bytes, loaded for the CPU executor */
  guint64 file;
  guint64 step_gpu;
  guint64 step_cpu;
  guint64 step_file;
} WeightBytes;

/* Whether a load that keeps the block types of `keep` keeps the matrix as stored (the CPU
 * executor's, or a GPU's where bf16 fits). The q, k and v matrices
 * are stacked into one: kept only when the three share the type. */
static gboolean
kept_as_stored (AmkModelSpec *spec, AmkModelWeight w, guint layer, const AmkModelTensor *t, guint32 keep)
{
  if (amk_model_tensor_kept_dtype (t, keep) < 0)
    return FALSE;
  if (w == AMK_MODEL_WEIGHT_ATTN_Q || w == AMK_MODEL_WEIGHT_ATTN_K || w == AMK_MODEL_WEIGHT_ATTN_V)
    {
      const AmkModelWeight qkv[3] = { AMK_MODEL_WEIGHT_ATTN_Q, AMK_MODEL_WEIGHT_ATTN_K, AMK_MODEL_WEIGHT_ATTN_V };

      for (guint i = 0; i < 3; i++)
        {
          const AmkModelTensor *o = amk_model_spec_tensor (spec, qkv[i], layer);
          if (o == NULL || o->type != t->type)
            return FALSE;
        }
    }
  return TRUE;
}

static void
weight_bytes (AmkModelSpec *spec, WeightBytes *wb)
{
  const AmkModelParams *hp = &spec->params;
  g_autoptr(AmkCpuExecutor) cpu_executor = amk_cpu_executor_new_empty ();
  const guint32 keep = amk_executor_block_dtypes (AMK_EXECUTOR (cpu_executor));

  memset (wb, 0, sizeof *wb);
  for (guint w = 0; w < AMK_MODEL_N_WEIGHTS; w++)
    for (guint layer = 0; layer < (w >= AMK_MODEL_WEIGHT_FIRST_LAYER ? hp->n_layers : 1); layer++)
      {
        const AmkModelTensor *t = amk_model_spec_tensor (spec, w, layer);
        const guint64 stored = t != NULL ? g_bytes_get_size (t->data) : 0;

        if (!amk_model_spec_holds (spec, w, layer))
          continue;
        const guint64 cpu = kept_as_stored (spec, w, layer, t, keep) ? stored : 2 * t->n_elements;
        const guint64 gpu = kept_as_stored (spec, w, layer, t, keep | AMK_KEEP_WHERE_GPU_FASTER)
                              ? stored : 2 * t->n_elements;

        wb->elements += t->n_elements;
        wb->gpu += gpu;
        wb->cpu += cpu;
        wb->file += stored;
        if (w == AMK_MODEL_WEIGHT_TOKEN_EMBD && !hp->tied_embeddings && hp->vocab > 0)
          {
            wb->step_gpu += gpu / hp->vocab;
            wb->step_cpu += cpu / hp->vocab;
            wb->step_file += stored / hp->vocab;
          }
        else
          {
            wb->step_gpu += gpu;
            wb->step_cpu += cpu;
            wb->step_file += stored;
          }
      }
}

int
amk_cli_info_model (const char *path)
{
  g_autoptr(GArray) rows = g_array_new (FALSE, TRUE, sizeof (TypeRow));
  g_autoptr(AmkModelSpec) spec = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *display = g_filename_display_name (path);
  g_autofree char *format = NULL;
  guint n_tensors = 0;
  guint64 total_bytes = 0, total_elements = 0;

  if (!amk_quantize_check_input (path, &error) ||
      !read_tensor_types (path, rows, &n_tensors, &format, &error))
    {
      amk_cli_print_error ("info", error);
      return 1;
    }
  /* TRANSLATORS: the model's path, then what it is (its format) */
  g_print (_("Model: %s, %s\n"), display, format);

  spec = amk_model_read_spec (path, &error);
  if (spec != NULL)
    {
      const AmkModelParams *hp = &spec->params;

      /* TRANSLATORS: the architecture and the sizes of a model */
      g_print (_("Architecture: %s, %u layers, hidden size %u, feed-forward size %u, %u "
                 "attention heads of %u (%u for keys and values), vocabulary %" PRIu64 "%s%s\n"),
               hp->architecture, hp->n_layers, hp->hidden, hp->ffn, hp->n_heads, hp->head_dim,
               hp->n_kv_heads, hp->vocab, hp->qk_norm ? _(", q/k norms") : "",
               hp->tied_embeddings ? _(", output tied to the token embedding") : "");
      if (hp->model_context > 0)
        g_print (_("Trained context: %u tokens\n"), hp->model_context);
    }

  g_print (g_dngettext (GETTEXT_PACKAGE, "%u tensor:\n", "%u tensors:\n", n_tensors), n_tensors);
  for (guint i = 0; i < rows->len; i++)
    {
      const TypeRow *row = &g_array_index (rows, TypeRow, i);
      g_autofree char *bytes = size_string (row->bytes);

      /* TRANSLATORS: a tensor type, how many tensors have it, their bytes and bits per value */
      g_print (g_dngettext (GETTEXT_PACKAGE, "  %-5s %5u tensor   %s, %.2f bits per value\n",
                            "  %-5s %5u tensors  %s, %.2f bits per value\n", row->count),
               row->name, row->count, bytes,
               row->elements > 0 ? 8.0 * (double) row->bytes / (double) row->elements : 0.0);
      total_bytes += row->bytes;
      total_elements += row->elements;
    }
  {
    g_autofree char *bytes = size_string (total_bytes);

    /* TRANSLATORS: the bytes of all tensors, the values they hold, the bits per value */
    g_print (_("  all   %5u tensors  %s, %" PRIu64 " values, %.2f bits per value\n"), n_tensors,
             bytes, total_elements,
             total_elements > 0 ? 8.0 * (double) total_bytes / (double) total_elements : 0.0);
  }

  if (spec == NULL)
    {
      amk_cli_print_error ("info", error);
      return 1;
    }
  {
    WeightBytes wb;
    g_autofree char *gpu = NULL, *cpu = NULL, *file = NULL;
    g_autofree char *step_gpu = NULL, *step_cpu = NULL, *step_file = NULL;

    weight_bytes (spec, &wb);
    gpu = size_string (wb.gpu);
    cpu = size_string (wb.cpu);
    file = size_string (wb.file);
    step_gpu = size_string (wb.step_gpu);
    step_cpu = size_string (wb.step_cpu);
    step_file = size_string (wb.step_file);
    /* TRANSLATORS: the weights' bytes loaded for a GPU (Q4_K and Q5_K kept, the others
     * expanded to bf16) */
    g_print (_("Weights on a GPU: %s: Q4_K and Q5_K matrices as stored, the others expanded to bf16 "
               "where that fits (AmkModel:weight-bytes, AmkModel:keep-quantized)\n"), gpu);
    /* TRANSLATORS: the weights' bytes loaded for the CPU executor */
    g_print (_("Weights on the CPU executor: %s: Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K matrices as stored, "
               "the others in bf16\n"), cpu);
    /* TRANSLATORS: the same weights' bytes in the file, and how many times fewer than on a GPU */
    g_print (_("Weights in the file: %s, %.2f times fewer than on a GPU\n"), file,
             wb.file > 0 ? (double) wb.gpu / (double) wb.file : 0.0);
    /* TRANSLATORS: the weights one decode step reads on a GPU, on the CPU, in the file's types */
    g_print (_("A decode step reads %s of weights on a GPU, %s on the CPU executor, %s in the file's types\n"),
             step_gpu, step_cpu, step_file);
  }
  return 0;
}

/* amk-model.c: AmkModel, a language model loaded from a file into one compiled decode
 * step (the program), with its tokenizer and its hyperparameters as properties.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <glib/gi18n-lib.h>

#include "amk-model-private.h"
#include "amk-model-loader-private.h"
#include "amk-executor-private.h"
#include "amk-enum-types.h"
#include "amk-cpu-executor.h"
#include "amk-launcher.h"

/**
 * AmkModel:
 *
 * A language model ready to run: its weights in one compiled decode step
 * ([class@Amk.Program]), and its [class@Amk.Tokenizer].
 *
 * The decode step takes one token and its position, appends the token's keys and values
 * to the KV cache and computes the logits of the next token and their argmax, all in
 * one launch of the megakernel. [class@Amk.Generator] runs it, on the GPU or on the CPU
 * executor.
 *
 * Load a model with [ctor@Amk.Model.new_from_file] or, since loading takes seconds,
 * with [func@Amk.Model.new_from_file_async]. A model is a [iface@Gio.Initable] and a
 * [iface@Gio.AsyncInitable]: from a binding, `Amk.Model(path=...)` followed by
 * `init()` works as well, and a generator initialises a model that is not loaded yet.
 *
 * Supported: GGUF files of the llama and qwen3 architectures (SmolLM2, TinyLlama, Llama,
 * Qwen3; Llama 3.1 and 3.2 with the RoPE scaling that llama.cpp's rope_freqs table
 * holds), with weights in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 or the K-quants
 * Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (the Q4_K_M, Q5_K_M and Q6_K files people download),
 * and Hugging Face
 * checkpoint folders of LlamaForCausalLM and Qwen3ForCausalLM (config.json,
 * model.safetensors or its shards with the index, tokenizer.json; bf16, f16 or f32).
 *
 * The weights are converted to bf16 at load, except for the matrices stored as Q8_0,
 * Q5_0, Q5_1, Q4_K, Q5_K or Q6_K where they run faster as stored (on a GPU Q4_K, Q5_K,
 * Q8_0 with rows of a multiple of 256 and Q6_K of 2048; all of them on the CPU
 * executor), where bf16 would not fit, or when asked
 * ([property@Amk.Model:keep-quantized]): they stay as stored and each block is decoded
 * as it is read. The q, k and v matrices
 * of a layer are stacked into one, kept so only when all three have the same type.
 *
 * The decode step is built for a number of queues ([property@Amk.Model:n-queues]) and
 * a KV cache length ([property@Amk.Model:context-length]); both are fixed once the
 * model is loaded. Beside it the model builds a prefill program that feeds a chunk of
 * prompt tokens per launch ([property@Amk.Model:prefill-chunk]) into the same KV cache
 * with the same weights.
 */

/**
 * amk_model_error_quark:
 *
 * The error domain of model files, %AMK_MODEL_ERROR. (Defined with the model
 * description in amk-model-spec.c, which every reader links.)
 *
 * Returns: the quark of the [error@Amk.ModelError] domain
 */

/* The KV cache length when none is asked for (the model's own when that is smaller). */
#define DEFAULT_CONTEXT 2048
/* The prefill chunk's rows when none are asked for (fewer when the context is shorter). */

struct _AmkModel
{
  GObject parent_instance;

  char          *path;
  guint          n_queues;        /* asked for (0: choose), then the program's */
  guint          context_length;  /* asked for (0: choose), then the KV cache's */
  guint          prefill_chunk;   /* asked for (0: choose, 1: none), then the chunk's rows */
  gboolean       keep_quantized;
  AmkModelBuild *build;           /* NULL until loaded; set once under load_lock */
  GMutex         load_lock;
  guint64        weight_bytes;
};

enum {
  PROP_0,
  PROP_PATH,
  PROP_N_QUEUES,
  PROP_CONTEXT_LENGTH,
  PROP_PREFILL_CHUNK,
  PROP_KEEP_QUANTIZED,
  PROP_LOADED,
  PROP_ARCHITECTURE,
  PROP_N_LAYERS,
  PROP_HIDDEN_SIZE,
  PROP_VOCAB_SIZE,
  PROP_DTYPE,
  PROP_WEIGHT_BYTES,
  PROP_TOKENIZER,
  PROP_PROGRAM,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void amk_model_initable_iface_init (GInitableIface *iface);
static void amk_model_async_initable_iface_init (GAsyncInitableIface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (AmkModel, amk_model, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      amk_model_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (G_TYPE_ASYNC_INITABLE,
                                                      amk_model_async_initable_iface_init))

static void
amk_model_finalize (GObject *object)
{
  AmkModel *self = AMK_MODEL (object);

  g_clear_pointer (&self->build, amk_model_build_free);
  g_free (self->path);
  g_mutex_clear (&self->load_lock);

  G_OBJECT_CLASS (amk_model_parent_class)->finalize (object);
}

static void
amk_model_get_property (GObject    *object,
                        guint       prop_id,
                        GValue     *value,
                        GParamSpec *pspec)
{
  AmkModel *self = AMK_MODEL (object);

  switch (prop_id)
    {
    case PROP_PATH:
      g_value_set_string (value, self->path);
      break;
    case PROP_N_QUEUES:
      g_value_set_uint (value, self->n_queues);
      break;
    case PROP_CONTEXT_LENGTH:
      g_value_set_uint (value, self->context_length);
      break;
    case PROP_PREFILL_CHUNK:
      g_value_set_uint (value, self->prefill_chunk);
      break;
    case PROP_KEEP_QUANTIZED:
      g_value_set_boolean (value, self->keep_quantized);
      break;
    case PROP_LOADED:
      g_value_set_boolean (value, amk_model_get_loaded (self));
      break;
    case PROP_ARCHITECTURE:
      g_value_set_string (value, amk_model_get_architecture (self));
      break;
    case PROP_N_LAYERS:
      g_value_set_uint (value, amk_model_get_n_layers (self));
      break;
    case PROP_HIDDEN_SIZE:
      g_value_set_uint (value, amk_model_get_hidden_size (self));
      break;
    case PROP_VOCAB_SIZE:
      g_value_set_uint (value, amk_model_get_vocab_size (self));
      break;
    case PROP_DTYPE:
      g_value_set_enum (value, amk_model_get_dtype (self));
      break;
    case PROP_WEIGHT_BYTES:
      g_value_set_uint64 (value, self->weight_bytes);
      break;
    case PROP_TOKENIZER:
      g_value_set_object (value, amk_model_get_tokenizer (self));
      break;
    case PROP_PROGRAM:
      g_value_set_object (value, amk_model_get_program (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_model_set_property (GObject      *object,
                        guint         prop_id,
                        const GValue *value,
                        GParamSpec   *pspec)
{
  AmkModel *self = AMK_MODEL (object);

  switch (prop_id)
    {
    case PROP_PATH:
      g_free (self->path);
      self->path = g_value_dup_string (value);
      break;
    case PROP_N_QUEUES:
      self->n_queues = g_value_get_uint (value);
      break;
    case PROP_CONTEXT_LENGTH:
      self->context_length = g_value_get_uint (value);
      break;
    case PROP_PREFILL_CHUNK:
      self->prefill_chunk = g_value_get_uint (value);
      break;
    case PROP_KEEP_QUANTIZED:
      self->keep_quantized = g_value_get_boolean (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_model_class_init (AmkModelClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_model_finalize;
  object_class->get_property = amk_model_get_property;
  object_class->set_property = amk_model_set_property;

  /**
   * AmkModel:path:
   *
   * The model file (a `.gguf`) or Hugging Face checkpoint folder the model is loaded
   * from.
   */
  properties[PROP_PATH] =
    g_param_spec_string ("path", NULL, NULL, NULL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:n-queues:
   *
   * The queues of the decode step: thread blocks of the launch on a GPU. 0 (the
   * default) chooses when loading: the [method@Amk.Executor.get_preferred_queues] of
   * the executor of the [class@Amk.Generator] that loads the model (one per
   * multiprocessor for a launcher, 132 on an H200; 1 for the CPU executor, where more
   * queues only add work); loaded on its own, that of a launcher on CUDA device 0 where
   * it can run the megakernel, else the CPU executor's. Once loaded, the program's
   * queue count. At most 65535: GObject refuses a larger count with a warning and the
   * model keeps 0.
   */
  properties[PROP_N_QUEUES] =
    g_param_spec_uint ("n-queues", NULL, NULL, 0, 65535, 0,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:context-length:
   *
   * The KV cache length in positions: prompts and generated tokens of a
   * [class@Amk.Generator] together fit in it. 0 (the default) chooses when loading:
   * 2048, or the context the model was trained for when that is smaller. Once loaded,
   * the KV cache's length. At most 1048576: GObject refuses a larger length with
   * a warning and the model keeps 0.
   */
  properties[PROP_CONTEXT_LENGTH] =
    g_param_spec_uint ("context-length", NULL, NULL, 0, 1 << 20, 0,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:prefill-chunk:
   *
   * The rows (prompt tokens) of the prefill chunk, the second program a model builds
   * beside the decode step: a [class@Amk.Generator] feeds a prompt's tokens but the
   * last through it, this many per launch, and the last through the decode step, which
   * computes the first generated token. The two programs share the weights and the KV
   * cache. 0 (the default) chooses when loading: the executor's preferred rows
   * ([method@Amk.Executor.get_preferred_rows]: 2048 on a GPU, 64 on the CPU), or the
   * context length when that is smaller. 1 builds no prefill program: every prompt token then takes one decode
   * step, as a reference or to save the chunk's activations (hundreds of megabytes at
   * 2048 rows of a 1B model). Once
   * loaded, the chunk's rows, or 1 without one. At most 65536: GObject refuses more
   * rows with a warning and the model keeps 0.
   */
  properties[PROP_PREFILL_CHUNK] =
    g_param_spec_uint ("prefill-chunk", NULL, NULL, 0, 1 << 16, 0,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:keep-quantized:
   *
   * Whether the matrices a file stores as Q8_0, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K stay so
   * on every executor. %FALSE (the default) lets the executor choose what runs faster:
   * the CPU executor keeps them; a GPU keeps Q4_K, Q5_K, and Q8_0 and Q6_K matrices
   * whose rows are a multiple of 256 and 2048 values (its MATVEC streams them faster
   * than their bf16 expansion) and expands the others to bf16 when all the weights then
   * fit in seven tenths of its free memory (it streams bf16 faster than it decodes those
   * blocks), and keeps them otherwise. %TRUE keeps them everywhere, for
   * less memory ([property@Amk.Model:weight-bytes] says how much).
   */
  properties[PROP_KEEP_QUANTIZED] =
    g_param_spec_boolean ("keep-quantized", NULL, NULL, FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:loaded:
   *
   * Whether the model is loaded (initialised); the other read-only properties are
   * %NULL or 0 until it is.
   */
  properties[PROP_LOADED] =
    g_param_spec_boolean ("loaded", NULL, NULL, FALSE,
                          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:architecture:
   *
   * The model's architecture as the file names it, such as `llama`.
   */
  properties[PROP_ARCHITECTURE] =
    g_param_spec_string ("architecture", NULL, NULL, NULL,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:n-layers:
   *
   * The number of transformer layers (blocks).
   */
  properties[PROP_N_LAYERS] =
    g_param_spec_uint ("n-layers", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:hidden-size:
   *
   * The width of the residual stream (the embedding length).
   */
  properties[PROP_HIDDEN_SIZE] =
    g_param_spec_uint ("hidden-size", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:vocab-size:
   *
   * The number of tokens the model has logits for.
   */
  properties[PROP_VOCAB_SIZE] =
    g_param_spec_uint ("vocab-size", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:dtype:
   *
   * The element type the weights run in: every weight is converted to
   * %AMK_DTYPE_BF16 when loading, whatever the file stores.
   */
  properties[PROP_DTYPE] =
    g_param_spec_enum ("dtype", NULL, NULL, AMK_TYPE_DTYPE, AMK_DTYPE_BF16,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:weight-bytes:
   *
   * The bytes the weights take on the device (or in the CPU executor): the sum of the
   * program's constant buffers. The KV cache and the activations come on top.
   */
  properties[PROP_WEIGHT_BYTES] =
    g_param_spec_uint64 ("weight-bytes", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:tokenizer:
   *
   * The model's tokenizer, read from the model file.
   */
  properties[PROP_TOKENIZER] =
    g_param_spec_object ("tokenizer", NULL, NULL, AMK_TYPE_TOKENIZER,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkModel:program:
   *
   * The compiled decode step. Inspect it (for example with
   * [method@Amk.Program.get_schedule_report]); changing it breaks the model.
   */
  properties[PROP_PROGRAM] =
    g_param_spec_object ("program", NULL, NULL, AMK_TYPE_PROGRAM,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
amk_model_init (AmkModel *self)
{
  g_mutex_init (&self->load_lock);
}

/* The queue count the executor prefers; with none yet, that of a launcher on device 0
 * where it can run the megakernel, else the CPU executor's. */
static guint
default_n_queues (AmkExecutor  *executor,
                  GError      **error)
{
  g_autoptr(AmkExecutor) fallback = NULL;
  g_autoptr(GError) local = NULL;
  guint n;

  if (executor != NULL)
    return amk_executor_get_preferred_queues (executor, error);
  if (amk_launcher_get_device_count () > 0)
    {
      g_autoptr(AmkExecutor) launcher = AMK_EXECUTOR (amk_launcher_new (0));

      n = amk_executor_get_preferred_queues (launcher, &local);
      if (n > 0)
        return n;
      g_debug ("CUDA device 0 cannot run the megakernel (%s); choosing the CPU executor's queues",
               local->message);
    }
  fallback = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
  return amk_executor_get_preferred_queues (fallback, error);
}


/* The executor whose preferences a load follows: the given one, or the one
 * default_n_queues() would ask. */
static AmkExecutor *
preferred_executor (AmkExecutor *executor)
{
  if (executor != NULL)
    return g_object_ref (executor);
  return amk_launcher_get_device_count () > 0 ? AMK_EXECUTOR (amk_launcher_new (0))
                                              : AMK_EXECUTOR (amk_cpu_executor_new_empty ());
}

/* The bytes of bf16 weights that executor holds faster than their quantized blocks, 0 for
 * none. The GPU's MATVEC streams bf16 faster than it decodes blocks (docs/performance.md),
 * so a launcher expands a file's quantized matrices to bf16 when they all fit in seven
 * tenths of the device's free memory (the rest for the caches and activations), and keeps
 * them as stored otherwise, so that a model too large in bf16 still loads. */
static guint64
bf16_room (AmkExecutor *executor)
{
  guint64 free_bytes = 0;

  if (!AMK_IS_LAUNCHER (executor) ||
      !amk_launcher_memory_info (AMK_LAUNCHER (executor), &free_bytes, NULL, NULL))
    return 0;
  return free_bytes / 10 * 7;
}

/* Reads the model's description, then builds the decode step for a KV cache of
 * `context` positions (0: DEFAULT_CONTEXT, or the model's own context when smaller) and
 * the prefill chunk of `chunk` rows beside it (1: none; at most the context), whose
 * MATMULs read their inputs as `activations`. A model whose shapes the many-token ops
 * do not take (rows of a multiple of 8 elements, heads of at most 256) gets no chunk:
 * its prompts go through the decode step. The matrices stored in a block-quantized type
 * that `keep` has (1 << AmkDType) stay in it, the others become bf16; but with
 * `bf16_room` > 0, when all the weights would fit in that many bytes as bf16, only the
 * matrices AMK_KEEP_WHERE_GPU_FASTER names stay. With
 * `head`, the chunk also computes the logits of the prompt's last token
 * (amk_model_build_prefill()). */
static AmkModelBuild *
build_model (const char    *path,
             guint          n_queues,
             guint          context,
             guint          chunk,
             AmkDType       activations,
             gboolean       head,
             guint32        keep,
             guint64        bf16_room,
             GCancellable  *cancellable,
             GError       **error)
{
  g_autoptr(AmkModelSpec) spec = NULL;
  g_autoptr(AmkModelBuild) build = NULL;

  spec = amk_model_read_spec (path, error);
  if (spec == NULL || g_cancellable_set_error_if_cancelled (cancellable, error))
    return NULL;
  if (bf16_room > 0 && amk_model_spec_bf16_bytes (spec) <= bf16_room)
    keep |= AMK_KEEP_WHERE_GPU_FASTER;
  if (context == 0)
    {
      context = DEFAULT_CONTEXT;
      if (spec->params.model_context > 0 && spec->params.model_context < context)
        context = spec->params.model_context;
    }
  build = amk_model_build_graph_keeping (spec, n_queues, context, keep, error);
  if (build == NULL || g_cancellable_set_error_if_cancelled (cancellable, error))
    return NULL;
  chunk = MIN (chunk, context);
  if (chunk >= 2 && !build->rows_fit)
    {
      g_debug ("%s: shapes the many-token ops do not take; every prompt token goes through "
               "the decode step", path);
      chunk = 1;
    }
  if (chunk >= 2 && !amk_model_build_prefill (build, chunk, activations, head, error))
    return NULL;
  return g_steal_pointer (&build);
}

/* Loads the model unless it is loaded (GInitable's init), with the queue count that
 * executor prefers (NULL: see default_n_queues()). Generators sharing a model may call
 * this from several threads at once: the lock makes one of them build while the others
 * wait and then find it loaded, so the model is built once and no build is lost. */
gboolean
amk_model_load_for_executor (AmkModel      *self,
                             AmkExecutor   *executor,
                             GCancellable  *cancellable,
                             GError       **error)
{
  g_autoptr(AmkModelBuild) build = NULL;
  g_autoptr(AmkExecutor) prefs = NULL;
  g_autoptr(GMutexLocker) locker = NULL;
  AmkProgram *program;
  guint n_queues;
  guint64 weight_bytes = 0;
  guint32 keep = 0;

  g_return_val_if_fail (AMK_IS_MODEL (self), FALSE);
  g_return_val_if_fail (executor == NULL || AMK_IS_EXECUTOR (executor), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  locker = g_mutex_locker_new (&self->load_lock);
  if (self->build != NULL)
    return TRUE;
  if (self->path == NULL || *self->path == '\0')
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                           _("No model file given: set the model’s “path” property"));
      return FALSE;
    }
  if (g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;

  n_queues = self->n_queues;
  if (n_queues == 0 && (n_queues = default_n_queues (executor, error)) == 0)
    return FALSE;
  prefs = preferred_executor (executor);
  keep = amk_executor_block_dtypes (prefs);
  build = build_model (self->path, n_queues, self->context_length,
                       self->prefill_chunk != 0 ? self->prefill_chunk : amk_executor_get_preferred_rows (prefs),
                       amk_executor_get_activation_dtype (prefs),
                       /* the executor that skips MATMUL's padding rows: a head costs it one
                        * row; elsewhere it would cost the whole chunk's rows */
                       AMK_IS_CPU_EXECUTOR (prefs), keep,
                       self->keep_quantized ? 0 : bf16_room (prefs), cancellable, error);
  if (build == NULL || g_cancellable_set_error_if_cancelled (cancellable, error))
    return FALSE;

  program = build->program;
  for (guint b = 0; b < amk_program_get_n_buffers (program); b++)
    if (amk_program_get_buffer_role (program, b) == AMK_BUFFER_ROLE_CONSTANT)
      weight_bytes += amk_program_get_buffer_size (program, b);

  self->n_queues = n_queues;
  self->context_length = build->context;
  self->prefill_chunk = build->prefill != NULL ? build->prefill->rows : 1;
  self->weight_bytes = weight_bytes;
  self->build = g_steal_pointer (&build);
  return TRUE;
}

static gboolean
amk_model_initable_init (GInitable     *initable,
                         GCancellable  *cancellable,
                         GError       **error)
{
  return amk_model_load_for_executor (AMK_MODEL (initable), NULL, cancellable, error);
}

static void
amk_model_initable_iface_init (GInitableIface *iface)
{
  iface->init = amk_model_initable_init;
}

static void
init_thread (GTask        *task,
             gpointer      source_object,
             gpointer      task_data,
             GCancellable *cancellable)
{
  GError *error = NULL;

  if (amk_model_initable_init (G_INITABLE (source_object), cancellable, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

static void
amk_model_init_async (GAsyncInitable      *initable,
                      int                  io_priority,
                      GCancellable        *cancellable,
                      GAsyncReadyCallback  callback,
                      gpointer             user_data)
{
  g_autoptr(GTask) task = NULL;

  task = g_task_new (initable, cancellable, callback, user_data);
  g_task_set_source_tag (task, amk_model_init_async);
  g_task_set_priority (task, io_priority);
  g_task_run_in_thread (task, init_thread);
}

static gboolean
amk_model_init_finish (GAsyncInitable  *initable,
                       GAsyncResult    *result,
                       GError         **error)
{
  g_return_val_if_fail (g_task_is_valid (result, initable), FALSE);
  g_return_val_if_fail (g_async_result_is_tagged (result, amk_model_init_async), FALSE);

  return g_task_propagate_boolean (G_TASK (result), error);
}

static void
amk_model_async_initable_iface_init (GAsyncInitableIface *iface)
{
  iface->init_async = amk_model_init_async;
  iface->init_finish = amk_model_init_finish;
}

/**
 * amk_model_new_from_file:
 * @path: (type filename): a `.gguf` model file or a Hugging Face checkpoint folder
 * @cancellable: (nullable): a #GCancellable
 * @error: return location for a #GError
 *
 * Loads a model: reads the hyperparameters and the tokenizer, converts every weight to
 * bf16 and builds and compiles the decode step. Takes seconds for a large file; see
 * [func@Amk.Model.new_from_file_async]. @cancellable is checked before and after the
 * work, not during it.
 *
 * A missing or unreadable file fails in the %G_IO_ERROR domain (such as
 * %G_IO_ERROR_NOT_FOUND), a file that is not a model amk-glib can run in the
 * %AMK_MODEL_ERROR domain, with the [error@Amk.ModelError] code that says what is
 * wrong; the message names the file and the key, field or tensor.
 *
 * Returns: (transfer full): the model, or %NULL with @error set
 */
AmkModel *
amk_model_new_from_file (const char    *path,
                         GCancellable  *cancellable,
                         GError       **error)
{
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return g_initable_new (AMK_TYPE_MODEL, cancellable, error, "path", path, NULL);
}

/**
 * amk_model_new_from_file_async:
 * @path: (type filename): a `.gguf` model file or a Hugging Face checkpoint folder
 * @cancellable: (nullable): a #GCancellable
 * @callback: (scope async): called when the model is loaded or failed to load
 * @user_data: data for @callback
 *
 * Loads a model as [ctor@Amk.Model.new_from_file] does, in a worker thread; @callback
 * runs in the thread-default main context of the caller. Finish with
 * [ctor@Amk.Model.new_from_file_finish].
 */
void
amk_model_new_from_file_async (const char          *path,
                               GCancellable        *cancellable,
                               GAsyncReadyCallback  callback,
                               gpointer             user_data)
{
  g_return_if_fail (path != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  g_async_initable_new_async (AMK_TYPE_MODEL, G_PRIORITY_DEFAULT, cancellable,
                              callback, user_data, "path", path, NULL);
}

/**
 * amk_model_new_from_file_finish:
 * @result: the #GAsyncResult passed to the callback
 * @error: return location for a #GError
 *
 * Finishes [func@Amk.Model.new_from_file_async].
 * Call it once for each @result: a second call is a programmer error (a critical
 * warning, and no result).
 *
 * Returns: (transfer full): the model, or %NULL with @error set
 */
AmkModel *
amk_model_new_from_file_finish (GAsyncResult  *result,
                                GError       **error)
{
  g_autoptr(GObject) source = NULL;
  GObject *model;

  g_return_val_if_fail (G_IS_ASYNC_RESULT (result), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  source = g_async_result_get_source_object (result);
  g_return_val_if_fail (AMK_IS_MODEL (source), NULL);
  model = g_async_initable_new_finish (G_ASYNC_INITABLE (source), result, error);
  return model != NULL ? AMK_MODEL (model) : NULL;
}

AmkModelBuild *
amk_model_get_build (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), NULL);

  return self->build;
}

/**
 * amk_model_get_path:
 * @self: a model
 *
 * Gets [property@Amk.Model:path].
 *
 * Returns: (type filename) (nullable): the model file
 */
const char *
amk_model_get_path (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), NULL);

  return self->path;
}

/**
 * amk_model_get_loaded:
 * @self: a model
 *
 * Gets [property@Amk.Model:loaded].
 *
 * Returns: whether the model is loaded
 */
gboolean
amk_model_get_loaded (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), FALSE);

  return self->build != NULL;
}

/**
 * amk_model_get_architecture:
 * @self: a model
 *
 * Gets [property@Amk.Model:architecture].
 *
 * Returns: (nullable): the architecture, or %NULL before the model is loaded
 */
const char *
amk_model_get_architecture (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), NULL);

  return self->build != NULL ? self->build->architecture : NULL;
}

/**
 * amk_model_get_n_layers:
 * @self: a model
 *
 * Gets [property@Amk.Model:n-layers].
 *
 * Returns: the number of layers, or 0 before the model is loaded
 */
guint
amk_model_get_n_layers (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->build != NULL ? self->build->n_layers : 0;
}

/**
 * amk_model_get_hidden_size:
 * @self: a model
 *
 * Gets [property@Amk.Model:hidden-size].
 *
 * Returns: the hidden size, or 0 before the model is loaded
 */
guint
amk_model_get_hidden_size (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->build != NULL ? self->build->hidden : 0;
}

/**
 * amk_model_get_vocab_size:
 * @self: a model
 *
 * Gets [property@Amk.Model:vocab-size].
 *
 * Returns: the vocabulary size, or 0 before the model is loaded
 */
guint
amk_model_get_vocab_size (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->build != NULL ? self->build->vocab_size : 0;
}

/**
 * amk_model_get_context_length:
 * @self: a model
 *
 * Gets [property@Amk.Model:context-length].
 *
 * Returns: the KV cache length in positions (before loading: the length asked for, 0
 *   to choose)
 */
guint
amk_model_get_context_length (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->context_length;
}

/**
 * amk_model_get_n_queues:
 * @self: a model
 *
 * Gets [property@Amk.Model:n-queues].
 *
 * Returns: the decode step's queue count (before loading: the count asked for, 0 to
 *   choose)
 */
guint
amk_model_get_n_queues (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->n_queues;
}

/**
 * amk_model_get_prefill_chunk:
 * @self: a model
 *
 * Gets [property@Amk.Model:prefill-chunk].
 *
 * Returns: the prefill chunk's rows, 1 for none (before loading: the rows asked for, 0
 *   to choose)
 */
guint
amk_model_get_prefill_chunk (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->prefill_chunk;
}

/**
 * amk_model_get_keep_quantized:
 * @self: a model
 *
 * Gets [property@Amk.Model:keep-quantized].
 *
 * Returns: whether the file's quantized matrices stay so on every executor
 */
gboolean
amk_model_get_keep_quantized (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), FALSE);

  return self->keep_quantized;
}

/**
 * amk_model_get_dtype:
 * @self: a model
 *
 * Gets [property@Amk.Model:dtype].
 *
 * Returns: the element type of the weights: %AMK_DTYPE_BF16
 */
AmkDType
amk_model_get_dtype (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), AMK_DTYPE_BF16);

  return AMK_DTYPE_BF16;
}

/**
 * amk_model_get_weight_bytes:
 * @self: a model
 *
 * Gets [property@Amk.Model:weight-bytes].
 *
 * Returns: the bytes of the weights, or 0 before the model is loaded
 */
guint64
amk_model_get_weight_bytes (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), 0);

  return self->weight_bytes;
}

/**
 * amk_model_get_tokenizer:
 * @self: a model
 *
 * Gets [property@Amk.Model:tokenizer].
 *
 * Returns: (transfer none) (nullable): the tokenizer, or %NULL before the model is
 *   loaded
 */
AmkTokenizer *
amk_model_get_tokenizer (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), NULL);

  return self->build != NULL ? self->build->tokenizer : NULL;
}

/**
 * amk_model_get_program:
 * @self: a model
 *
 * Gets [property@Amk.Model:program].
 *
 * Returns: (transfer none) (nullable): the decode step, or %NULL before the model is
 *   loaded
 */
AmkProgram *
amk_model_get_program (AmkModel *self)
{
  g_return_val_if_fail (AMK_IS_MODEL (self), NULL);

  return self->build != NULL ? self->build->program : NULL;
}

/* amk-batch.c: AmkBatch, several sequences of one model generated together: a slot of
 * the batch's KV caches per sequence, one launch of the batch step per token of all of
 * them, sequences joining and leaving between steps.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-batch.h"
#include "amk-cpu-executor.h"
#include "amk-enum-types.h"
#include "amk-model-private.h"
#include "amk-sampler-private.h"
#include "amk-tokenizer-stream-private.h"

/**
 * AmkBatch:
 *
 * Generates several sequences with one [class@Amk.Model] at once: each step is one
 * launch that gives every running sequence its next token (greedy), so that B
 * sequences cost little more than one while the weights, not the arithmetic, bound
 * the step.
 *
 * Add sequences with [method@Amk.Batch.add], each with its prompt and its most tokens;
 * then call [method@Amk.Batch.step] (or [method@Amk.Batch.run], which steps until every
 * sequence has finished). A step first feeds one chunk of prompt tokens
 * ([property@Amk.Model:prefill-chunk]) of each sequence still reading its prompt, then
 * advances every sequence whose prompt is in by one token, emitting
 * [signal@Amk.Batch::token] for each. A sequence finishes at an
 * end-of-sequence token, after its most tokens, when it fills the context, or when
 * [method@Amk.Batch.cancel] stops it; [signal@Amk.Batch::finished] says which. Its slot
 * is then free for the next [method@Amk.Batch.add]: sequences join and leave between
 * steps (continuous batching), and a finished sequence's text stays readable until
 * [method@Amk.Batch.remove].
 *
 * Each sequence's tokens are those it gets alone in a batch: the rows of a step do not
 * mix. The batch has its own KV caches, [property@Amk.Batch:capacity] sequences of
 * [property@Amk.Model:context-length] positions, and its own copy of the weights on
 * its executor, apart from any [class@Amk.Generator] of the same model.
 *
 * Decoding is greedy; sampling and stop strings are the generator's.
 */

struct _AmkBatch
{
  GObject parent_instance;

  AmkModel       *model;
  AmkExecutor    *executor;          /* given, or a CPU executor made at construction */
  AmkExecutor    *prefill_executor;  /* one like it for the prefill chunk, or NULL */
  guint           capacity;

  AmkModelBatch  *programs;          /* NULL until loaded */
  GHashTable     *sequences;         /* id -> Sequence */
  struct Sequence *slots[AMK_BATCH_MAX_CAPACITY];  /* running sequences by slot */
  guint           next_id;
  gint            n_active;        /* atomic: a step in a worker thread changes it */
  gint            steps;           /* atomic */

  /* an asynchronous step in a worker thread: its signals wait in `events` until it ends,
   * and every other call fails with AMK_BATCH_ERROR_BUSY meanwhile */
  gboolean        busy;
  GArray         *events;          /* Event, or NULL: signals go out right away */
};

/* A signal of a step, kept until the asynchronous step ends. */
typedef struct {
  guint            signal;
  guint            id;
  gint             token;
  char            *piece;
  AmkFinishReason  reason;
} Event;

typedef struct Sequence {
  guint            id;
  gint             slot;         /* -1 once finished */
  gint32          *prompt;
  guint            n_prompt;
  guint            fed;          /* prompt tokens in the caches */
  guint            position;     /* cache rows in use */
  guint            max_tokens;   /* 0: no limit but the context */
  gint32           next;         /* the generated token to feed next, or -1 */
  GArray          *tokens;       /* gint32: generated */
  guint            held;         /* the first token whose text is not emitted yet */
  AmkFinishReason  reason;
} Sequence;

enum {
  PROP_0,
  PROP_MODEL,
  PROP_EXECUTOR,
  PROP_CAPACITY,
  PROP_N_ACTIVE,
  PROP_STEPS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

enum {
  SIGNAL_TOKEN,
  SIGNAL_FINISHED,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (AmkBatch, amk_batch, G_TYPE_OBJECT)

/**
 * amk_batch_error_quark:
 *
 * The error domain of batches, %AMK_BATCH_ERROR.
 *
 * Returns: the quark of the [error@Amk.BatchError] domain
 */
G_DEFINE_QUARK (amk-batch-error-quark, amk_batch_error)

static void
sequence_free (gpointer data)
{
  Sequence *seq = data;

  g_free (seq->prompt);
  g_array_unref (seq->tokens);
  g_free (seq);
}

static void
amk_batch_finalize (GObject *object)
{
  AmkBatch *self = AMK_BATCH (object);

  g_clear_pointer (&self->sequences, g_hash_table_unref);
  g_clear_pointer (&self->programs, amk_model_batch_free);
  g_clear_object (&self->prefill_executor);
  g_clear_object (&self->executor);
  g_clear_object (&self->model);

  G_OBJECT_CLASS (amk_batch_parent_class)->finalize (object);
}

static void
amk_batch_get_property (GObject    *object,
                        guint       prop_id,
                        GValue     *value,
                        GParamSpec *pspec)
{
  AmkBatch *self = AMK_BATCH (object);

  switch (prop_id)
    {
    case PROP_MODEL:
      g_value_set_object (value, self->model);
      break;
    case PROP_EXECUTOR:
      g_value_set_object (value, self->executor);
      break;
    case PROP_CAPACITY:
      g_value_set_uint (value, self->capacity);
      break;
    case PROP_N_ACTIVE:
      g_value_set_uint (value, amk_batch_get_n_active (self));
      break;
    case PROP_STEPS:
      g_value_set_uint (value, amk_batch_get_steps (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_batch_set_property (GObject      *object,
                        guint         prop_id,
                        const GValue *value,
                        GParamSpec   *pspec)
{
  AmkBatch *self = AMK_BATCH (object);

  switch (prop_id)
    {
    case PROP_MODEL:
      self->model = g_value_dup_object (value);
      break;
    case PROP_EXECUTOR:
      self->executor = g_value_dup_object (value);
      break;
    case PROP_CAPACITY:
      self->capacity = g_value_get_uint (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_batch_constructed (GObject *object)
{
  AmkBatch *self = AMK_BATCH (object);

  G_OBJECT_CLASS (amk_batch_parent_class)->constructed (object);

  if (self->executor == NULL)
    self->executor = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
}

static void
amk_batch_class_init (AmkBatchClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_batch_finalize;
  object_class->constructed = amk_batch_constructed;
  object_class->get_property = amk_batch_get_property;
  object_class->set_property = amk_batch_set_property;

  /**
   * AmkBatch:model:
   *
   * The model that generates; one not loaded yet is loaded by the first
   * [method@Amk.Batch.add], for the batch's executor.
   */
  properties[PROP_MODEL] =
    g_param_spec_object ("model", NULL, NULL, AMK_TYPE_MODEL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * AmkBatch:executor:
   *
   * What runs the batch step: an [class@Amk.Launcher] on a GPU or an
   * [class@Amk.CpuExecutor]; given as %NULL, the batch makes a CPU executor. The
   * prompts go through a second executor of the same kind that shares this one's
   * weights and caches ([method@Amk.Executor.load_shared]).
   */
  properties[PROP_EXECUTOR] =
    g_param_spec_object ("executor", NULL, NULL, AMK_TYPE_EXECUTOR,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * AmkBatch:capacity:
   *
   * The most sequences running at once, from 1 to %AMK_BATCH_MAX_CAPACITY: the rows of
   * the batch step and the sequences its KV caches hold. Another count is out of the
   * property's range: GObject warns and the batch keeps the default, 8.
   */
  properties[PROP_CAPACITY] =
    g_param_spec_uint ("capacity", NULL, NULL, 1, AMK_BATCH_MAX_CAPACITY, 8,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * AmkBatch:n-active:
   *
   * The sequences that have not finished.
   */
  properties[PROP_N_ACTIVE] =
    g_param_spec_uint ("n-active", NULL, NULL, 0, AMK_BATCH_MAX_CAPACITY, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkBatch:steps:
   *
   * The launches of the batch step so far.
   */
  properties[PROP_STEPS] =
    g_param_spec_uint ("steps", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);

  /**
   * AmkBatch::token:
   * @self: the batch
   * @id: the sequence
   * @token: the generated token id
   * @text: its text; empty while the token ends inside a UTF-8 character, whose bytes
   *   then come with a later token
   *
   * Emitted by [method@Amk.Batch.step] for every token a sequence generates.
   */
  signals[SIGNAL_TOKEN] =
    g_signal_new ("token", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                  NULL, NULL, NULL, G_TYPE_NONE, 3, G_TYPE_UINT, G_TYPE_INT, G_TYPE_STRING);

  /**
   * AmkBatch::finished:
   * @self: the batch
   * @id: the sequence
   * @reason: why it ended
   *
   * Emitted when a sequence ends; its slot is free from then on.
   */
  signals[SIGNAL_FINISHED] =
    g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                  NULL, NULL, NULL, G_TYPE_NONE, 2, G_TYPE_UINT, AMK_TYPE_FINISH_REASON);
}

static void
amk_batch_init (AmkBatch *self)
{
  self->capacity = 8;
  self->next_id = 1;
  self->sequences = g_hash_table_new_full (NULL, NULL, NULL, sequence_free);
}

/**
 * amk_batch_new:
 * @model: a model
 * @executor: (nullable): what runs the batch: an [class@Amk.Launcher] for a GPU, or
 *   %NULL for a new [class@Amk.CpuExecutor]
 * @capacity: the most sequences at once, 1 to %AMK_BATCH_MAX_CAPACITY
 *
 * Makes a batch for @model. Nothing is loaded before the first [method@Amk.Batch.add].
 * @capacity must be from 1 to %AMK_BATCH_MAX_CAPACITY: another count is a programmer
 * error (a critical warning and %NULL); check a count that comes from outside first.
 *
 * Returns: (transfer full): a new batch
 */
AmkBatch *
amk_batch_new (AmkModel    *model,
               AmkExecutor *executor,
               guint        capacity)
{
  g_return_val_if_fail (AMK_IS_MODEL (model), NULL);
  g_return_val_if_fail (executor == NULL || AMK_IS_EXECUTOR (executor), NULL);
  g_return_val_if_fail (capacity >= 1 && capacity <= AMK_BATCH_MAX_CAPACITY, NULL);

  return g_object_new (AMK_TYPE_BATCH, "model", model, "executor", executor,
                       "capacity", capacity, NULL);
}

/**
 * amk_batch_get_model:
 * @self: a batch
 *
 * Gets [property@Amk.Batch:model].
 *
 * Returns: (transfer none): the model
 */
AmkModel *
amk_batch_get_model (AmkBatch *self)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), NULL);
  return self->model;
}

/**
 * amk_batch_get_executor:
 * @self: a batch
 *
 * Gets [property@Amk.Batch:executor].
 *
 * Returns: (transfer none): the executor that runs the batch step
 */
AmkExecutor *
amk_batch_get_executor (AmkBatch *self)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), NULL);
  return self->executor;
}

/**
 * amk_batch_get_capacity:
 * @self: a batch
 *
 * Gets [property@Amk.Batch:capacity].
 *
 * Returns: the most sequences running at once
 */
guint
amk_batch_get_capacity (AmkBatch *self)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), 0);
  return self->capacity;
}

/**
 * amk_batch_get_n_active:
 * @self: a batch
 *
 * Gets [property@Amk.Batch:n-active].
 *
 * Returns: the sequences still running
 */
guint
amk_batch_get_n_active (AmkBatch *self)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), 0);
  return (guint) g_atomic_int_get (&self->n_active);
}

/**
 * amk_batch_get_steps:
 * @self: a batch
 *
 * Gets [property@Amk.Batch:steps].
 *
 * Returns: the launches of the batch step so far
 */
guint
amk_batch_get_steps (AmkBatch *self)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), 0);
  return (guint) g_atomic_int_get (&self->steps);
}

/* ---- loading ------------------------------------------------------------------------ */

static gboolean
upload_i32 (AmkExecutor   *executor,
            gint           buffer,
            const gint32  *values,
            guint          n,
            GError       **error)
{
  g_autoptr(GBytes) bytes = g_bytes_new (values, n * sizeof (gint32));

  return amk_executor_upload (executor, (guint) buffer, bytes, error);
}

/* The model loaded, the batch step on the executor with each row in its own slot, and
 * the prefill chunk, where there is one, on a sibling sharing its weights and caches. */
static gboolean
ensure_loaded (AmkBatch  *self,
               GError   **error)
{
  g_autoptr(AmkModelBatch) programs = NULL;
  g_autoptr(AmkExecutor) sibling = NULL;
  AmkModelBuild *build;
  gint32 slots[AMK_BATCH_MAX_CAPACITY];

  if (self->programs != NULL &&
      amk_executor_get_program (self->executor) == self->programs->step->program)
    return TRUE;
  if (self->programs != NULL)
    {
      /* something else was loaded on the executor: the caches are gone */
      g_set_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_EXECUTOR_TAKEN,
                   _("The batch’s executor runs another program now, so its sequences are "
                     "lost: give each batch an executor of its own"));
      return FALSE;
    }
  if (self->model == NULL)
    {
      /* made from a binding without its model */
      g_set_error_literal (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_NO_MODEL,
                           _("The batch has no model: make it with a model (amk_batch_new(), "
                             "or the “model” property)"));
      return FALSE;
    }
  if (!amk_model_load_for_executor (self->model, self->executor, NULL, error))
    return FALSE;
  /* (every shape the decode step takes suits the many-token ops too) */
  build = amk_model_get_build (self->model);
  programs = amk_model_build_batch (build, self->capacity,
                                    build->prefill != NULL ? build->prefill->rows : 0,
                                    amk_executor_get_activation_dtype (self->executor), error);
  if (programs == NULL || !amk_executor_load (self->executor, programs->step->program, error))
    return FALSE;
  for (guint s = 0; s < self->capacity; s++)
    slots[s] = (gint32) s;
  if (!upload_i32 (self->executor, programs->step->seq, slots, self->capacity, error))
    return FALSE;
  if (programs->prefill != NULL && (sibling = amk_executor_new_sibling (self->executor)) != NULL &&
      !amk_executor_load_shared (sibling, programs->prefill->program, self->executor, error))
    return FALSE;
  self->prefill_executor = g_steal_pointer (&sibling);
  self->programs = g_steal_pointer (&programs);
  return TRUE;
}

/* ---- sequences ---------------------------------------------------------------------- */

static void
event_clear (gpointer data)
{
  g_free (((Event *) data)->piece);
}

static void
emit_event (AmkBatch    *self,
            const Event *e)
{
  if (e->signal == SIGNAL_TOKEN)
    g_signal_emit (self, signals[SIGNAL_TOKEN], 0, e->id, e->token, e->piece);
  else
    g_signal_emit (self, signals[SIGNAL_FINISHED], 0, e->id, e->reason);
}

/* Emits now, or keeps the signal for the end of an asynchronous step. */
static void
emit (AmkBatch *self,
      Event     e)
{
  if (self->events != NULL)
    {
      e.piece = g_strdup (e.piece);
      g_array_append_val (self->events, e);
      return;
    }
  emit_event (self, &e);
}

static void
notify (AmkBatch *self,
        guint     prop)
{
  if (self->events == NULL)
    g_object_notify_by_pspec (G_OBJECT (self), properties[prop]);
}

/* The error of a call while an asynchronous step runs. */
static gboolean
check_idle (AmkBatch  *self,
            GError   **error)
{
  if (!self->busy)
    return TRUE;
  g_set_error_literal (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_BUSY,
                       _("The batch is running a step: wait for amk_batch_step_async() to call back"));
  return FALSE;
}

static Sequence *
lookup (AmkBatch  *self,
        guint      id,
        GError   **error)
{
  Sequence *seq;

  if (!check_idle (self, error))
    return NULL;
  seq = g_hash_table_lookup (self->sequences, GUINT_TO_POINTER (id));
  if (seq == NULL)
    g_set_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_UNKNOWN_SEQUENCE,
                 _("The batch has no sequence %u (it was never added, or was removed)"), id);
  return seq;
}

static void
finish (AmkBatch        *self,
        Sequence        *seq,
        AmkFinishReason  reason)
{
  self->slots[seq->slot] = NULL;
  seq->slot = -1;
  g_atomic_int_add (&self->n_active, -1);
  seq->reason = reason;
  g_clear_pointer (&seq->prompt, g_free);
  emit (self, (Event) { .signal = SIGNAL_FINISHED, .id = seq->id, .reason = reason });
  notify (self, PROP_N_ACTIVE);
}

/**
 * amk_batch_add:
 * @self: a batch
 * @prompt: the text to continue (the tokenizer's BOS goes first)
 * @max_tokens: the most tokens to generate; 0: until an end-of-sequence token or the
 *   end of the context
 * @error: return location for a #GError
 *
 * Adds a sequence to the batch, in a free slot; its prompt is fed by the next
 * [method@Amk.Batch.step]. Loads the model and the batch's programs the first time.
 * A prompt that is empty, or longer than the model's context, and a batch whose slots
 * are all taken fail in %AMK_BATCH_ERROR; the other sequences are not touched.
 *
 * Returns: the sequence's id (never 0), or 0 with @error set
 */
guint
amk_batch_add (AmkBatch    *self,
               const char  *prompt,
               guint        max_tokens,
               GError     **error)
{
  g_autofree gint32 *ids = NULL;
  AmkModelBuild *build;
  Sequence *seq;
  gsize n = 0;
  gint slot = -1;

  g_return_val_if_fail (AMK_IS_BATCH (self), 0);
  g_return_val_if_fail (prompt != NULL, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  if (!check_idle (self, error))
    return 0;
  if (*prompt == '\0')
    {
      g_set_error_literal (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_EMPTY_PROMPT,
                           _("The prompt is empty: give some text to start from"));
      return 0;
    }
  for (guint s = 0; s < self->capacity && slot < 0; s++)
    if (self->slots[s] == NULL)
      slot = (gint) s;
  if (slot < 0)
    {
      g_set_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_FULL,
                   _("All %u sequences of the batch are running: step until one finishes, "
                     "or make the batch with a larger capacity (at most %u)"),
                   self->capacity, AMK_BATCH_MAX_CAPACITY);
      return 0;
    }
  if (!ensure_loaded (self, error))
    return 0;
  build = amk_model_get_build (self->model);
  ids = amk_tokenizer_encode (build->tokenizer, prompt, TRUE, &n, error);
  if (ids == NULL)
    return 0;
  if (n == 0)
    {
      g_set_error_literal (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_EMPTY_PROMPT,
                           _("The prompt encodes to no tokens"));
      return 0;
    }
  if (n > build->context)
    {
      g_set_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_CONTEXT_FULL,
                   _("The prompt (%zu tokens) does not fit in the context of %u tokens: "
                     "shorten it, or load the model with a longer context"),
                   (size_t) n, build->context);
      return 0;
    }

  seq = g_new0 (Sequence, 1);
  seq->id = self->next_id++;
  seq->slot = slot;
  seq->prompt = g_steal_pointer (&ids);
  seq->n_prompt = (guint) n;
  seq->max_tokens = max_tokens;
  seq->next = -1;
  seq->tokens = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_hash_table_insert (self->sequences, GUINT_TO_POINTER (seq->id), seq);
  self->slots[slot] = seq;
  g_atomic_int_inc (&self->n_active);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_N_ACTIVE]);
  return seq->id;
}

/**
 * amk_batch_cancel:
 * @self: a batch
 * @id: a sequence of the batch
 * @error: return location for a #GError
 *
 * Stops a running sequence (its finish reason becomes %AMK_FINISH_REASON_CANCELLED)
 * and frees its slot; its text so far stays readable. A sequence that has finished is
 * left as it is. The other sequences go on unharmed.
 *
 * Returns: %TRUE, or %FALSE with %AMK_BATCH_ERROR_UNKNOWN_SEQUENCE
 */
gboolean
amk_batch_cancel (AmkBatch  *self,
                  guint      id,
                  GError   **error)
{
  Sequence *seq;

  g_return_val_if_fail (AMK_IS_BATCH (self), FALSE);

  if ((seq = lookup (self, id, error)) == NULL)
    return FALSE;
  if (seq->slot >= 0)
    finish (self, seq, AMK_FINISH_REASON_CANCELLED);
  return TRUE;
}

/**
 * amk_batch_remove:
 * @self: a batch
 * @id: a sequence of the batch
 * @error: return location for a #GError
 *
 * Forgets a sequence, cancelling it first if it is running.
 *
 * Returns: %TRUE, or %FALSE with %AMK_BATCH_ERROR_UNKNOWN_SEQUENCE
 */
gboolean
amk_batch_remove (AmkBatch  *self,
                  guint      id,
                  GError   **error)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), FALSE);

  if (!amk_batch_cancel (self, id, error))
    return FALSE;
  g_hash_table_remove (self->sequences, GUINT_TO_POINTER (id));
  return TRUE;
}

/* ---- steps -------------------------------------------------------------------------- */

/* Feeds the next chunk of a sequence's prompt (of every token but the last) into its
 * slot of the caches, one launch; the rows after the last token are padding (position
 * -1). One chunk per step: the running sequences go on meanwhile. */
static gboolean
prefill (AmkBatch      *self,
         Sequence      *seq,
         GCancellable  *cancellable,
         GError       **error)
{
  const AmkModelRows *chunk = self->programs->prefill;
  g_autofree gint32 *ids = g_new (gint32, chunk->rows);
  g_autofree gint32 *pos = g_new (gint32, chunk->rows);
  g_autofree gint32 *slot = g_new (gint32, chunk->rows);

  if (seq->fed + 1 < seq->n_prompt)
    {
      const guint rows = MIN (chunk->rows, seq->n_prompt - 1 - seq->fed);

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;
      for (guint r = 0; r < chunk->rows; r++)
        {
          ids[r] = r < rows ? seq->prompt[seq->fed + r] : 0;
          pos[r] = r < rows ? (gint32) (seq->position + r) : -1;
          slot[r] = seq->slot;
        }
      if (!upload_i32 (self->prefill_executor, chunk->tokens, ids, chunk->rows, error) ||
          !upload_i32 (self->prefill_executor, chunk->pos, pos, chunk->rows, error) ||
          !upload_i32 (self->prefill_executor, chunk->seq, slot, chunk->rows, error) ||
          !amk_executor_run (self->prefill_executor, cancellable, error))
        return FALSE;
      seq->fed += rows;
      seq->position += rows;
    }
  return TRUE;
}

static gboolean
is_end_of_sequence (AmkModelBuild *build,
                    gint32         token)
{
  for (guint i = 0; i < build->n_eos_ids; i++)
    if (build->eos_ids[i] == token)
      return TRUE;
  return FALSE;
}

/* What a sequence does with the token its row of the step gave. */
static void
take_token (AmkBatch  *self,
            Sequence  *seq,
            gint32     token)
{
  AmkModelBuild *build = amk_model_get_build (self->model);
  g_autoptr(GError) local = NULL;
  g_autofree char *piece = NULL;
  AmkFinishReason reason = AMK_FINISH_REASON_NONE;
  guint id;

  if (token < 0 || (guint) token >= build->n_pieces)
    {
      g_debug ("sequence %u: no valid token at position %u (its logits are not finite)",
               seq->id, seq->position);
      finish (self, seq, AMK_FINISH_REASON_ERROR);
      return;
    }
  if (is_end_of_sequence (build, token))
    {
      finish (self, seq, AMK_FINISH_REASON_STOP);
      return;
    }
  g_array_append_val (seq->tokens, token);
  seq->next = token;
  if (seq->max_tokens > 0 && seq->tokens->len >= seq->max_tokens)
    reason = AMK_FINISH_REASON_LENGTH;
  else if (seq->position >= build->context)
    reason = AMK_FINISH_REASON_CONTEXT;
  /* the last token's piece carries whatever text was held back */
  piece = amk_tokenizer_decode_piece (build->tokenizer, (const gint32 *) seq->tokens->data,
                                      seq->tokens->len, reason != AMK_FINISH_REASON_NONE,
                                      &seq->held, &local);
  if (piece == NULL)
    {
      /* an id the model has and the tokenizer lacks */
      g_debug ("sequence %u: %s", seq->id, local->message);
      finish (self, seq, AMK_FINISH_REASON_ERROR);
      return;
    }
  id = seq->id;
  emit (self, (Event) { .signal = SIGNAL_TOKEN, .id = id, .token = token, .piece = piece });
  seq = g_hash_table_lookup (self->sequences, GUINT_TO_POINTER (id));
  if (seq != NULL && seq->slot >= 0 && reason != AMK_FINISH_REASON_NONE)
    finish (self, seq, reason);   /* unless a handler cancelled or removed it */
}

/* The rows' greedy tokens with no id that the tokenizer has no piece for: a model whose
 * embedding is padded beyond the tokenizer (Qwen3) never produces those ids, as in
 * transformers. The device's argmax runs over every id; a row that picked a padding id
 * takes the argmax of its logits over the tokenizer's ids instead (a download of the
 * logits, only then). */
static gint32 *
without_padding (AmkBatch      *self,
                 const gint32  *next,
                 GError       **error)
{
  AmkModelBuild *build = amk_model_get_build (self->model);
  const guint vocab = build->vocab_size;
  const guint n_pieces = build->n_pieces;
  g_autofree gint32 *chosen = g_memdup2 (next, self->capacity * sizeof (gint32));
  g_autoptr(GBytes) logits = NULL;

  for (guint s = 0; s < self->capacity; s++)
    {
      const float *row;
      gsize size = 0;

      if (chosen[s] < 0 || (guint) chosen[s] < n_pieces || (guint) chosen[s] >= vocab)
        continue;
      if (logits == NULL &&
          (logits = amk_executor_download (self->executor, (guint) self->programs->step->logits, error)) == NULL)
        return NULL;
      row = g_bytes_get_data (logits, &size);
      g_return_val_if_fail (size == (gsize) self->capacity * vocab * sizeof (float), NULL);
      chosen[s] = amk_sample_argmax (row + (gsize) s * vocab, n_pieces);
    }
  return g_steal_pointer (&chosen);
}

/* One step; signals through emit(). */
static gboolean
step_run (AmkBatch      *self,
          GCancellable  *cancellable,
          GError       **error)
{
  gint32 tokens[AMK_BATCH_MAX_CAPACITY], pos[AMK_BATCH_MAX_CAPACITY];
  guint ran[AMK_BATCH_MAX_CAPACITY];
  gboolean any = FALSE;
  g_autoptr(GBytes) out = NULL;
  g_autofree gint32 *chosen = NULL;
  const gint32 *next;
  AmkModelRows *step;
  gsize size = 0;

  if (amk_batch_get_n_active (self) == 0)
    return TRUE;
  if (g_cancellable_set_error_if_cancelled (cancellable, error) || !ensure_loaded (self, error))
    return FALSE;
  step = self->programs->step;

  for (guint s = 0; s < self->capacity; s++)
    {
      Sequence *seq = self->slots[s];

      if (seq != NULL && self->prefill_executor != NULL)
        {
          if (!prefill (self, seq, cancellable, error))
            return FALSE;
          if (seq->fed + 1 < seq->n_prompt)
            seq = NULL;   /* more of its prompt next step: its row idles */
        }
      /* a row feeds its sequence's next prompt token or its last generated one */
      tokens[s] = seq == NULL ? 0 : seq->fed < seq->n_prompt ? seq->prompt[seq->fed] : seq->next;
      pos[s] = seq == NULL ? -1 : (gint32) seq->position;
      ran[s] = seq == NULL ? 0 : seq->id;
      any |= seq != NULL;
    }
  if (!any)
    return TRUE;   /* only prompts were fed */
  if (g_cancellable_set_error_if_cancelled (cancellable, error) ||
      !upload_i32 (self->executor, step->tokens, tokens, self->capacity, error) ||
      !upload_i32 (self->executor, step->pos, pos, self->capacity, error) ||
      !amk_executor_run (self->executor, cancellable, error) ||
      (out = amk_executor_download (self->executor, (guint) step->tokens, error)) == NULL)
    return FALSE;
  next = g_bytes_get_data (out, &size);
  g_return_val_if_fail (size == self->capacity * sizeof (gint32), FALSE);
  if ((chosen = without_padding (self, next, error)) == NULL)
    return FALSE;
  g_atomic_int_inc (&self->steps);

  /* by id: the signals' handlers may cancel, remove and add sequences meanwhile */
  for (guint s = 0; s < self->capacity; s++)
    {
      Sequence *seq = ran[s] != 0 ? g_hash_table_lookup (self->sequences, GUINT_TO_POINTER (ran[s])) : NULL;

      if (seq == NULL || seq->slot != (gint) s)
        continue;
      seq->position++;
      if (seq->fed < seq->n_prompt && ++seq->fed < seq->n_prompt)
        continue;   /* still in its prompt: the row's token is not wanted */
      take_token (self, seq, chosen[s]);
    }
  notify (self, PROP_STEPS);
  return TRUE;
}

/**
 * amk_batch_step:
 * @self: a batch
 * @cancellable: (nullable): a #GCancellable
 * @error: return location for a #GError
 *
 * Feeds the next chunk of the prompt of each sequence still reading it (one launch of
 * the prefill chunk each), then runs the batch step once: every sequence whose prompt
 * is in gets its next token ([signal@Amk.Batch::token]), and those that end emit
 * [signal@Amk.Batch::finished]. So a long prompt that joins does not hold the others
 * up: they go on a token per step while it is read.
 * With no running sequence it does nothing. A failed launch or a cancellation leaves
 * the sequences as they were before the launch. While an asynchronous step runs it
 * fails with %AMK_BATCH_ERROR_BUSY.
 *
 * Returns: %TRUE, or %FALSE with @error set
 */
gboolean
amk_batch_step (AmkBatch      *self,
                GCancellable  *cancellable,
                GError       **error)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return check_idle (self, error) && step_run (self, cancellable, error);
}

/* The end of an asynchronous step, in the caller's context, queued before the task's
 * completion (same priority, so in that order): the step's signals, then the
 * property notifications. */
static gboolean
step_replay (gpointer data)
{
  AmkBatch *self = data;
  g_autoptr(GArray) events = g_steal_pointer (&self->events);

  self->busy = FALSE;
  for (guint i = 0; i < events->len; i++)
    emit_event (self, &g_array_index (events, Event, i));
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_N_ACTIVE]);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_STEPS]);
  return G_SOURCE_REMOVE;
}

static void
step_thread (GTask        *task,
             gpointer      source,
             gpointer      task_data,
             GCancellable *cancellable)
{
  AmkBatch *self = source;
  GError *error = NULL;
  gboolean ok = step_run (self, cancellable, &error);
  g_autoptr(GSource) replay = g_idle_source_new ();

  /* an idle source, never a direct call: the signals belong to the caller's thread */
  g_source_set_priority (replay, G_PRIORITY_DEFAULT);
  g_source_set_callback (replay, step_replay, g_object_ref (self), g_object_unref);
  g_source_attach (replay, g_task_get_context (task));
  if (ok)
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

/**
 * amk_batch_step_async:
 * @self: a batch
 * @cancellable: (nullable): a #GCancellable
 * @callback: (scope async): called when the step is done
 * @user_data: data for @callback
 *
 * Runs [method@Amk.Batch.step] in a worker thread. Its [signal@Amk.Batch::token] and
 * [signal@Amk.Batch::finished] signals are emitted in the thread-default main context
 * of the call, all of them before @callback. Until then every other call on the batch
 * but the property getters fails with %AMK_BATCH_ERROR_BUSY, also a second
 * asynchronous step.
 */
void
amk_batch_step_async (AmkBatch            *self,
                      GCancellable        *cancellable,
                      GAsyncReadyCallback  callback,
                      gpointer             user_data)
{
  g_autoptr(GTask) task = NULL;
  GError *error = NULL;

  g_return_if_fail (AMK_IS_BATCH (self));

  task = g_task_new (self, cancellable, callback, user_data);
  g_task_set_source_tag (task, amk_batch_step_async);
  if (!check_idle (self, &error))
    {
      g_task_return_error (task, error);
      return;
    }
  self->busy = TRUE;
  self->events = g_array_new (FALSE, FALSE, sizeof (Event));
  g_array_set_clear_func (self->events, event_clear);
  g_task_run_in_thread (task, step_thread);
}

/**
 * amk_batch_step_finish:
 * @self: a batch
 * @result: the result given to the callback
 * @error: return location for a #GError
 *
 * Ends [method@Amk.Batch.step_async].
 * Call it once for each @result: a second call is a programmer error (a critical
 * warning, and no result).
 *
 * Returns: %TRUE, or %FALSE with @error set
 */
gboolean
amk_batch_step_finish (AmkBatch      *self,
                       GAsyncResult  *result,
                       GError       **error)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), FALSE);
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);

  return g_task_propagate_boolean (G_TASK (result), error);
}

/**
 * amk_batch_run:
 * @self: a batch
 * @cancellable: (nullable): a #GCancellable
 * @error: return location for a #GError
 *
 * Steps until every sequence has finished ([method@Amk.Batch.step]).
 *
 * Returns: %TRUE, or %FALSE with @error set
 */
gboolean
amk_batch_run (AmkBatch      *self,
               GCancellable  *cancellable,
               GError       **error)
{
  g_return_val_if_fail (AMK_IS_BATCH (self), FALSE);

  while (amk_batch_get_n_active (self) > 0)
    if (!amk_batch_step (self, cancellable, error))
      return FALSE;
  return TRUE;
}

/* ---- results ------------------------------------------------------------------------ */

/**
 * amk_batch_get_finish_reason:
 * @self: a batch
 * @id: a sequence of the batch
 * @error: return location for a #GError
 *
 * Says whether a sequence has finished, and why.
 *
 * Returns: why the sequence ended, %AMK_FINISH_REASON_NONE while it runs (and with
 *   @error set for an unknown id)
 */
AmkFinishReason
amk_batch_get_finish_reason (AmkBatch  *self,
                             guint      id,
                             GError   **error)
{
  Sequence *seq;

  g_return_val_if_fail (AMK_IS_BATCH (self), AMK_FINISH_REASON_NONE);

  seq = lookup (self, id, error);
  return seq != NULL ? seq->reason : AMK_FINISH_REASON_NONE;
}

/**
 * amk_batch_get_text:
 * @self: a batch
 * @id: a sequence of the batch
 * @error: return location for a #GError
 *
 * Gets the text a sequence has generated so far: the text of its tokens
 * ([method@Amk.Batch.get_tokens]), which the [signal@Amk.Batch::token] pieces stream;
 * a sequence that stops or is cancelled right after a token that ends inside a UTF-8
 * character has that character here as U+FFFD, which no piece streamed.
 *
 * Returns: (transfer full) (nullable): the text (not the prompt), or %NULL with @error
 *   set
 */
char *
amk_batch_get_text (AmkBatch  *self,
                    guint      id,
                    GError   **error)
{
  Sequence *seq;

  g_return_val_if_fail (AMK_IS_BATCH (self), NULL);

  if ((seq = lookup (self, id, error)) == NULL)
    return NULL;
  return amk_tokenizer_decode (amk_model_get_build (self->model)->tokenizer,
                               (const gint32 *) seq->tokens->data, seq->tokens->len, error);
}

/**
 * amk_batch_get_tokens:
 * @self: a batch
 * @id: a sequence of the batch
 * @error: return location for a #GError
 *
 * Gets the token ids a sequence has generated so far (not an end-of-sequence token).
 *
 * Returns: (transfer full) (element-type gint32) (nullable): the ids, or %NULL with
 *   @error set
 */
GArray *
amk_batch_get_tokens (AmkBatch  *self,
                      guint      id,
                      GError   **error)
{
  Sequence *seq;

  g_return_val_if_fail (AMK_IS_BATCH (self), NULL);

  if ((seq = lookup (self, id, error)) == NULL)
    return NULL;
  return g_array_copy (seq->tokens);
}

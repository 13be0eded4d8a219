/* amk-cpu-executor.c: AmkCpuExecutor runs a verified image on the host with the VM's
 * semantics, interleaving the queues with a seeded random scheduler so that a missing
 * wait shows up as a wrong or seed-dependent result rather than hiding behind a lucky
 * order.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-cpu-executor.h"
#include "amk-op-private.h"
#include "amk-program-private.h"
#include "amk-abort-record.h"
#include "amk-error.h"

/**
 * AmkCpuExecutor:
 *
 * Runs a verified [class@Amk.Program] on the host.
 *
 * The CPU executor is the reference every GPU result is compared with, and what runs
 * where no GPU is. It keeps its own copy of every buffer, starting from the program's
 * default contents; [method@Amk.CpuExecutor.upload] and
 * [method@Amk.CpuExecutor.download] move data in and out between runs.
 *
 * At each step the executor picks one of the queues whose next instruction may start
 * (its waits hold) at random, from a generator seeded with [property@Amk.CpuExecutor:seed],
 * and runs that instruction whole. A program that forgot a wait computes different
 * results for different seeds.
 */

struct _AmkCpuExecutor
{
  GObject parent_instance;

  AmkProgram   *program;
  gboolean      ready;          /* memory allocated: g_initable_init succeeded */
  guint         n_buffers;      /* the program's size when the executor was made */
  guint         n_instructions;
  guint64       seed;
  guint8       *arena;
  GPtrArray    *storage;        /* owned allocations of the non-scratch buffers */
  AmkCpuBuffer *buffers;
  AmkAbortRecord last_abort;
};

enum {
  PROP_0,
  PROP_PROGRAM,
  PROP_SEED,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void amk_cpu_executor_initable_iface_init (GInitableIface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (AmkCpuExecutor, amk_cpu_executor, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      amk_cpu_executor_initable_iface_init))

static void
amk_cpu_executor_finalize (GObject *object)
{
  AmkCpuExecutor *self = AMK_CPU_EXECUTOR (object);

  g_clear_object (&self->program);
  g_clear_pointer (&self->storage, g_ptr_array_unref);
  g_free (self->arena);
  g_free (self->buffers);

  G_OBJECT_CLASS (amk_cpu_executor_parent_class)->finalize (object);
}

static void
amk_cpu_executor_get_property (GObject    *object,
                               guint       prop_id,
                               GValue     *value,
                               GParamSpec *pspec)
{
  AmkCpuExecutor *self = AMK_CPU_EXECUTOR (object);

  switch (prop_id)
    {
    case PROP_PROGRAM:
      g_value_set_object (value, self->program);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, self->seed);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_cpu_executor_set_property (GObject      *object,
                               guint         prop_id,
                               const GValue *value,
                               GParamSpec   *pspec)
{
  AmkCpuExecutor *self = AMK_CPU_EXECUTOR (object);

  switch (prop_id)
    {
    case PROP_PROGRAM:
      self->program = g_value_dup_object (value);
      break;
    case PROP_SEED:
      amk_cpu_executor_set_seed (self, g_value_get_uint64 (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_cpu_executor_class_init (AmkCpuExecutorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_cpu_executor_finalize;
  object_class->get_property = amk_cpu_executor_get_property;
  object_class->set_property = amk_cpu_executor_set_property;

  /**
   * AmkCpuExecutor:program:
   *
   * The program the executor runs; verified when the executor is made.
   */
  properties[PROP_PROGRAM] =
    g_param_spec_object ("program", NULL, NULL, AMK_TYPE_PROGRAM,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkCpuExecutor:seed:
   *
   * Seeds the scheduler that interleaves the queues; each run starts from it, so one
   * seed always gives the same order.
   */
  properties[PROP_SEED] =
    g_param_spec_uint64 ("seed", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
amk_cpu_executor_init (AmkCpuExecutor *self)
{
}

static void
reset_buffer (AmkCpuExecutor *self, guint b)
{
  AmkCpuBuffer *buf = &self->buffers[b];

  if (buf->info->data != NULL)
    memcpy (buf->data, g_bytes_get_data (buf->info->data, NULL), buf->info->size_bytes);
  else
    memset (buf->data, 0, buf->info->size_bytes);
}

/* Host memory for an image can be huge (or claimed huge by a file): ask, don't abort. */
static guint8 *
try_alloc (gsize size, const char *what, GError **error)
{
  guint8 *mem = g_try_malloc0 (MAX (size, 1));

  if (mem == NULL)
    g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_FAILED,
                 _("The CPU executor cannot allocate %zu bytes for %s"), size, what);
  return mem;
}

static gboolean
amk_cpu_executor_initable_init (GInitable     *initable,
                                GCancellable  *cancellable,
                                GError       **error)
{
  AmkCpuExecutor *self = AMK_CPU_EXECUTOR (initable);
  AmkProgram *program = self->program;

  if (self->ready)
    return TRUE;
  if (program == NULL)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                           _("A CPU executor needs a program"));
      return FALSE;
    }
  if (!amk_program_verify (program, error))
    return FALSE;

  self->n_buffers = program->buffers->len;
  self->n_instructions = program->instructions->len;
  self->arena = try_alloc (program->scratch_size, _("the scratch arena"), error);
  if (self->arena == NULL)
    return FALSE;
  self->storage = g_ptr_array_new_with_free_func (g_free);
  self->buffers = g_new0 (AmkCpuBuffer, MAX (self->n_buffers, 1));

  for (guint b = 0; b < self->n_buffers; b++)
    {
      AmkBufferInfo *info = g_ptr_array_index (program->buffers, b);

      self->buffers[b].info = info;
      if (info->role == AMK_BUFFER_ROLE_SCRATCH)
        self->buffers[b].data = self->arena + info->arena_offset;
      else
        {
          self->buffers[b].data = try_alloc (info->size_bytes, info->name, error);
          if (self->buffers[b].data == NULL)
            return FALSE;
          g_ptr_array_add (self->storage, self->buffers[b].data);
          reset_buffer (self, b);
        }
    }
  self->ready = TRUE;
  return TRUE;
}

/* Amk.CpuExecutor(program=p) from a binding skips GInitable: set up on first use. */
static gboolean
ensure_ready (AmkCpuExecutor *self, GError **error)
{
  if (self->ready)
    return TRUE;
  g_clear_pointer (&self->storage, g_ptr_array_unref);
  g_clear_pointer (&self->arena, g_free);
  g_clear_pointer (&self->buffers, g_free);
  return amk_cpu_executor_initable_init (G_INITABLE (self), NULL, error);
}

static void
amk_cpu_executor_initable_iface_init (GInitableIface *iface)
{
  iface->init = amk_cpu_executor_initable_init;
}

/**
 * amk_cpu_executor_new:
 * @program: the program to run
 * @error: return location for a #GError
 *
 * Makes an executor for @program, verifying it first; its buffers start from the
 * program's default contents (zeros where there are none).
 *
 * Returns: (transfer full): a new executor, or %NULL with @error set
 */
AmkCpuExecutor *
amk_cpu_executor_new (AmkProgram  *program,
                      GError     **error)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (program), NULL);
  return g_initable_new (AMK_TYPE_CPU_EXECUTOR, NULL, error, "program", program, NULL);
}

/**
 * amk_cpu_executor_get_program:
 * @self: an executor
 *
 * Gets the program.
 *
 * Returns: (transfer none): the program
 */
AmkProgram *
amk_cpu_executor_get_program (AmkCpuExecutor *self)
{
  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), NULL);
  return self->program;
}

/**
 * amk_cpu_executor_get_seed:
 * @self: an executor
 *
 * Gets the scheduler's seed.
 *
 * Returns: the scheduler's seed
 */
guint64
amk_cpu_executor_get_seed (AmkCpuExecutor *self)
{
  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), 0);
  return self->seed;
}

/**
 * amk_cpu_executor_set_seed:
 * @self: an executor
 * @seed: the scheduler's seed
 *
 * Sets the seed of the scheduler that interleaves the queues.
 */
void
amk_cpu_executor_set_seed (AmkCpuExecutor *self,
                           guint64         seed)
{
  g_return_if_fail (AMK_IS_CPU_EXECUTOR (self));
  if (self->seed == seed)
    return;
  self->seed = seed;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SEED]);
}

static gboolean
check_unchanged (AmkCpuExecutor *self, GError **error)
{
  AmkProgram *p = self->program;

  if (!p->verified || p->buffers->len != self->n_buffers ||
      p->instructions->len != self->n_instructions)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED,
                           _("The program changed after the executor was made; verify it and make a new executor"));
      return FALSE;
    }
  return TRUE;
}

static AmkCpuBuffer *
get_buffer (AmkCpuExecutor *self, guint buffer, GError **error)
{
  if (!ensure_ready (self, error))
    return NULL;
  if (buffer >= self->n_buffers)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Buffer %u does not exist; the program has %u buffers"),
                   buffer, self->n_buffers);
      return NULL;
    }
  return &self->buffers[buffer];
}

/**
 * amk_cpu_executor_upload:
 * @self: an executor
 * @buffer: a buffer index
 * @data: the new contents, exactly the buffer's size
 * @error: return location for a #GError
 *
 * Replaces the contents of a buffer before the next run.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_cpu_executor_upload (AmkCpuExecutor  *self,
                         guint            buffer,
                         GBytes          *data,
                         GError         **error)
{
  AmkCpuBuffer *buf;

  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), FALSE);
  g_return_val_if_fail (data != NULL, FALSE);

  buf = get_buffer (self, buffer, error);
  if (buf == NULL)
    return FALSE;
  if (g_bytes_get_size (data) != buf->info->size_bytes)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Buffer “%s” holds %" PRIu64 " bytes but the data has %zu bytes"),
                   buf->info->name, buf->info->size_bytes, g_bytes_get_size (data));
      return FALSE;
    }
  memcpy (buf->data, g_bytes_get_data (data, NULL), buf->info->size_bytes);
  return TRUE;
}

/**
 * amk_cpu_executor_download:
 * @self: an executor
 * @buffer: a buffer index
 * @error: return location for a #GError
 *
 * Copies out the contents of a buffer.
 *
 * Returns: (transfer full): the contents, or %NULL with @error set
 */
GBytes *
amk_cpu_executor_download (AmkCpuExecutor  *self,
                           guint            buffer,
                           GError         **error)
{
  AmkCpuBuffer *buf;

  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), NULL);

  buf = get_buffer (self, buffer, error);
  if (buf == NULL)
    return NULL;
  return g_bytes_new (buf->data, buf->info->size_bytes);
}

typedef struct {
  AmkProgram *program;
  guint      *pc;
  guint32    *counters;
} RunState;

static const amk_instruction_t *
head (RunState *st, guint q)
{
  GArray *queue = g_ptr_array_index (st->program->queues, q);
  if (st->pc[q] >= queue->len)
    return NULL;
  return &g_array_index (st->program->instructions, amk_instruction_t,
                         g_array_index (queue, gint32, st->pc[q]));
}

static gboolean
waits_hold (RunState *st, const amk_instruction_t *ins)
{
  for (guint w = 0; w < ins->n_waits; w++)
    if (st->counters[ins->waits[w].counter] < ins->waits[w].target)
      return FALSE;
  return TRUE;
}

/**
 * amk_cpu_executor_run:
 * @self: an executor
 * @error: return location for a #GError
 *
 * Runs the program once: counters start at zero, scratch buffers keep what the last
 * run left (as on the GPU). A TRAP instruction ends the run with
 * %AMK_LAUNCH_ERROR_ABORTED, like a device-side abort.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_cpu_executor_run (AmkCpuExecutor  *self,
                      GError         **error)
{
  AmkProgram *program;
  RunState st;
  g_autoptr(GRand) rand = NULL;
  g_autofree guint *runnable = NULL;
  g_autofree guint *pc = NULL;
  g_autofree guint32 *counters = NULL;
  guint remaining, n_queues;
  guint32 seed_words[2];

  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!ensure_ready (self, error) || !check_unchanged (self, error))
    return FALSE;

  program = self->program;
  n_queues = program->num_queues;
  pc = g_new0 (guint, n_queues);
  counters = g_new0 (guint32, program->counter_names->len + 1);
  runnable = g_new0 (guint, n_queues);
  st = (RunState) { program, pc, counters };
  seed_words[0] = (guint32) self->seed;
  seed_words[1] = (guint32) (self->seed >> 32);
  rand = g_rand_new_with_seed_array (seed_words, 2);
  memset (&self->last_abort, 0, sizeof self->last_abort);
  remaining = program->instructions->len;

  while (remaining > 0)
    {
      guint n_runnable = 0, n_at_barrier = 0;
      guint q, pos;
      const amk_instruction_t *ins;
      AmkAbortCode code;
      gint detail = 0;

      for (q = 0; q < n_queues; q++)
        {
          ins = head (&st, q);
          if (ins == NULL || !waits_hold (&st, ins))
            continue;
          if (ins->opcode == AMK_ABI_OP_GRID_SYNC)
            n_at_barrier++;
          else
            runnable[n_runnable++] = q;
        }

      if (n_runnable == 0)
        {
          if (n_at_barrier == n_queues)
            {
              /* every queue stands at its barrier: release them together */
              for (q = 0; q < n_queues; q++)
                {
                  ins = head (&st, q);
                  pc[q]++;
                  remaining--;
                  if (ins->signal.counter != AMK_NO_COUNTER)
                    counters[ins->signal.counter] += ins->signal.amount;
                }
              continue;
            }
          /* the verifier proves this cannot happen; say so if it ever does */
          g_set_error_literal (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_TIMEOUT,
                               _("The CPU executor found no queue that can run; the program deadlocks"));
          return FALSE;
        }

      q = runnable[g_rand_int_range (rand, 0, (gint32) n_runnable)];
      pos = pc[q];
      ins = head (&st, q);
      code = amk_op_run_cpu (ins, self->buffers, counters, &detail);
      if (code != AMK_ABORT_CODE_NONE)
        {
          g_autofree char *what = NULL;

          self->last_abort = (AmkAbortRecord) { code, (gint) q, (gint) pos, -1, 0, 0, detail, -1 };
          what = amk_abort_record_to_string (&self->last_abort);
          g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED,
                       _("The run was aborted: %s"), what);
          return FALSE;
        }
      pc[q]++;
      remaining--;
      if (ins->signal.counter != AMK_NO_COUNTER)
        counters[ins->signal.counter] += ins->signal.amount;
    }
  return TRUE;
}

/**
 * amk_cpu_executor_get_last_abort:
 * @self: an executor
 *
 * Gets the record of the last run's abort.
 *
 * Returns: (transfer full) (nullable): the record of the last run's abort, or %NULL if
 *   the last run was not aborted
 */
AmkAbortRecord *
amk_cpu_executor_get_last_abort (AmkCpuExecutor *self)
{
  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), NULL);
  if (self->last_abort.code == AMK_ABORT_CODE_NONE)
    return NULL;
  return amk_abort_record_copy (&self->last_abort);
}

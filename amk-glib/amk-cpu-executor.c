/* amk-cpu-executor.c: AmkCpuExecutor runs a verified image on the host with the VM's
 * semantics: its queues on worker threads (amk-cpu-workers.c), or one instruction at a
 * time in the order of a seeded random scheduler, so that tests can run many orders of
 * the queues rather than one lucky one.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-cpu-executor.h"
#include "amk-cpu-workers-private.h"
#include "amk-executor-private.h"
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
 * where no GPU is. It is an [iface@Amk.Executor]: it keeps its own copy of every buffer,
 * starting from the program's default contents; [method@Amk.Executor.upload] and
 * [method@Amk.Executor.download] move data in and out between runs, and
 * [method@Amk.Executor.load] replaces the program (an executor made with
 * [ctor@Amk.CpuExecutor.new_empty] or `Amk.CpuExecutor()` has none until then).
 *
 * A program of several queues runs on worker threads, one per core by default
 * ([property@Amk.CpuExecutor:threads]): each worker runs its share of the queues in
 * order, waiting on the counters as the device does. With one thread, the executor
 * instead picks, at each step, one of the queues whose next instruction may start (its
 * waits hold) at random, from a generator seeded with [property@Amk.CpuExecutor:seed],
 * and runs that instruction whole: the same seed, the same order.
 *
 * A program that forgot a wait does not get here: the verifier's race proof refuses it,
 * so a verified program computes the same under any order. What it may still leave to
 * the order (split-K's atomic adds round in the order they come) varies with the seed
 * or, on several threads, from run to run. A program of one queue, or one thread, runs
 * on the calling thread, its largest MATVEC and MATMUL instructions split over two cores.
 */

struct _AmkCpuExecutor
{
  GObject parent_instance;

  AmkProgram   *construct_program; /* the program property, until it is loaded */
  AmkLoadedProgram loaded;      /* the program and its shape, its memory below */
  guint64       seed;
  guint         threads;        /* 0: one per core */
  guint8       *arena;
  GPtrArray    *storage;        /* CpuMemory of each buffer, NULL in the arena */
  AmkCpuBuffer *buffers;
  AmkAbortRecord last_abort;
};

enum {
  PROP_0,
  PROP_PROGRAM,
  PROP_SEED,
  PROP_THREADS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void amk_cpu_executor_initable_iface_init (GInitableIface *iface);
static void amk_cpu_executor_executor_iface_init (AmkExecutorInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (AmkCpuExecutor, amk_cpu_executor, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      amk_cpu_executor_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (AMK_TYPE_EXECUTOR,
                                                      amk_cpu_executor_executor_iface_init))

/* The memory of one buffer outside the arena. amk_executor_load_shared() lets executors
 * share it, so it is reference-counted: it goes with the last executor that uses it,
 * whichever loads another program or is finalized first. */
typedef struct {
  guint8 *data;
} CpuMemory;

static void
cpu_memory_clear (gpointer mem)
{
  g_free (((CpuMemory *) mem)->data);
}

static void
cpu_memory_release (gpointer mem)
{
  if (mem != NULL)
    g_atomic_rc_box_release_full (mem, cpu_memory_clear);
}

static void
release_memory (AmkCpuExecutor *self)
{
  g_clear_pointer (&self->storage, g_ptr_array_unref);
  g_clear_pointer (&self->arena, g_free);
  g_clear_pointer (&self->buffers, g_free);
  amk_loaded_program_clear (&self->loaded);
}

static void
amk_cpu_executor_finalize (GObject *object)
{
  AmkCpuExecutor *self = AMK_CPU_EXECUTOR (object);

  release_memory (self);
  g_clear_object (&self->construct_program);

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
      g_value_set_object (value, self->loaded.program != NULL ? self->loaded.program
                                                               : self->construct_program);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, self->seed);
      break;
    case PROP_THREADS:
      g_value_set_uint (value, self->threads);
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
      self->construct_program = g_value_dup_object (value);
      break;
    case PROP_SEED:
      amk_cpu_executor_set_seed (self, g_value_get_uint64 (value));
      break;
    case PROP_THREADS:
      amk_cpu_executor_set_threads (self, g_value_get_uint (value));
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
   * The program the executor runs, or %NULL: the one it was made with (verified and
   * loaded when the executor is made), then the one [method@Amk.Executor.load] loaded.
   */
  properties[PROP_PROGRAM] =
    g_param_spec_object ("program", NULL, NULL, AMK_TYPE_PROGRAM,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkCpuExecutor:seed:
   *
   * Seeds the scheduler that interleaves the queues when
   * [property@Amk.CpuExecutor:threads] is 1; each run starts from it, so one seed always
   * gives the same order.
   */
  properties[PROP_SEED] =
    g_param_spec_uint64 ("seed", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkCpuExecutor:threads:
   *
   * How many worker threads run a program of several queues: 0 (the default) for one
   * per core, 1 for the seeded scheduler on the calling thread
   * ([property@Amk.CpuExecutor:seed]). No more workers than queues run.
   */
  properties[PROP_THREADS] =
    g_param_spec_uint ("threads", NULL, NULL, 0, AMK_CPU_EXECUTOR_MAX_THREADS, 0,
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

static gboolean ensure_ready (AmkCpuExecutor *self, GError **error);

/* Verifies program and gives it fresh memory, or owner's for the buffers it shares with
 * owner's program (owner may be NULL); the old program's memory goes first. */
static gboolean
cpu_load (AmkCpuExecutor  *self,
          AmkProgram      *program,
          AmkCpuExecutor  *owner,
          GError         **error)
{
  g_autofree gint *shared = NULL;
  guint n_buffers;

  if (!amk_program_verify (program, error))
    return FALSE;
  if (owner != NULL &&
      (!ensure_ready (owner, error) ||
       (shared = amk_loaded_program_match (&owner->loaded, program, error)) == NULL))
    return FALSE;
  release_memory (self);

  n_buffers = program->buffers->len;
  self->arena = try_alloc (program->scratch_size, _("the scratch arena"), error);
  if (self->arena == NULL)
    return FALSE;
  self->storage = g_ptr_array_new_full (n_buffers, cpu_memory_release);
  self->buffers = g_new0 (AmkCpuBuffer, MAX (n_buffers, 1));

  for (guint b = 0; b < n_buffers; b++)
    {
      AmkBufferInfo *info = g_ptr_array_index (program->buffers, b);
      CpuMemory *mem = NULL;

      self->buffers[b].info = info;
      if (info->role == AMK_BUFFER_ROLE_SCRATCH)
        self->buffers[b].data = self->arena + info->arena_offset;
      else if (shared != NULL && shared[b] >= 0)
        {
          /* owner's contents stay: not even the program's default data replaces them */
          mem = g_atomic_rc_box_acquire (g_ptr_array_index (owner->storage, shared[b]));
          self->buffers[b].data = mem->data;
        }
      else
        {
          guint8 *data = try_alloc (info->size_bytes, info->name, error);

          if (data == NULL)
            {
              release_memory (self);
              return FALSE;
            }
          mem = g_atomic_rc_box_new (CpuMemory);
          mem->data = data;
          self->buffers[b].data = data;
          reset_buffer (self, b);
        }
      g_ptr_array_add (self->storage, mem);
    }
  amk_loaded_program_set (&self->loaded, program);
  g_clear_object (&self->construct_program);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_PROGRAM]);
  return TRUE;
}

static gboolean
amk_cpu_executor_initable_init (GInitable     *initable,
                                GCancellable  *cancellable,
                                GError       **error)
{
  AmkCpuExecutor *self = AMK_CPU_EXECUTOR (initable);

  /* without a program the executor waits for amk_executor_load() */
  if (self->construct_program == NULL)
    return TRUE;
  return cpu_load (self, self->construct_program, NULL, error);
}

/* Amk.CpuExecutor(program=p) from a binding skips GInitable: load on first use. */
static gboolean
ensure_ready (AmkCpuExecutor *self, GError **error)
{
  if (self->construct_program != NULL && !cpu_load (self, self->construct_program, NULL, error))
    return FALSE;
  return amk_loaded_program_require (&self->loaded, error);
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
 * amk_cpu_executor_new_empty:
 *
 * Makes an executor without a program, for [method@Amk.Executor.load].
 *
 * Returns: (transfer full): a new executor
 */
AmkCpuExecutor *
amk_cpu_executor_new_empty (void)
{
  return g_object_new (AMK_TYPE_CPU_EXECUTOR, NULL);
}

/**
 * amk_cpu_executor_get_program:
 * @self: an executor
 *
 * Gets the program.
 *
 * Returns: (transfer none) (nullable): the program, or %NULL when none is loaded
 */
AmkProgram *
amk_cpu_executor_get_program (AmkCpuExecutor *self)
{
  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), NULL);
  if (self->loaded.program != NULL)
    return self->loaded.program;
  return self->construct_program;
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

/**
 * amk_cpu_executor_get_threads:
 * @self: an executor
 *
 * Gets how many worker threads run a program of several queues.
 *
 * Returns: the number of threads, 0 for one per core
 */
guint
amk_cpu_executor_get_threads (AmkCpuExecutor *self)
{
  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), 0);
  return self->threads;
}

/**
 * amk_cpu_executor_set_threads:
 * @self: an executor
 * @threads: the number of worker threads, 0 for one per core, 1 for the seeded
 *   scheduler; at most %AMK_CPU_EXECUTOR_MAX_THREADS
 *
 * Sets how many worker threads run a program of several queues.
 */
void
amk_cpu_executor_set_threads (AmkCpuExecutor *self,
                              guint           threads)
{
  g_return_if_fail (AMK_IS_CPU_EXECUTOR (self));
  g_return_if_fail (threads <= AMK_CPU_EXECUTOR_MAX_THREADS);
  if (self->threads == threads)
    return;
  self->threads = threads;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_THREADS]);
}

static AmkCpuBuffer *
get_buffer (AmkCpuExecutor *self, guint buffer, GError **error)
{
  if (!ensure_ready (self, error))
    return NULL;
  if (buffer >= self->loaded.n_buffers)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Buffer %u does not exist; the program has %u buffers"),
                   buffer, self->loaded.n_buffers);
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

/* The run's schedule. Every queue that has not finished is in exactly one place: the
 * runnable set (its head's waits hold), the barrier (its head is a GRID_SYNC whose waits
 * hold), or parked on the first counter its head still waits for. A signal wakes the
 * queues parked on its counter and places them again, so picking an instruction costs
 * no scan of the queues. */
typedef struct {
  AmkProgram *program;
  guint      *pc;
  guint32    *counters;
  guint      *runnable;      /* the runnable queues, in no order */
  guint      *slot;          /* per queue: its index in runnable, or G_MAXUINT */
  guint       n_runnable;
  guint       at_barrier;
  gint32     *parked;        /* per counter: the last queue parked on it, or -1 */
  gint32     *next_parked;   /* per queue: the queue parked on the same counter before it */
} RunState;

static const amk_instruction_t *
head (RunState *st, guint q)
{
  return amk_program_queue_instruction (st->program, q, st->pc[q]);
}

/* Queue q (in no place) into the place its head calls for. */
static void
place (RunState *st, guint q)
{
  const amk_instruction_t *ins = head (st, q);

  if (ins == NULL)
    return;
  for (guint w = 0; w < ins->n_waits; w++)
    if (st->counters[ins->waits[w].counter] < ins->waits[w].target)
      {
        st->next_parked[q] = st->parked[ins->waits[w].counter];
        st->parked[ins->waits[w].counter] = (gint32) q;
        return;
      }
  if (ins->opcode == AMK_ABI_OP_GRID_SYNC)
    {
      st->at_barrier++;
      return;
    }
  st->slot[q] = st->n_runnable;
  st->runnable[st->n_runnable++] = q;
}

static void
take_runnable (RunState *st, guint q)
{
  const guint i = st->slot[q], last = st->runnable[--st->n_runnable];

  st->runnable[i] = last;
  st->slot[last] = i;
  st->slot[q] = G_MAXUINT;
}

/* Adds a finished instruction's signal and places the queues it wakes. */
static void
signal_counter (RunState *st, const amk_instruction_t *ins)
{
  gint32 p;

  if (ins->signal.counter == AMK_NO_COUNTER)
    return;
  st->counters[ins->signal.counter] += ins->signal.amount;
  p = st->parked[ins->signal.counter];
  st->parked[ins->signal.counter] = -1;
  while (p >= 0)
    {
      const gint32 next = st->next_parked[p];

      place (st, (guint) p);
      p = next;
    }
}

static guint
effective_threads (AmkCpuExecutor *self)
{
  return self->threads != 0 ? self->threads : MAX (g_get_num_processors (), 1);
}

static gboolean
set_aborted_error (AmkCpuExecutor *self, GError **error)
{
  g_autofree char *what = amk_abort_record_to_string (&self->last_abort);

  g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED, _("The run was aborted: %s"), what);
  return FALSE;
}

/* The verifier proves this cannot happen; say so if it ever does. */
static gboolean
set_deadlock_error (GError **error)
{
  g_set_error_literal (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_TIMEOUT,
                       _("The CPU executor found no queue that can run; the program deadlocks"));
  return FALSE;
}

static gboolean
cpu_run (AmkCpuExecutor  *self,
         GCancellable    *cancellable,
         GError         **error)
{
  AmkProgram *program;
  RunState st;
  g_autoptr(GRand) rand = NULL;
  g_autofree guint *runnable = NULL;
  g_autofree guint *slot = NULL;
  g_autofree guint *pc = NULL;
  g_autofree guint32 *counters = NULL;
  g_autofree gint32 *parked = NULL;
  g_autofree gint32 *next_parked = NULL;
  guint remaining, n_queues, n_counters, n_threads;
  guint32 seed_words[2];

  if (!ensure_ready (self, error) || !amk_loaded_program_check (&self->loaded, error))
    return FALSE;

  program = self->loaded.program;
  n_queues = program->num_queues;
  n_counters = program->counter_names->len;
  counters = g_new0 (guint32, n_counters + 1);
  memset (&self->last_abort, 0, sizeof self->last_abort);
  n_threads = effective_threads (self);
  if (n_threads > 1 && n_queues > 1)
    switch (amk_cpu_workers_run (program, self->buffers, counters, n_threads, cancellable,
                                 &self->last_abort))
      {
      case AMK_CPU_WORKERS_DONE:
        return TRUE;
      case AMK_CPU_WORKERS_ABORTED:
        return set_aborted_error (self, error);
      case AMK_CPU_WORKERS_CANCELLED:
        g_cancellable_set_error_if_cancelled (cancellable, error);
        return FALSE;
      case AMK_CPU_WORKERS_DEADLOCK:
        return set_deadlock_error (error);
      case AMK_CPU_WORKERS_NO_THREADS:
        break;   /* nothing ran: run the queues here */
      }

  pc = g_new0 (guint, n_queues);
  runnable = g_new0 (guint, n_queues);
  slot = g_new (guint, n_queues);
  parked = g_new (gint32, n_counters + 1);
  next_parked = g_new0 (gint32, n_queues);
  memset (slot, 0xff, n_queues * sizeof (guint));
  memset (parked, 0xff, (n_counters + 1) * sizeof (gint32));
  st = (RunState) { program, pc, counters, runnable, slot, 0, 0, parked, next_parked };
  seed_words[0] = (guint32) self->seed;
  seed_words[1] = (guint32) (self->seed >> 32);
  rand = g_rand_new_with_seed_array (seed_words, 2);
  remaining = program->instructions->len;
  for (guint q = 0; q < n_queues; q++)
    place (&st, q);

  while (remaining > 0)
    {
      guint q, pos;
      const amk_instruction_t *ins;
      AmkAbortCode code;
      gint detail = 0;

      if (g_cancellable_set_error_if_cancelled (cancellable, error))
        return FALSE;

      if (st.n_runnable == 0)
        {
          if (st.at_barrier == n_queues)
            {
              /* every queue stands at its barrier: release them together */
              st.at_barrier = 0;
              for (q = 0; q < n_queues; q++)
                {
                  ins = head (&st, q);
                  pc[q]++;
                  remaining--;
                  signal_counter (&st, ins);   /* no queue is parked: it wakes none */
                }
              for (q = 0; q < n_queues; q++)
                place (&st, q);
              continue;
            }
          return set_deadlock_error (error);
        }

      q = runnable[g_rand_int_range (rand, 0, (gint32) st.n_runnable)];
      take_runnable (&st, q);
      pos = pc[q];
      ins = head (&st, q);
      code = amk_op_run_cpu (ins, self->buffers, counters, &detail);
      if (code != AMK_ABORT_CODE_NONE)
        {
          self->last_abort = (AmkAbortRecord) { code, (gint) q, (gint) pos, -1, 0, 0, detail, -1 };
          return set_aborted_error (self, error);
        }
      pc[q]++;
      remaining--;
      signal_counter (&st, ins);
      place (&st, q);
    }
  return TRUE;
}

/**
 * amk_cpu_executor_run:
 * @self: an executor
 * @error: return location for a #GError
 *
 * Runs the program once: counters start at zero, scratch buffers keep what the last
 * run left (as on the GPU). A TRAP instruction ends the run with
 * %AMK_LAUNCH_ERROR_ABORTED, like a device-side abort. [method@Amk.Executor.run] is
 * the same with a #GCancellable, checked before each instruction.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_cpu_executor_run (AmkCpuExecutor  *self,
                      GError         **error)
{
  g_return_val_if_fail (AMK_IS_CPU_EXECUTOR (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return cpu_run (self, NULL, error);
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

/* ---- AmkExecutor ---------------------------------------------------------------------- */

static gboolean
executor_load (AmkExecutor *executor, AmkProgram *program, GError **error)
{
  return cpu_load (AMK_CPU_EXECUTOR (executor), program, NULL, error);
}

static gboolean
executor_load_shared (AmkExecutor *executor, AmkProgram *program, AmkExecutor *owner,
                      GError **error)
{
  return cpu_load (AMK_CPU_EXECUTOR (executor), program, AMK_CPU_EXECUTOR (owner), error);
}

static AmkProgram *
executor_get_program (AmkExecutor *executor)
{
  return amk_cpu_executor_get_program (AMK_CPU_EXECUTOR (executor));
}

static gboolean
executor_upload (AmkExecutor *executor, guint buffer, GBytes *data, GError **error)
{
  return amk_cpu_executor_upload (AMK_CPU_EXECUTOR (executor), buffer, data, error);
}

static GBytes *
executor_download (AmkExecutor *executor, guint buffer, GError **error)
{
  return amk_cpu_executor_download (AMK_CPU_EXECUTOR (executor), buffer, error);
}

static gboolean
executor_run (AmkExecutor *executor, GCancellable *cancellable, GError **error)
{
  return cpu_run (AMK_CPU_EXECUTOR (executor), cancellable, error);
}

static AmkAbortRecord *
executor_get_last_abort (AmkExecutor *executor)
{
  return amk_cpu_executor_get_last_abort (AMK_CPU_EXECUTOR (executor));
}

/* A queue per worker: each stage's tiles spread over every core, with no more queues
 * than workers to wait on one another (more queues than cores measured slower). */
static guint
executor_get_preferred_queues (AmkExecutor *executor, GError **error)
{
  return effective_threads (AMK_CPU_EXECUTOR (executor));
}

/* MATMUL converts each weight row once per run and uses it for every row (it skips the
 * padding rows): 64 rows make that conversion cheap, and keep the chunk's buffers (its
 * head's logits among them, rows × vocabulary) small. */
static guint
executor_get_preferred_rows (AmkExecutor *executor)
{
  return 64;
}

/* MATVEC, MATMUL and the EMBEDs decode the quantized blocks they read. */
static gboolean
executor_supports_dtype (AmkExecutor *executor, AmkDType dtype)
{
  return TRUE;
}

static AmkExecutor *
executor_new_sibling (AmkExecutor *executor)
{
  AmkCpuExecutor *cpu = amk_cpu_executor_new_empty ();
  guint64 seed = 0;
  guint threads = 0;

  g_object_get (executor, "seed", &seed, "threads", &threads, NULL);
  g_object_set (cpu, "seed", seed, "threads", threads, NULL);
  return AMK_EXECUTOR (cpu);
}

static char *
executor_get_description (AmkExecutor *executor)
{
  return g_strdup (_("CPU executor"));
}

static void
amk_cpu_executor_executor_iface_init (AmkExecutorInterface *iface)
{
  iface->load = executor_load;
  iface->get_program = executor_get_program;
  iface->upload = executor_upload;
  iface->download = executor_download;
  iface->run = executor_run;
  iface->get_last_abort = executor_get_last_abort;
  iface->get_preferred_queues = executor_get_preferred_queues;
  iface->get_description = executor_get_description;
  iface->load_shared = executor_load_shared;
  iface->get_preferred_rows = executor_get_preferred_rows;
  iface->new_sibling = executor_new_sibling;
  iface->supports_dtype = executor_supports_dtype;
}

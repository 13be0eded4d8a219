/* amk-executor.c: AmkExecutor, the interface of what runs a verified program (the CPU
 * executor, the launcher), its public wrappers, the default asynchronous run, and the
 * one check that a loaded program was not changed since.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <glib/gi18n-lib.h>

#include "amk-executor-private.h"
#include "amk-program-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

/**
 * AmkExecutor:
 *
 * Runs a verified [class@Amk.Program]: on the host ([class@Amk.CpuExecutor]) or on a
 * CUDA device ([class@Amk.Launcher]).
 *
 * Code that only loads a program, moves data in and out and runs it takes any executor:
 * [class@Amk.Generator] and [class@Amk.Model] do, and so does `amk run`.
 *
 * [method@Amk.Executor.load] verifies a program and gives it fresh buffers with the
 * program's default contents; [method@Amk.Executor.upload] and
 * [method@Amk.Executor.download] move data between runs; [method@Amk.Executor.run]
 * runs the program once. An executor runs the program as it was when it was loaded: a
 * program that gained buffers, counters or instructions, whose scratch arena changed
 * size, or that is no longer verified must be loaded again, else a run fails with
 * %AMK_PROGRAM_ERROR_NOT_VERIFIED. A run that a TRAP or a device watchdog ended fails
 * with %AMK_LAUNCH_ERROR_ABORTED or %AMK_LAUNCH_ERROR_TIMEOUT and leaves a record in
 * [method@Amk.Executor.get_last_abort].
 *
 * [method@Amk.Executor.get_preferred_queues] says how many queues a program for this
 * executor should have: one for the CPU executor, one per multiprocessor for a GPU.
 *
 * Two programs can share memory: [method@Amk.Executor.load_shared] loads a program on a
 * second executor of the same kind so that its buffers named like a buffer of the first
 * executor's program (the weights, a KV cache) use the first executor's memory, with
 * one copy of the weights and each program seeing what the other wrote.
 */

G_DEFINE_INTERFACE (AmkExecutor, amk_executor, G_TYPE_OBJECT)

static void
run_thread (GTask        *task,
            gpointer      source_object,
            gpointer      task_data,
            GCancellable *cancellable)
{
  GError *error = NULL;

  if (AMK_EXECUTOR_GET_IFACE (source_object)->run (source_object, cancellable, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
}

/* The default run_async: the synchronous run in a worker thread. */
static void
amk_executor_real_run_async (AmkExecutor         *self,
                             GCancellable        *cancellable,
                             GAsyncReadyCallback  callback,
                             gpointer             user_data)
{
  g_autoptr(GTask) task = g_task_new (self, cancellable, callback, user_data);

  g_task_set_source_tag (task, amk_executor_real_run_async);
  g_task_set_return_on_cancel (task, FALSE);
  g_task_run_in_thread (task, run_thread);
}

static gboolean
amk_executor_real_run_finish (AmkExecutor   *self,
                              GAsyncResult  *result,
                              GError       **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  g_return_val_if_fail (g_async_result_is_tagged (result, amk_executor_real_run_async), FALSE);

  return g_task_propagate_boolean (G_TASK (result), error);
}

static char *
amk_executor_real_get_description (AmkExecutor *self)
{
  return g_strdup (G_OBJECT_TYPE_NAME (self));
}

static void
amk_executor_default_init (AmkExecutorInterface *iface)
{
  iface->run_async = amk_executor_real_run_async;
  iface->run_finish = amk_executor_real_run_finish;
  iface->get_description = amk_executor_real_get_description;
}

gboolean
amk_executor_check_dtypes (AmkExecutor  *self,
                           AmkProgram   *program,
                           GError      **error)
{
  for (guint b = 0; b < amk_program_get_n_buffers (program); b++)
    {
      AmkDType dtype = amk_program_get_buffer_dtype (program, b);

      if (!amk_executor_supports_dtype (self, dtype))
        {
          g_autofree char *what = amk_executor_get_description (self);

          g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_UNSUPPORTED,
                       _("Buffer “%s” is %s, a type that the %s does not run yet; use bf16 "
                         "there, or the CPU executor (a model loaded for the CPU executor "
                         "keeps such weights: load it again, as a new Amk.Model, for this one)"),
                       amk_program_get_buffer_name (program, b), amk_dtype_name (dtype), what);
          return FALSE;
        }
    }
  return TRUE;
}

/**
 * amk_executor_load:
 * @self: an executor
 * @program: the program to run
 * @error: return location for a #GError
 *
 * Verifies @program and makes it the program that runs, with fresh buffers that start
 * from the program's default contents (zeros where there are none). A program loaded
 * before is released first, its buffers with it.
 *
 * Returns: %TRUE on success; on failure @error is in the %AMK_PROGRAM_ERROR domain (the
 *   program does not verify) or the %AMK_LAUNCH_ERROR domain (no memory, no device)
 */
gboolean
amk_executor_load (AmkExecutor  *self,
                   AmkProgram   *program,
                   GError      **error)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), FALSE);
  g_return_val_if_fail (AMK_IS_PROGRAM (program), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!amk_executor_check_dtypes (self, program, error))
    return FALSE;
  return AMK_EXECUTOR_GET_IFACE (self)->load (self, program, error);
}

/**
 * amk_executor_load_shared:
 * @self: an executor
 * @program: the program to run
 * @owner: (nullable): an executor of the same type as @self with a program loaded, whose
 *   buffers @program shares; %NULL to load @program alone
 * @error: return location for a #GError
 *
 * Loads @program like [method@Amk.Executor.load], except that each buffer of @program
 * (outside the scratch arena) whose name is that of a buffer of @owner's loaded program
 * (outside the scratch arena too), with the same dtype and the same size in bytes, gets
 * no memory of its own: it uses @owner's. Neither its contents nor the program's default
 * contents for it are copied; it holds what @owner's buffer holds, and what either
 * program writes to it, or uploads, the other sees. That is how a prefill program and a
 * decode step keep one copy of the weights and one KV cache: a shared buffer needs no
 * data in @program (a constant without data is fine, the data is @owner's). The other
 * buffers of @program are allocated and filled as by [method@Amk.Executor.load].
 *
 * The shared memory lives as long as an executor uses it: when @owner loads another
 * program or is finalized, @self keeps the memory it shares (the two simply stop
 * sharing it), and the memory is freed when the last executor using it lets go. A buffer
 * that @owner's launcher bound to memory of another library
 * ([method@Amk.Launcher.bind_buffer]) is shared as bound: keep that memory alive while
 * either program is loaded. Run one program at a time: the two executors do not order
 * their runs against each other.
 *
 * Returns: %TRUE on success; on failure @error is %AMK_PROGRAM_ERROR_INVALID when a
 *   buffer's name matches with another dtype or size, when @owner is @self or of
 *   another type, %AMK_PROGRAM_ERROR_NOT_VERIFIED when @owner has no program loaded (or
 *   it changed since), or as by [method@Amk.Executor.load]
 */
gboolean
amk_executor_load_shared (AmkExecutor  *self,
                          AmkProgram   *program,
                          AmkExecutor  *owner,
                          GError      **error)
{
  AmkExecutorInterface *iface;

  g_return_val_if_fail (AMK_IS_EXECUTOR (self), FALSE);
  g_return_val_if_fail (AMK_IS_PROGRAM (program), FALSE);
  g_return_val_if_fail (owner == NULL || AMK_IS_EXECUTOR (owner), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (owner == NULL)
    return amk_executor_load (self, program, error);
  if (!amk_executor_check_dtypes (self, program, error))
    return FALSE;
  if (owner == self)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                           _("An executor cannot share the buffers of its own program; "
                             "load the second program on another executor of the same type"));
      return FALSE;
    }
  if (G_OBJECT_TYPE (owner) != G_OBJECT_TYPE (self))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("An executor of type %s cannot use the buffers of one of type %s; share "
                     "buffers only between executors of the same type"),
                   G_OBJECT_TYPE_NAME (self), G_OBJECT_TYPE_NAME (owner));
      return FALSE;
    }
  if (amk_executor_get_program (owner) == NULL)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED,
                           _("The executor to share buffers with has no program; load one on it first"));
      return FALSE;
    }
  iface = AMK_EXECUTOR_GET_IFACE (self);
  if (iface->load_shared == NULL)
    {
      g_set_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_UNSUPPORTED,
                   _("An executor of type %s cannot share buffers between programs; load each "
                     "program alone"),
                   G_OBJECT_TYPE_NAME (self));
      return FALSE;
    }
  return iface->load_shared (self, program, owner, error);
}

/**
 * amk_executor_get_program:
 * @self: an executor
 *
 * Gets the loaded program.
 *
 * Returns: (transfer none) (nullable): the loaded program, or %NULL before
 *   [method@Amk.Executor.load]
 */
AmkProgram *
amk_executor_get_program (AmkExecutor *self)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), NULL);

  return AMK_EXECUTOR_GET_IFACE (self)->get_program (self);
}

/**
 * amk_executor_upload:
 * @self: an executor
 * @buffer: a buffer index of the loaded program
 * @data: the new contents, exactly the buffer's size
 * @error: return location for a #GError
 *
 * Replaces the contents of a buffer before the next run.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_executor_upload (AmkExecutor  *self,
                     guint         buffer,
                     GBytes       *data,
                     GError      **error)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), FALSE);
  g_return_val_if_fail (data != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return AMK_EXECUTOR_GET_IFACE (self)->upload (self, buffer, data, error);
}

/**
 * amk_executor_download:
 * @self: an executor
 * @buffer: a buffer index of the loaded program
 * @error: return location for a #GError
 *
 * Copies out the contents of a buffer.
 *
 * Returns: (transfer full): the contents, or %NULL with @error set
 */
GBytes *
amk_executor_download (AmkExecutor  *self,
                       guint         buffer,
                       GError      **error)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return AMK_EXECUTOR_GET_IFACE (self)->download (self, buffer, error);
}

/**
 * amk_executor_run:
 * @self: an executor
 * @cancellable: (nullable): a #GCancellable; cancelling it stops the run
 * @error: return location for a #GError
 *
 * Runs the loaded program once and waits for it: the counters start at zero, the
 * buffers keep what the last run and the uploads left.
 *
 * Returns: %TRUE if every instruction ran; on failure @error is in the
 *   %AMK_LAUNCH_ERROR domain (%AMK_LAUNCH_ERROR_ABORTED, %AMK_LAUNCH_ERROR_TIMEOUT: see
 *   [method@Amk.Executor.get_last_abort]), is %AMK_PROGRAM_ERROR_NOT_VERIFIED when no
 *   program is loaded or it changed since, or %G_IO_ERROR_CANCELLED
 */
gboolean
amk_executor_run (AmkExecutor   *self,
                  GCancellable  *cancellable,
                  GError       **error)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), FALSE);
  g_return_val_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return AMK_EXECUTOR_GET_IFACE (self)->run (self, cancellable, error);
}

/**
 * amk_executor_run_async:
 * @self: an executor
 * @cancellable: (nullable): a #GCancellable
 * @callback: (scope async): called when the run ended
 * @user_data: data for @callback
 *
 * Runs [method@Amk.Executor.run] without blocking: in a worker thread unless the
 * executor has a way of its own. Run one program at a time on an executor.
 */
void
amk_executor_run_async (AmkExecutor         *self,
                        GCancellable        *cancellable,
                        GAsyncReadyCallback  callback,
                        gpointer             user_data)
{
  g_return_if_fail (AMK_IS_EXECUTOR (self));
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));

  AMK_EXECUTOR_GET_IFACE (self)->run_async (self, cancellable, callback, user_data);
}

/**
 * amk_executor_run_finish:
 * @self: an executor
 * @result: the #GAsyncResult passed to the callback
 * @error: return location for a #GError
 *
 * Finishes [method@Amk.Executor.run_async].
 * Call it once for each @result: a second call is a programmer error (a critical
 * warning, and no result).
 *
 * Returns: %TRUE if the run succeeded, with @error set as by [method@Amk.Executor.run]
 *   otherwise
 */
gboolean
amk_executor_run_finish (AmkExecutor   *self,
                         GAsyncResult  *result,
                         GError       **error)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), FALSE);
  g_return_val_if_fail (G_IS_ASYNC_RESULT (result), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return AMK_EXECUTOR_GET_IFACE (self)->run_finish (self, result, error);
}

/**
 * amk_executor_get_last_abort:
 * @self: an executor
 *
 * Gets the record of the last run's abort.
 *
 * Returns: (transfer full) (nullable): the record of the last run if a TRAP, a failed
 *   check or the watchdog ended it, or %NULL
 */
AmkAbortRecord *
amk_executor_get_last_abort (AmkExecutor *self)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), NULL);

  return AMK_EXECUTOR_GET_IFACE (self)->get_last_abort (self);
}

/**
 * amk_executor_get_preferred_queues:
 * @self: an executor
 * @error: return location for a #GError
 *
 * Says how many queues a program for this executor should have: 1 for the CPU executor
 * (it runs one instruction at a time, more queues only add work), one per multiprocessor
 * for a launcher (a block per queue, all co-resident). [class@Amk.Model] builds its
 * decode step with this many queues unless [property@Amk.Model:n-queues] is set.
 *
 * Returns: the queue count, or 0 with @error set (a launcher without a usable device)
 */
guint
amk_executor_get_preferred_queues (AmkExecutor  *self,
                                   GError      **error)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  return AMK_EXECUTOR_GET_IFACE (self)->get_preferred_queues (self, error);
}

/**
 * amk_executor_get_preferred_rows:
 * @self: an executor
 *
 * Says how many rows (tokens) a program that reads many tokens per run, such as a
 * model's prefill chunk, should have on this executor: enough that the weights, read
 * once per run, are used by many rows, and few enough that a short prompt wastes little
 * work on padding rows. [class@Amk.Model] builds its prefill chunk with this many rows
 * unless [property@Amk.Model:prefill-chunk] is set.
 *
 * Returns: the row count, at least 2
 */
guint
amk_executor_get_preferred_rows (AmkExecutor *self)
{
  AmkExecutorInterface *iface;

  g_return_val_if_fail (AMK_IS_EXECUTOR (self), 256);

  iface = AMK_EXECUTOR_GET_IFACE (self);
  return iface->get_preferred_rows != NULL ? MAX (iface->get_preferred_rows (self), 2) : 256;
}

/**
 * amk_executor_supports_dtype:
 * @self: an executor
 * @dtype: an element type
 *
 * Says whether programs loaded on @self may have buffers of @dtype. Every executor
 * takes the plain types; the block-quantized ones (%AMK_DTYPE_Q8_0 and the K types) only
 * where its MATVEC, MATMUL and EMBED read them (both executors of the library do).
 * [class@Amk.Model] keeps a file's quantized weights as they are only where the
 * executor takes their type ([property@Amk.Model:keep-quantized] says when it does),
 * and converts them to bf16 otherwise.
 *
 * Returns: %TRUE when @dtype is valid and @self runs programs with it
 */
gboolean
amk_executor_supports_dtype (AmkExecutor *self,
                             AmkDType     dtype)
{
  AmkExecutorInterface *iface;
  guint values, bytes;

  g_return_val_if_fail (AMK_IS_EXECUTOR (self), FALSE);

  if (!amk_dtype_is_valid (dtype))
    return FALSE;
  if (!amk_dtype_block (dtype, &values, &bytes))
    return TRUE;
  iface = AMK_EXECUTOR_GET_IFACE (self);
  return iface->supports_dtype != NULL && iface->supports_dtype (self, dtype);
}

/**
 * amk_executor_new_sibling:
 * @self: an executor
 *
 * Makes a new executor of the same kind as @self, with its settings (the same device
 * for a launcher, the same seed for the CPU executor) and no program: the one to load a
 * second program on with [method@Amk.Executor.load_shared], as [class@Amk.Generator]
 * does for a model's prefill chunk.
 *
 * Returns: (transfer full) (nullable): the new executor, or %NULL when @self's kind
 *   cannot make one
 */
AmkExecutor *
amk_executor_new_sibling (AmkExecutor *self)
{
  AmkExecutorInterface *iface;

  g_return_val_if_fail (AMK_IS_EXECUTOR (self), NULL);

  iface = AMK_EXECUTOR_GET_IFACE (self);
  return iface->new_sibling != NULL ? iface->new_sibling (self) : NULL;
}

/**
 * amk_executor_get_activation_dtype:
 * @self: an executor
 *
 * Says in which type a program that reads many tokens per run (a model's prefill chunk)
 * should keep the activations its MATMULs read: %AMK_DTYPE_BF16 for a launcher, whose
 * tensor cores take 16-bit inputs (an F32 input is converted in every tile),
 * %AMK_DTYPE_F32 for the CPU executor, which computes in fp32 from either.
 *
 * Returns: %AMK_DTYPE_F32 or %AMK_DTYPE_BF16
 */
AmkDType
amk_executor_get_activation_dtype (AmkExecutor *self)
{
  AmkExecutorInterface *iface;

  g_return_val_if_fail (AMK_IS_EXECUTOR (self), AMK_DTYPE_F32);

  iface = AMK_EXECUTOR_GET_IFACE (self);
  return iface->get_activation_dtype != NULL ? iface->get_activation_dtype (self) : AMK_DTYPE_F32;
}

/**
 * amk_executor_get_description:
 * @self: an executor
 *
 * Describes what runs the programs, for people: "CPU executor", or "GPU megakernel
 * (NVIDIA H200)".
 *
 * Returns: (transfer full): a short description
 */
char *
amk_executor_get_description (AmkExecutor *self)
{
  g_return_val_if_fail (AMK_IS_EXECUTOR (self), NULL);

  return AMK_EXECUTOR_GET_IFACE (self)->get_description (self);
}

/* ---- the loaded program ------------------------------------------------------------- */

void
amk_loaded_program_set (AmkLoadedProgram *loaded,
                        AmkProgram       *program)
{
  amk_loaded_program_clear (loaded);
  *loaded = (AmkLoadedProgram) {
    g_object_ref (program), program->buffers->len, program->counter_names->len,
    program->instructions->len, program->scratch_size, program->verified
  };
}

void
amk_loaded_program_clear (AmkLoadedProgram *loaded)
{
  g_clear_object (&loaded->program);
  *loaded = (AmkLoadedProgram) { 0 };
}

gboolean
amk_loaded_program_require (const AmkLoadedProgram  *loaded,
                            GError                 **error)
{
  if (loaded->program == NULL)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED,
                           _("No program is loaded; call amk_executor_load() first"));
      return FALSE;
    }
  return TRUE;
}

/* The memory behind a loaded program was sized from its shape, and a device holds its
 * instructions as they were: a program that grew since must be loaded again. Any edit
 * drops the verified flag, so an edit is also caught until the program is verified. */
gboolean
amk_loaded_program_check (const AmkLoadedProgram  *loaded,
                          GError                 **error)
{
  AmkProgram *p = loaded->program;

  if (!amk_loaded_program_require (loaded, error))
    return FALSE;
  if ((loaded->verified && !p->verified) ||
      p->buffers->len != loaded->n_buffers ||
      p->counter_names->len != loaded->n_counters ||
      p->instructions->len != loaded->n_instructions ||
      p->scratch_size != loaded->scratch_size)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED,
                           _("The program changed after it was loaded; verify it and load it again"));
      return FALSE;
    }
  return TRUE;
}

/* "[4, 8] bf16", for the message of a name that matches with another layout. */
static char *
describe_layout (const AmkBufferInfo *info)
{
  GString *s = g_string_new ("[");

  for (guint d = 0; d < info->n_dims; d++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, d > 0 ? ", " : "", info->shape[d]);
  g_string_append_printf (s, "] %s", amk_dtype_name (info->dtype));
  return g_string_free (s, FALSE);
}

gint *
amk_loaded_program_match (const AmkLoadedProgram  *owner,
                          AmkProgram              *program,
                          GError                 **error)
{
  const guint n_buffers = program->buffers->len;
  g_autofree gint *match = g_new (gint, MAX (n_buffers, 1));

  /* the owner's memory was sized from its program as loaded */
  if (!amk_loaded_program_check (owner, error))
    return NULL;
  for (guint b = 0; b < n_buffers; b++)
    {
      const AmkBufferInfo *info = g_ptr_array_index (program->buffers, b);
      const AmkBufferInfo *theirs;
      guint o = GPOINTER_TO_UINT (g_hash_table_lookup (owner->program->buffer_names, info->name));

      match[b] = -1;
      if (o == 0 || o > owner->n_buffers || info->role == AMK_BUFFER_ROLE_SCRATCH)
        continue;
      theirs = g_ptr_array_index (owner->program->buffers, o - 1);
      if (theirs->role == AMK_BUFFER_ROLE_SCRATCH)
        continue;
      if (theirs->dtype != info->dtype || theirs->size_bytes != info->size_bytes)
        {
          g_autofree char *ours = describe_layout (info);
          g_autofree char *other = describe_layout (theirs);

          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Buffer “%s” is %s here but %s in the program it would share with; "
                         "give it another name or the same dtype and size"),
                       info->name, ours, other);
          return NULL;
        }
      match[b] = (gint) o - 1;
    }
  return g_steal_pointer (&match);
}

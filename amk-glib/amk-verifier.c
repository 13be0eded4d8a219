/* amk-verifier.c: proves an image sound before any executor touches it: every index,
 * size, dtype and arena offset in range, an abstract run of the queues that shows that
 * every instruction can finish, and (amk-race.c) that no two instructions race.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include <glib/gi18n-lib.h>

#include "amk-program-private.h"
#include "amk-op-private.h"
#include "amk-race-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

static const char *
counter_name (AmkProgram *self, gint32 counter)
{
  const char *name = g_ptr_array_index (self->counter_names, counter);
  return name != NULL ? name : "";
}

static gboolean
check_buffers (AmkProgram  *self,
               GError     **error)
{
  guint64 arena_end = 0;

  for (guint b = 0; b < self->buffers->len; b++)
    {
      AmkBufferInfo *info = g_ptr_array_index (self->buffers, b);

      if (info->data != NULL && g_bytes_get_size (info->data) != info->size_bytes)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Buffer %u “%s”: its data has %zu bytes, its dtype and shape need %" PRIu64),
                       b, info->name, g_bytes_get_size (info->data), info->size_bytes);
          return FALSE;
        }
      if (info->role != AMK_BUFFER_ROLE_SCRATCH)
        continue;
      if (info->arena_offset % AMK_ARENA_ALIGNMENT != 0)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Scratch buffer %u “%s” starts at arena offset %" PRIu64 ", which is not a multiple of %u"),
                       b, info->name, info->arena_offset, AMK_ARENA_ALIGNMENT);
          return FALSE;
        }
      if (info->arena_offset > self->scratch_size ||
          info->size_bytes > self->scratch_size - info->arena_offset)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                       _("Scratch buffer %u “%s” (%" PRIu64 " bytes at offset %" PRIu64 ") overflows the %" PRIu64 "-byte scratch arena"),
                       b, info->name, info->size_bytes, info->arena_offset, self->scratch_size);
          return FALSE;
        }
      arena_end = MAX (arena_end, info->arena_offset + info->size_bytes);
    }
  /* an arena larger than its buffers reach would only waste memory: from a file it is
   * a corrupt size that executors must not try to allocate */
  if (self->scratch_size > ((arena_end + AMK_ARENA_ALIGNMENT - 1) & ~(guint64) (AMK_ARENA_ALIGNMENT - 1)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("The scratch arena is %" PRIu64 " bytes but its buffers end at byte %" PRIu64),
                   self->scratch_size, arena_end);
      return FALSE;
    }
  return TRUE;
}

/* No write to a constant buffer, for the ops whose own checks do not name the operand. */
gboolean
amk_verify_writes (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                   GError **error)
{
  const guint written = amk_abi_written_slots (ins->opcode, ins->n_buffers);

  for (guint s = 0; s < ins->n_buffers; s++)
    if (((written >> s) & 1u) && ins->buffers[s] != AMK_NO_BUFFER)
      {
        AmkBufferInfo *dst = g_ptr_array_index (self->buffers, ins->buffers[s]);
        if (dst->role == AMK_BUFFER_ROLE_CONSTANT)
          {
            g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                         _("Queue %u instruction %u (%s) writes buffer %d “%s”, which is constant"),
                         queue, pos, amk_op_name (ins->opcode), ins->buffers[s], dst->name);
            return FALSE;
          }
      }
  return TRUE;
}

/* Range [offset, offset + count) inside the buffer, in elements. */
gboolean
amk_verify_range (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
             guint slot, gint32 offset, gint32 count, GError **error)
{
  AmkBufferInfo *info = g_ptr_array_index (self->buffers, ins->buffers[slot]);

  if (offset < 0 || count < 0 || (guint64) offset + (guint64) count > info->n_elements)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): elements %d to %d + %d are outside buffer %d “%s” of %" PRIu64 " elements"),
                   queue, pos, amk_op_name (ins->opcode), offset, offset, count,
                   ins->buffers[slot], info->name, info->n_elements);
      return FALSE;
    }
  return TRUE;
}

gboolean
amk_verify_same_dtype (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                  guint n, GError **error)
{
  AmkBufferInfo *first = g_ptr_array_index (self->buffers, ins->buffers[0]);

  for (guint s = 1; s < n; s++)
    {
      AmkBufferInfo *other = g_ptr_array_index (self->buffers, ins->buffers[s]);
      if (other->dtype != first->dtype)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Queue %u instruction %u (%s): buffer “%s” is %s but buffer “%s” is %s; the dtypes must match"),
                       queue, pos, amk_op_name (ins->opcode), first->name, amk_dtype_name (first->dtype),
                       other->name, amk_dtype_name (other->dtype));
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
amk_verify_elementwise_dtype (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                              GError **error)
{
  AmkBufferInfo *info = g_ptr_array_index (self->buffers, ins->buffers[0]);
  guint values, bytes;

  if (!amk_dtype_block (info->dtype, &values, &bytes))
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("Queue %u instruction %u (%s): buffer “%s” is %s, whose values are packed in blocks; "
                 "only a matrix or a table (MATVEC, MATMUL, EMBED) can be block-quantized"),
               queue, pos, amk_op_name (ins->opcode), info->name, amk_dtype_name (info->dtype));
  return FALSE;
}

/* The bytes an operand covers, as (region, start, length): scratch buffers share the
 * arena (region -1), other buffers are their own region. */
void
amk_verify_operand_bytes (AmkProgram *self, const amk_instruction_t *ins, guint slot, gint32 offset,
               gint32 count, gint64 *region, guint64 *start, guint64 *length)
{
  AmkBufferInfo *info = g_ptr_array_index (self->buffers, ins->buffers[slot]);

  *region = info->role == AMK_BUFFER_ROLE_SCRATCH ? -1 : ins->buffers[slot];
  *start = (info->role == AMK_BUFFER_ROLE_SCRATCH ? info->arena_offset : 0) +
           amk_dtype_bytes (info->dtype, (guint64) offset);
  *length = amk_dtype_bytes (info->dtype, (guint64) count);
}

/* The output may be one of the inputs exactly (in place) but not partly overlap it: the
 * GPU processes elements in parallel, so a partial overlap has no defined result. */
gboolean
amk_verify_no_partial_overlap (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                          guint dst_slot, gint32 dst_off, guint src_slot, gint32 src_off,
                          gint32 count, GError **error)
{
  gint64 rd, rs;
  guint64 sd, ss, ld, ls;

  amk_verify_operand_bytes (self, ins, dst_slot, dst_off, count, &rd, &sd, &ld);
  amk_verify_operand_bytes (self, ins, src_slot, src_off, count, &rs, &ss, &ls);
  if (rd != rs || count == 0 || sd == ss || sd + ld <= ss || ss + ls <= sd)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("Queue %u instruction %u (%s): the output partly overlaps input %u; use separate buffers or the very same elements"),
               queue, pos, amk_op_name (ins->opcode), src_slot);
  return FALSE;
}


AmkBufferInfo *
amk_verify_slot_buffer (AmkProgram *self, const amk_instruction_t *ins, guint slot)
{
  if (ins->buffers[slot] == AMK_NO_BUFFER)
    return NULL;
  return g_ptr_array_index (self->buffers, ins->buffers[slot]);
}





static gboolean
check_instruction (AmkProgram              *self,
                   guint                    queue,
                   guint                    pos,
                   const amk_instruction_t *ins,
                   GError                 **error)
{
  const AmkOpClass *klass = amk_op_class (ins->opcode);

  if (klass == NULL)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u has the unknown opcode %u"),
                   queue, pos, ins->opcode);
      return FALSE;
    }
  if (ins->flags != 0 || ins->reserved != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u has reserved fields set; this ABI version defines no flags"),
                   queue, pos);
      return FALSE;
    }
  if (ins->n_waits > AMK_MAX_WAITS || ins->n_buffers > AMK_MAX_BUFFER_REFS)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u has %u waits and %u buffers; the limits are %d and %d"),
                   queue, pos, ins->n_waits, ins->n_buffers, AMK_MAX_WAITS, AMK_MAX_BUFFER_REFS);
      return FALSE;
    }
  for (guint w = 0; w < ins->n_waits; w++)
    if (ins->waits[w].counter < 0 || (guint) ins->waits[w].counter >= self->counter_names->len)
      {
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Queue %u instruction %u waits on counter %d, but the program has %u counters"),
                     queue, pos, ins->waits[w].counter, self->counter_names->len);
        return FALSE;
      }
  if (ins->signal.counter != AMK_NO_COUNTER &&
      (ins->signal.counter < 0 || (guint) ins->signal.counter >= self->counter_names->len))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u signals counter %d, but the program has %u counters"),
                   queue, pos, ins->signal.counter, self->counter_names->len);
      return FALSE;
    }
  for (guint s = 0; s < ins->n_buffers; s++)
    if ((ins->buffers[s] < 0 || (guint) ins->buffers[s] >= self->buffers->len) &&
        !(ins->buffers[s] == AMK_NO_BUFFER && ((klass->optional_slots >> s) & 1u)))
      {
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Queue %u instruction %u uses buffer %d, but the program has %u buffers"),
                     queue, pos, ins->buffers[s], self->buffers->len);
        return FALSE;
      }
  if (ins->n_buffers < klass->n_buffers || ins->n_buffers > klass->n_buffers + klass->n_extra)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s) names %u buffers; %s takes %u"),
                   queue, pos, klass->name, ins->n_buffers, klass->name, klass->n_buffers);
      return FALSE;
    }
  return klass->verify == NULL || klass->verify (self, queue, pos, ins, error);
}

/* The arrival counters of ATTN_DECODE's fused merge: no instruction waits on or signals
 * one (its count is not a completion), and exactly as many instructions arrive on it as
 * their split count, so that the merge runs once, after the last split. */
static gboolean
check_arrival_counters (AmkProgram  *self,
                        GError     **error)
{
  const guint n = self->counter_names->len;
  g_autofree guint8 *synced = g_malloc0 (n + 1);
  g_autofree guint32 *arrivals = g_new0 (guint32, n + 1);

  for (guint i = 0; i < self->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (self->instructions, amk_instruction_t, i);
      for (guint w = 0; w < ins->n_waits; w++)
        synced[ins->waits[w].counter] = 1;
      if (ins->signal.counter != AMK_NO_COUNTER)
        synced[ins->signal.counter] = 1;
      if (ins->opcode == AMK_ABI_OP_ATTN_DECODE && ins->n_buffers == 6)
        arrivals[ins->params.attn_decode.arrival_counter]++;
    }
  for (guint i = 0; i < self->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (self->instructions, amk_instruction_t, i);
      gint32 c;

      if (ins->opcode != AMK_ABI_OP_ATTN_DECODE || ins->n_buffers != 6)
        continue;
      c = ins->params.attn_decode.arrival_counter;
      if (synced[c])
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Instruction %u (ATTN_DECODE) merges on counter %d “%s”, which an instruction waits on or signals; an arrival counter belongs to the splits of one key/value head and nothing else"),
                       i, c, counter_name (self, c));
          return FALSE;
        }
      if (arrivals[c] != (guint32) ins->params.attn_decode.n_splits)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Instruction %u (ATTN_DECODE) merges on counter %d “%s” after %d splits, but %u instructions arrive on it; give each key/value head its own arrival counter"),
                       i, c, counter_name (self, c), ins->params.attn_decode.n_splits, arrivals[c]);
          return FALSE;
        }
    }
  return TRUE;
}

static gboolean
check_queues_and_instructions (AmkProgram  *self,
                               GError     **error)
{
  g_autofree guint8 *seen = g_malloc0 (self->instructions->len + 1);
  g_autofree guint64 *totals = g_new0 (guint64, self->counter_names->len + 1);

  if (self->queues->len != self->num_queues)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("The program lists %u queues but declares %u"),
                   self->queues->len, self->num_queues);
      return FALSE;
    }

  for (guint q = 0; q < self->num_queues; q++)
    {
      GArray *queue = g_ptr_array_index (self->queues, q);

      for (guint pos = 0; pos < queue->len; pos++)
        {
          gint32 index = g_array_index (queue, gint32, pos);
          const amk_instruction_t *ins;

          if (index < 0 || (guint) index >= self->instructions->len)
            {
              g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                           _("Queue %u position %u names instruction %d, but the program has %u instructions"),
                           q, pos, index, self->instructions->len);
              return FALSE;
            }
          if (seen[index]++)
            {
              g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                           _("Instruction %d is queued twice (again in queue %u at position %u)"),
                           index, q, pos);
              return FALSE;
            }
          ins = &g_array_index (self->instructions, amk_instruction_t, index);
          if (!check_instruction (self, q, pos, ins, error))
            return FALSE;
          if (ins->signal.counter != AMK_NO_COUNTER)
            {
              totals[ins->signal.counter] += ins->signal.amount;
              if (totals[ins->signal.counter] > G_MAXUINT32)
                {
                  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                               _("Counter %d “%s” would overflow: its signals add up to more than %u"),
                               ins->signal.counter, counter_name (self, ins->signal.counter), G_MAXUINT32);
                  return FALSE;
                }
            }
        }
    }
  for (guint i = 0; i < self->instructions->len; i++)
    if (!seen[i])
      {
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                     _("Instruction %u is in no queue"), i);
        return FALSE;
      }
  return check_arrival_counters (self, error);
}

/* The abstract run. A queue advances while its head's waits hold against the counter
 * totals of the instructions already finished; a blocked queue parks on the counter it
 * needs and is woken when that counter grows. Counters only grow, so this greedy run
 * reaches the one fixpoint: if it leaves an instruction unfinished, no schedule finishes
 * it. GRID_SYNC releases once every queue stands at one. A queue parks on one counter
 * at a time, so the parked queues are lists threaded through the queues (next_parked):
 * the run's memory grows by 12 bytes a counter, whatever their number. */
typedef struct {
  AmkProgram *self;
  guint      *pc;
  guint64    *value;
  gint32     *parked;       /* per counter: the last queue parked on it, or -1 */
  gint32     *next_parked;  /* per queue: the queue parked on the same counter before it;
                             * -2 while the queue is not parked */
  GArray     *work;
  guint       at_barrier;
  guint32    *order;        /* the instructions in the order they finished */
  guint       n_finished;
} AbstractRun;

static const amk_instruction_t *
head (AbstractRun *run, guint q)
{
  GArray *queue = g_ptr_array_index (run->self->queues, q);
  if (run->pc[q] >= queue->len)
    return NULL;
  return &g_array_index (run->self->instructions, amk_instruction_t,
                         g_array_index (queue, gint32, run->pc[q]));
}

static gint
first_unmet_wait (AbstractRun *run, const amk_instruction_t *ins)
{
  for (guint w = 0; w < ins->n_waits; w++)
    if (run->value[ins->waits[w].counter] < ins->waits[w].target)
      return (gint) w;
  return -1;
}

static void
finish (AbstractRun *run, guint q, const amk_instruction_t *ins)
{
  GArray *queue = g_ptr_array_index (run->self->queues, q);

  run->order[run->n_finished++] = (guint32) g_array_index (queue, gint32, run->pc[q]);
  run->pc[q]++;
  if (ins->signal.counter != AMK_NO_COUNTER && ins->signal.amount > 0)
    {
      run->value[ins->signal.counter] += ins->signal.amount;
      gint32 p = run->parked[ins->signal.counter];

      run->parked[ins->signal.counter] = -1;
      while (p >= 0)
        {
          gint32 next = run->next_parked[p];

          run->next_parked[p] = -2;
          g_array_append_val (run->work, p);
          p = next;
        }
    }
  g_array_append_val (run->work, q);
}

static void
advance (AbstractRun *run, guint q)
{
  const amk_instruction_t *ins = head (run, q);
  gint w;

  if (ins == NULL)
    return;
  w = first_unmet_wait (run, ins);
  if (w >= 0)
    {
      if (run->next_parked[q] == -2)   /* not parked already */
        {
          run->next_parked[q] = run->parked[ins->waits[w].counter];
          run->parked[ins->waits[w].counter] = (gint32) q;
        }
      return;
    }
  if (ins->opcode == AMK_ABI_OP_GRID_SYNC)
    {
      if (++run->at_barrier < run->self->num_queues)
        return;
      run->at_barrier = 0;
      for (guint r = 0; r < run->self->num_queues; r++)
        finish (run, r, head (run, r));
      return;
    }
  finish (run, q, ins);
}

static gboolean
report_stuck (AbstractRun *run, GError **error)
{
  AmkProgram *self = run->self;
  gint barrier_queue = -1, done_queue = -1;

  for (guint q = 0; q < self->num_queues; q++)
    {
      const amk_instruction_t *ins = head (run, q);
      gint w;

      if (ins == NULL)
        {
          done_queue = (gint) q;
          continue;
        }
      w = first_unmet_wait (run, ins);
      if (w >= 0)
        {
          gint32 c = ins->waits[w].counter;
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK,
                       _("Deadlock: queue %u stalls at instruction %u: it waits for counter %d “%s” to reach %u, but the queues can bring it only to %" PRIu64),
                       q, run->pc[q], c, counter_name (self, c), ins->waits[w].target, run->value[c]);
          return FALSE;
        }
      barrier_queue = (gint) q;
    }
  if (barrier_queue >= 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK,
                   _("Deadlock: queue %d waits at GRID_SYNC (instruction %u), but queue %d ends without reaching it; every queue needs the same number of GRID_SYNC"),
                   barrier_queue, run->pc[barrier_queue], done_queue);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_deadlock (AmkProgram  *self,
                GError     **error)
{
  AbstractRun run = { self, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0 };
  guint n_counters = self->counter_names->len;
  gboolean ok;

  run.pc = g_new0 (guint, self->num_queues);
  run.value = g_new0 (guint64, n_counters + 1);
  run.parked = g_new (gint32, n_counters + 1);
  memset (run.parked, 0xff, (n_counters + 1) * sizeof (gint32));
  run.next_parked = g_new (gint32, MAX (self->num_queues, 1));
  for (guint q = 0; q < self->num_queues; q++)
    run.next_parked[q] = -2;
  run.work = g_array_new (FALSE, FALSE, sizeof (guint));
  run.order = g_new (guint32, MAX (self->instructions->len, 1));

  for (guint q = 0; q < self->num_queues; q++)
    g_array_append_val (run.work, q);
  while (run.work->len > 0)
    {
      guint q = g_array_index (run.work, guint, run.work->len - 1);
      g_array_set_size (run.work, run.work->len - 1);
      advance (&run, q);
    }

  ok = report_stuck (&run, error) && amk_race_check (self, run.order, error);

  g_free (run.parked);
  g_free (run.next_parked);
  g_free (run.value);
  g_free (run.pc);
  g_array_unref (run.work);
  g_free (run.order);
  return ok;
}

gboolean
amk_verifier_check (AmkProgram  *self,
                    GError     **error)
{
  return check_buffers (self, error) &&
         check_queues_and_instructions (self, error) &&
         check_deadlock (self, error);
}

/* amk-race.c: the race proof. A verified program gives the same result on every
 * executor and every schedule: any two instructions that touch overlapping bytes, one
 * of them writing, are ordered by the counters (or by their queue, or a GRID_SYNC).
 *
 * Order: B must wait for A when B's queue comes after A on A's queue, when a GRID_SYNC
 * lies between them, or when B (or an instruction that B must wait for) waits on a
 * counter that cannot reach its target without A's signal: the other queues can add at
 * most their whole total, so A's queue must add the rest, and its signals come in queue
 * order. Those orders are kept as vector clocks (per instruction, per queue that has an
 * instruction with operands: how many of that queue's first instructions must have
 * finished), computed along the abstract run's order of the queues, which already puts
 * A before B whenever B must wait for A.
 *
 * Accesses: each op describes what an instruction reads and writes (AmkOpClass.accesses)
 * as boxes of elements; scratch buffers are compared by their arena bytes, since they
 * share them. Each buffer keeps the accesses that a later one may still race with; a
 * write drops the earlier accesses it covers and comes after, a read the earlier reads.
 * Exceptions, each documented in the ABI: split-K's atomic adds among themselves, the
 * splits of one ATTN_DECODE arrival counter among themselves (the last to arrive merges),
 * and two writes of KV cache rows that the device chooses by position.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include <glib/gi18n-lib.h>

#include "amk-race-private.h"
#include "amk-program-private.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

/* Vector clocks take instructions × queues entries: at most this many bytes beyond a
 * small floor per instruction of the image, so that verifying stays bounded by it. */
#define CLOCK_BYTES_PER_INSTRUCTION  2048u
#define CLOCK_BYTES_FLOOR            (64u << 20)
/* a counter with more signals than this keeps the join of its signallers' clocks per
 * target, rather than joining them again at every wait */
#define CACHED_SIGNALS               4u

void
amk_access_range (AmkAccessBox *out, guint *n, const amk_instruction_t *ins, guint slot,
                  guint64 start, guint64 count, AmkAccessKind kind)
{
  amk_access_rows (out, n, ins, slot, start, count, count, 1, kind, FALSE);
}

void
amk_access_rows (AmkAccessBox *out, guint *n, const amk_instruction_t *ins, guint slot,
                 guint64 start, guint64 length, guint64 stride, guint64 rows,
                 AmkAccessKind kind, gboolean device_rows)
{
  if (slot >= ins->n_buffers || ins->buffers[slot] == AMK_NO_BUFFER || length == 0 || rows == 0)
    return;
  g_assert (*n < AMK_MAX_ACCESSES);
  out[(*n)++] = (AmkAccessBox) { slot, start, length, rows > 1 ? stride : length, rows, kind, device_rows };
}

/* ---- byte boxes ---------------------------------------------------------------------- */

typedef struct {
  guint64 start, length, stride, rows;  /* bytes: rows of length, stride apart */
  guint32 instruction, queue, pos;
  gint32  buffer;
  gint32  group;                        /* ATTN_DECODE's arrival counter, or -1 */
  guint8  kind;                         /* AmkAccessKind */
  guint8  device_rows;
} Access;

static guint64
box_end (const Access *a)
{
  return a->start + (a->rows - 1) * a->stride + a->length;
}

/* whether one range [x, x + len) meets a row of box b */
static gboolean
range_meets_box (guint64 x, guint64 len, const Access *b)
{
  guint64 r;

  if (b->length >= b->stride)
    return TRUE;  /* rows that touch: one range, whose bounds the caller compared */
  r = x >= b->start + b->length ? (x - b->start - b->length) / b->stride + 1 : 0;
  return r < b->rows && b->start + r * b->stride < x + len;
}

static gboolean
boxes_overlap (const Access *a, const Access *b)
{
  if (box_end (a) <= b->start || box_end (b) <= a->start)
    return FALSE;
  if (a->rows == 1 && b->rows == 1)
    return TRUE;
  if (a->rows == 1)
    return range_meets_box (a->start, a->length, b);
  if (b->rows == 1)
    return range_meets_box (b->start, b->length, a);
  if (a->stride == b->stride && a->length < a->stride && b->length < b->stride)
    {
      /* same row pitch: the columns, modulo the pitch, must meet */
      const guint64 s = a->stride, pa = a->start % s, pb = b->start % s;
      return (pa < pb + b->length && pb < pa + a->length) ||
             (pa + s < pb + b->length && pb < pa + s + a->length) ||
             (pb + s < pa + a->length && pa < pb + s + b->length);
    }
  return TRUE;  /* different pitches: assumed to meet */
}

/* whether every byte of b is in a */
static gboolean
box_covers (const Access *a, const Access *b)
{
  if (a->rows == 1 || a->length >= a->stride)
    return a->start <= b->start && box_end (b) <= box_end (a);
  return a->stride == b->stride && b->rows >= 1 && a->start <= b->start &&
         (b->start - a->start) % a->stride + b->length <= a->length &&
         (b->start - a->start) / a->stride + b->rows <= a->rows;
}

/* ---- the proof ----------------------------------------------------------------------- */

typedef struct {
  AmkProgram *self;
  guint       n, q;             /* instructions, queues */
  guint       width;            /* queues with operands: a clock's entries */
  gint32     *entry_of;         /* per queue: its entry in the clocks, or -1 */
  guint32    *queue_of, *pos_of;
  guint32    *clock;            /* n × width */
  /* the signals of each counter, by queue then position (CSR); 4 bytes a counter, as
   * images may hold millions of counters */
  guint32    *sig_start, *sig_instruction;
  GHashTable *cached;           /* counter -> Cached, for counters of many signals */
  GArray    **live;             /* per buffer: Access */
  GArray    **neighbours;       /* per scratch buffer: the scratch buffers (gint32) its arena bytes meet */
} Race;

static const amk_instruction_t *
instruction (Race *r, guint i)
{
  return &g_array_index (r->self->instructions, amk_instruction_t, i);
}

static void
join (guint32 *into, const guint32 *from, guint q)
{
  for (guint k = 0; k < q; k++)
    into[k] = MAX (into[k], from[k]);
}

typedef struct {
  guint32 target;
  guint32 clock[];
} Cached;

/* into ⊔= what must have finished before counter c can reach `target` */
static void
join_counter (Race *r, guint32 *into, gint32 c, guint32 target)
{
  const guint32 first = r->sig_start[c], last = r->sig_start[c + 1];
  guint32 *acc = into;
  guint64 total = 0;

  if (last - first > CACHED_SIGNALS)
    {
      Cached *cached = g_hash_table_lookup (r->cached, GINT_TO_POINTER (c));

      if (cached != NULL && cached->target == target)
        {
          join (into, cached->clock, r->width);
          return;
        }
      if (cached == NULL)
        {
          cached = g_malloc (sizeof (Cached) + r->width * sizeof (guint32));
          g_hash_table_insert (r->cached, GINT_TO_POINTER (c), cached);
        }
      memset (cached->clock, 0, r->width * sizeof (guint32));
      cached->target = target;
      acc = cached->clock;
    }
  for (guint32 s = first; s < last; s++)
    total += instruction (r, r->sig_instruction[s])->signal.amount;
  for (guint32 s = first; s < last;)
    {
      const guint32 queue = r->queue_of[r->sig_instruction[s]];
      guint64 here = 0, need, sum = 0;
      guint32 e = s;

      while (e < last && r->queue_of[r->sig_instruction[e]] == queue)
        here += instruction (r, r->sig_instruction[e++])->signal.amount;
      /* the other queues bring at most total - here */
      if ((guint64) target + here > total)
        {
          need = (guint64) target + here - total;
          for (guint32 k = s; k < e; k++)
            {
              const guint32 i = r->sig_instruction[k];
              sum += instruction (r, i)->signal.amount;
              if (sum >= need)
                {
                  join (acc, r->clock + (gsize) i * r->width, r->width);
                  if (r->entry_of[queue] >= 0)
                    acc[r->entry_of[queue]] = MAX (acc[r->entry_of[queue]], r->pos_of[i] + 1);
                  break;
                }
            }
        }
      s = e;
    }
  if (acc != into)
    join (into, acc, r->width);
}

static gboolean
ordered_before (Race *r, const Access *a, const guint32 *clock, guint32 queue, guint32 pos)
{
  return a->queue == queue ? a->pos < pos : clock[r->entry_of[a->queue]] > a->pos;
}

static void
describe (Race *r, const Access *a, GString *s)
{
  g_string_append_printf (s, _("queue %u instruction %u (%s)"), a->queue, a->pos,
                          amk_op_name (instruction (r, a->instruction)->opcode));
}

static gboolean
report (Race *r, const Access *a, const Access *b, GError **error)
{
  AmkBufferInfo *ba = g_ptr_array_index (r->self->buffers, a->buffer);
  AmkBufferInfo *bb = g_ptr_array_index (r->self->buffers, b->buffer);
  g_autoptr(GString) first = g_string_new (NULL), second = g_string_new (NULL);
  const guint64 lo = MAX (a->start, b->start), hi = MIN (box_end (a), box_end (b));
  const gboolean arena = ba->role == AMK_BUFFER_ROLE_SCRATCH;

  describe (r, a, first);
  describe (r, b, second);
  if (a->buffer == b->buffer)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_RACE,
                 _("Race: %s and %s touch buffer %d “%s” (%s bytes %" PRIu64 " to %" PRIu64 "), at least one writing, and no counter orders them; make one wait for the other"),
                 first->str, second->str, a->buffer, ba->name, arena ? _("arena") : _("its"), lo, hi);
  else
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_RACE,
                 _("Race: %s touches scratch buffer %d “%s” and %s touches scratch buffer %d “%s”; the two share arena bytes %" PRIu64 " to %" PRIu64 ", at least one writes, and no counter orders them; make one wait for the other or place the buffers apart"),
                 first->str, a->buffer, ba->name, second->str, b->buffer, bb->name, lo, hi);
  return FALSE;
}

static gboolean
conflicts (const Access *a, const Access *b)
{
  if (a->kind == AMK_ACCESS_READ && b->kind == AMK_ACCESS_READ)
    return FALSE;
  if (a->kind == AMK_ACCESS_ATOMIC_ADD && b->kind == AMK_ACCESS_ATOMIC_ADD)
    return FALSE;
  if (a->group >= 0 && a->group == b->group)
    return FALSE;
  if (a->device_rows && b->device_rows && a->kind == AMK_ACCESS_WRITE && b->kind == AMK_ACCESS_WRITE)
    return FALSE;
  return boxes_overlap (a, b);
}

/* Checks `a` (of the instruction whose clock is `clock`) against one buffer's live
 * accesses and drops those it makes redundant. */
static gboolean
check_against (Race *r, GArray *live, const Access *a, const guint32 *clock, GError **error)
{
  for (guint k = 0; k < live->len;)
    {
      const Access *l = &g_array_index (live, Access, k);
      const gboolean same = l->instruction == a->instruction;
      const gboolean before = same || ordered_before (r, l, clock, a->queue, a->pos);

      if (!same && !before && conflicts (l, a))
        return report (r, l, a, error);
      if (before && a->group < 0 && l->buffer == a->buffer && box_covers (a, l) &&
          ((a->kind == AMK_ACCESS_WRITE && !a->device_rows) ||
           (a->kind == AMK_ACCESS_READ && l->kind == AMK_ACCESS_READ)))
        g_array_remove_index_fast (live, k);
      else
        k++;
    }
  return TRUE;
}

static gboolean
check_instruction_accesses (Race *r, guint i, GError **error)
{
  const amk_instruction_t *ins = instruction (r, i);
  const AmkOpClass *klass = amk_op_class (ins->opcode);
  const guint32 *clock = r->clock + (gsize) i * r->width;
  AmkAccessBox boxes[AMK_MAX_ACCESSES];
  Access found[AMK_MAX_ACCESSES];
  guint n = 0;

  if (klass->accesses != NULL)
    n = klass->accesses (r->self, ins, boxes);
  else
    {
      const guint written = amk_abi_written_slots (ins->opcode, ins->n_buffers);
      for (guint s = 0; s < ins->n_buffers; s++)
        if (ins->buffers[s] != AMK_NO_BUFFER)
          amk_access_range (boxes, &n, ins, s, 0, amk_verify_slot_buffer (r->self, ins, s)->n_elements,
                            ((written >> s) & 1u) ? AMK_ACCESS_WRITE : AMK_ACCESS_READ);
    }

  /* all of the instruction's accesses against the earlier ones, then added */
  for (guint k = 0; k < n; k++)
    {
      const gint32 b = ins->buffers[boxes[k].slot];
      AmkBufferInfo *info = g_ptr_array_index (r->self->buffers, b);
      const AmkDType dt = info->dtype;
      const guint64 base = info->role == AMK_BUFFER_ROLE_SCRATCH ? info->arena_offset : 0;
      Access *a = &found[k];

      /* bytes, through the blocks of a quantized type (whose accesses cover whole blocks) */
      *a = (Access) { base + amk_dtype_bytes (dt, boxes[k].start), amk_dtype_bytes (dt, boxes[k].length),
                      amk_dtype_bytes (dt, boxes[k].stride),
                      boxes[k].rows, i, r->queue_of[i], r->pos_of[i], b,
                      ins->opcode == AMK_ABI_OP_ATTN_DECODE && ins->n_buffers >= 6 ?
                        ins->params.attn_decode.arrival_counter : -1,
                      (guint8) boxes[k].kind, (guint8) boxes[k].device_rows };
      if (r->neighbours[b] != NULL)
        {
          for (guint m = 0; m < r->neighbours[b]->len; m++)
            if (!check_against (r, r->live[g_array_index (r->neighbours[b], gint32, m)], a, clock, error))
              return FALSE;
        }
      else if (!check_against (r, r->live[b], a, clock, error))
        return FALSE;
    }
  for (guint k = 0; k < n; k++)
    g_array_append_val (r->live[found[k].buffer], found[k]);
  return TRUE;
}

/* The clock of instruction i: its queue's earlier instructions, and what its waits need. */
static void
compute_clock (Race *r, guint i)
{
  const amk_instruction_t *ins = instruction (r, i);
  const guint32 q = r->queue_of[i], pos = r->pos_of[i];
  guint32 *clock = r->clock + (gsize) i * r->width;

  if (pos > 0)
    {
      GArray *queue = g_ptr_array_index (r->self->queues, q);
      memcpy (clock, r->clock + (gsize) g_array_index (queue, gint32, pos - 1) * r->width,
              r->width * sizeof (guint32));
    }
  if (r->entry_of[q] >= 0)
    clock[r->entry_of[q]] = MAX (clock[r->entry_of[q]], pos);
  for (guint w = 0; w < ins->n_waits; w++)
    join_counter (r, clock, ins->waits[w].counter, ins->waits[w].target);
}

/* The clock of the GRID_SYNCs that release together: every queue up to its own. */
static void
compute_barrier_clock (Race *r, const guint32 *barrier)
{
  g_autofree guint32 *all = g_new0 (guint32, MAX (r->width, 1));

  for (guint q = 0; q < r->q; q++)
    {
      const guint i = barrier[q];
      compute_clock (r, i);
      join (all, r->clock + (gsize) i * r->width, r->width);
    }
  for (guint q = 0; q < r->q; q++)
    memcpy (r->clock + (gsize) barrier[q] * r->width, all, r->width * sizeof (guint32));
}

/* The signals of each counter in queue order: counted, summed, then placed from the
 * last so that each counter's range ends up in order without a second array. */
static void
build_signals (Race *r)
{
  const guint n_counters = r->self->counter_names->len;

  r->sig_start = g_new0 (guint32, n_counters + 1);
  for (guint i = 0; i < r->n; i++)
    {
      const amk_instruction_t *ins = instruction (r, i);
      if (ins->signal.counter != AMK_NO_COUNTER && ins->signal.amount > 0)
        r->sig_start[ins->signal.counter]++;
    }
  for (guint c = 1; c < n_counters; c++)
    r->sig_start[c] += r->sig_start[c - 1];
  r->sig_start[n_counters] = n_counters > 0 ? r->sig_start[n_counters - 1] : 0;
  r->sig_instruction = g_new (guint32, MAX (r->sig_start[n_counters], 1));
  for (guint q = r->q; q-- > 0;)
    {
      GArray *queue = g_ptr_array_index (r->self->queues, q);
      for (guint p = queue->len; p-- > 0;)
        {
          const guint i = (guint) g_array_index (queue, gint32, p);
          const amk_instruction_t *ins = instruction (r, i);
          if (ins->signal.counter != AMK_NO_COUNTER && ins->signal.amount > 0)
            r->sig_instruction[--r->sig_start[ins->signal.counter]] = i;
        }
    }
  r->cached = g_hash_table_new_full (NULL, NULL, NULL, g_free);
}

/* The scratch buffers whose arena bytes meet: a quadratic pass over the few buffers. */
static void
build_neighbours (Race *r)
{
  const guint nb = r->self->buffers->len;

  r->live = g_new0 (GArray *, MAX (nb, 1));
  r->neighbours = g_new0 (GArray *, MAX (nb, 1));
  for (guint b = 0; b < nb; b++)
    {
      AmkBufferInfo *x = g_ptr_array_index (r->self->buffers, b);

      r->live[b] = g_array_new (FALSE, FALSE, sizeof (Access));
      if (x->role != AMK_BUFFER_ROLE_SCRATCH)
        continue;
      r->neighbours[b] = g_array_new (FALSE, FALSE, sizeof (gint32));
      for (guint c = 0; c < nb; c++)
        {
          AmkBufferInfo *y = g_ptr_array_index (r->self->buffers, c);
          if (y->role == AMK_BUFFER_ROLE_SCRATCH && x->arena_offset < y->arena_offset + y->size_bytes &&
              y->arena_offset < x->arena_offset + x->size_bytes)
            {
              gint32 other = (gint32) c;
              g_array_append_val (r->neighbours[b], other);
            }
        }
    }
}

static void
race_clear (Race *r)
{
  const guint nb = r->self->buffers->len;

  for (guint b = 0; r->live != NULL && b < nb; b++)
    {
      g_clear_pointer (&r->live[b], g_array_unref);
      g_clear_pointer (&r->neighbours[b], g_array_unref);
    }
  g_clear_pointer (&r->cached, g_hash_table_unref);
  g_free (r->live);
  g_free (r->neighbours);
  g_free (r->sig_start);
  g_free (r->sig_instruction);
  g_free (r->clock);
  g_free (r->queue_of);
  g_free (r->pos_of);
  g_free (r->entry_of);
}

gboolean
amk_race_check (AmkProgram    *self,
                const guint32 *order,
                GError       **error)
{
  Race r = { self, self->instructions->len, self->num_queues };
  g_autofree guint32 *barrier = NULL;
  guint64 entries;
  gboolean ok = TRUE;

  if (r.n == 0)
    return TRUE;
  r.queue_of = g_new (guint32, r.n);
  r.pos_of = g_new (guint32, r.n);
  r.entry_of = g_new (gint32, MAX (r.q, 1));
  for (guint q = 0; q < r.q; q++)
    {
      GArray *queue = g_ptr_array_index (self->queues, q);

      r.entry_of[q] = -1;
      for (guint p = 0; p < queue->len; p++)
        {
          const gint32 i = g_array_index (queue, gint32, p);
          r.queue_of[i] = q;
          r.pos_of[i] = p;
          if (instruction (&r, i)->n_buffers > 0 && r.entry_of[q] < 0)
            r.entry_of[q] = (gint32) r.width++;
        }
    }
  entries = (guint64) r.n * r.width;
  if (entries * sizeof (guint32) > MAX ((guint64) CLOCK_BYTES_FLOOR, (guint64) r.n * CLOCK_BYTES_PER_INSTRUCTION))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("The program has %u instructions with operands on %u queues, too many queues for its size to prove it free of races; use fewer queues"),
                   r.n, r.width);
      race_clear (&r);
      return FALSE;
    }
  r.clock = g_new0 (guint32, MAX (entries, 1));
  build_signals (&r);
  build_neighbours (&r);
  barrier = g_new (guint32, r.q);

  for (guint k = 0; k < r.n && ok; k++)
    {
      const guint i = order[k];

      if (instruction (&r, i)->opcode == AMK_ABI_OP_GRID_SYNC)
        {
          /* the abstract run finishes a barrier's GRID_SYNCs together, queue by queue */
          if (r.queue_of[i] == 0)
            {
              for (guint q = 0; q < r.q; q++)
                barrier[q] = order[k + q];
              compute_barrier_clock (&r, barrier);
            }
        }
      else
        compute_clock (&r, i);
      ok = check_instruction_accesses (&r, i, error);
    }
  race_clear (&r);
  return ok;
}

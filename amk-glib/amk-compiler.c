/* amk-compiler.c: lowers the ops recorded with the op API into tile instructions:
 * tiles per op, dependencies from the element ranges each tile reads and writes,
 * counters per group of producer tiles that the same consumers read,
 * a SILU_MUL fused into the MATVEC that reads it, the attention merge into the attention,
 * critical-path list scheduling onto the queues with a bytes-moved cost model,
 * scratch buffers placed by lifetime, then the verifier.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-program-private.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

/* The cost model: the bytes one SM moves per ns (its share of the device's copy
 * bandwidth) and the fixed cost of dispatching one instruction. */
#define BYTES_PER_NS_PER_SM   30.0
#define DISPATCH_NS           500.0
#define GROUP_WAITS_MAX       2u          /* counters of one producer op a consumer tile waits for */

typedef AmkAccess Access;
typedef AmkTile Tile;

typedef struct {
  guint    first_tile, n_tiles;
  gboolean has_consumers;
} OpTiles;


static AmkBufferInfo *
info (AmkProgram *self, gint32 buffer)
{
  return g_ptr_array_index (self->buffers, buffer);
}

AmkBufferInfo *
amk_lower_buffer (AmkLowering *lw, gint32 buffer)
{
  return info (lw->program, buffer);
}

void
amk_tile_access (AmkTile *t, gint32 buffer, guint64 start, guint64 end, gboolean write)
{
  if (buffer == AMK_NO_BUFFER)
    return;
  g_assert (t->n_access < G_N_ELEMENTS (t->access));
  t->access[t->n_access++] = (AmkAccess) { buffer, start, end, write };
}

void
amk_tile_use_buffers (AmkTile *t, const AmkOpInfo *op, guint n)
{
  t->ins.n_buffers = n;
  for (guint i = 0; i < n; i++)
    t->ins.buffers[i] = op->buffers[i];
}

guint
amk_instruction_elem_size (AmkProgram *self, const amk_instruction_t *ins, guint slot)
{
  AmkBufferInfo *b;

  if (slot >= ins->n_buffers || ins->buffers[slot] < 0 ||
      (b = amk_program_get_buffer_info (self, ins->buffers[slot])) == NULL)
    return 0;
  return amk_dtype_size (b->dtype);
}

double
amk_instruction_bytes (AmkProgram *self, const amk_instruction_t *ins, guint slot, double n)
{
  AmkBufferInfo *b;
  guint values, bytes;

  if (slot >= ins->n_buffers || ins->buffers[slot] < 0 ||
      (b = amk_program_get_buffer_info (self, ins->buffers[slot])) == NULL)
    return 0.0;
  if (amk_dtype_block (b->dtype, &values, &bytes))
    return n * bytes / values;
  return n * amk_dtype_size (b->dtype);
}

double
amk_instruction_cost_ns (AmkProgram *self, const amk_instruction_t *ins)
{
  const AmkOpClass *klass = amk_op_class (ins->opcode);
  const double bytes = klass != NULL && klass->bytes != NULL ? klass->bytes (self, ins) : 0.0;

  return DISPATCH_NS + bytes / BYTES_PER_NS_PER_SM;
}



/* Whether SILU_MUL op s fuses into the MATVEC recorded right after it (a layer's down
 * projection): that MATVEC reads exactly s's output, without a fused norm; the output is
 * an F32 scratch buffer (so skipping it changes no rounding and nothing a caller can
 * see) that no later op reads before a SILU_MUL or MATVEC overwrites it (the next
 * layer's). The MATVEC then reads gate and up itself, x' = silu(gate) * up (its seventh
 * buffer), and s becomes no instruction: one stage less per layer, each a round trip
 * through the counters. */
static gboolean
silu_fuses_into_next (AmkProgram *self, guint s)
{
  const AmkOpInfo *ops = (const AmkOpInfo *) self->ops->data;
  const AmkOpInfo *silu = &ops[s], *mv;
  gint32 act;

  if (silu->opcode != AMK_ABI_OP_SILU_MUL || s + 1 >= self->ops->len)
    return FALSE;
  mv = &ops[s + 1];
  act = silu->buffers[0];
  if (mv->opcode != AMK_ABI_OP_MATVEC || mv->buffers[2] != act || mv->buffers[5] != AMK_NO_BUFFER ||
      info (self, act)->role != AMK_BUFFER_ROLE_SCRATCH || info (self, act)->dtype != AMK_DTYPE_F32 ||
      info (self, act)->n_elements != (guint64) info (self, mv->buffers[1])->shape[1] ||
      mv->buffers[0] == silu->buffers[1] || mv->buffers[0] == silu->buffers[2])
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (mv->buffers); i++)
    if (i != 2 && mv->buffers[i] == act)
      return FALSE;
  for (guint o = s + 2; o < self->ops->len; o++)
    {
      for (guint i = 1; i < G_N_ELEMENTS (ops[o].buffers); i++)
        if (ops[o].buffers[i] == act)
          return FALSE;  /* read */
      if (ops[o].buffers[0] == act)
        return ops[o].opcode == AMK_ABI_OP_SILU_MUL || ops[o].opcode == AMK_ABI_OP_MATVEC;
    }
  return TRUE;
}

/* Whether op o is the ATTN_REDUCE of the ATTN_DECODE recorded right before it (the pair
 * that amk_program_op_attention() records): then the attention tiles merge themselves,
 * the last split of each key/value head to finish merging that head's query heads
 * (ATTN_DECODE's fused merge), and the merge op becomes no instruction: one stage and
 * one round trip through the counters less per layer. */
static gboolean
merge_fuses_into_attention (AmkProgram *self, guint o)
{
  const AmkOpInfo *ops = (const AmkOpInfo *) self->ops->data;

  return o > 0 && o < self->ops->len && ops[o].opcode == AMK_ABI_OP_ATTN_REDUCE &&
         ops[o - 1].opcode == AMK_ABI_OP_ATTN_DECODE && ops[o].buffers[1] == ops[o - 1].buffers[0];
}



/* Splits op `o` into tiles appended to `tiles`, by its descriptor's plan and lower. A
 * MATVEC with `silu` set (the SILU_MUL fused into it, see silu_fuses_into_next) reads that
 * op's gate and up instead of x; an ATTN_DECODE with `merge` set
 * (merge_fuses_into_attention) merges into its output. */
static void
lower_op (AmkProgram *self, guint o, const AmkOpInfo *op, const AmkOpInfo *silu,
          const AmkOpInfo *merge, GArray *tiles)
{
  const AmkOpClass *klass = amk_op_class (op->opcode);
  AmkLowering lw = { self, op, silu, merge, o, 0, 0, 1, AMK_NO_COUNTER };

  if (klass->plan != NULL)
    klass->plan (&lw);
  else
    {
      /* elementwise over the output */
      lw.n = info (self, op->buffers[0])->n_elements;
      lw.n_tiles = MAX (1, MIN ((guint64) self->num_queues, lw.n / AMK_ELEMENTWISE_MIN_TILE));
    }

  /* n_tiles tiles as even as integers allow; a MATVEC's row tiles each in `splits`
   * column slices, one after the other */
  for (guint64 tile = 0; tile < lw.n_tiles * lw.splits; tile++)
    {
      Tile t = { 0 };
      const guint64 rt = tile / lw.splits, slice = tile % lw.splits;

      t.op = o;
      t.start = rt * lw.n / lw.n_tiles;
      t.end = (rt + 1) * lw.n / lw.n_tiles;
      t.counter = AMK_NO_COUNTER;
      t.preds = g_array_new (FALSE, FALSE, sizeof (guint));
      t.succs = g_array_new (FALSE, FALSE, sizeof (guint));
      t.ins.opcode = op->opcode;
      t.ins.signal.counter = AMK_NO_COUNTER;
      t.ins.params = op->params;
      for (guint i = 0; i < AMK_MAX_BUFFER_REFS; i++)
        t.ins.buffers[i] = AMK_NO_BUFFER;
      klass->lower (&lw, &t, tile, slice);
      t.cost = amk_instruction_cost_ns (self, &t.ins);
      g_array_append_val (tiles, t);
    }
}

static gboolean
overlap (guint64 a0, guint64 a1, guint64 b0, guint64 b1)
{
  return a0 < b1 && b0 < a1;
}

static void
add_pred (Tile *tiles, guint consumer, guint producer)
{
  GArray *preds = tiles[consumer].preds;

  if (tiles[consumer].op == tiles[producer].op)
    return;  /* tiles of one op touch disjoint outputs; an in-place ADD reads its own rows */
  for (guint i = 0; i < preds->len; i++)
    if (g_array_index (preds, guint, i) == producer)
      return;
  g_array_append_val (preds, producer);
}

static gint
compare_ranges (gconstpointer a, gconstpointer b)
{
  const guint64 *x = a, *y = b;

  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* After op `o`: retires from `list` the accesses of earlier ops that o's writes cover
 * entirely, one tile's or several together. A later access that overlaps such an access overlaps one of
 * o's write tiles, which waited for it, so the edge would be implied. Without this the
 * readers of a residual stream (whole-vector reads, written back tile by tile) pile up
 * layer after layer and every later write waits for all of them. */
static void
retire_covered (Tile *tiles, guint o, guint t0, guint t1, gint32 buffer, GArray *list)
{
  g_autoptr(GArray) spans = g_array_new (FALSE, FALSE, sizeof (guint64) * 2);
  guint n = 0;

  for (guint t = t0; t < t1; t++)
    for (guint a = 0; a < tiles[t].n_access; a++)
      if (tiles[t].access[a].write && tiles[t].access[a].buffer == buffer)
        {
          guint64 span[2] = { tiles[t].access[a].start, tiles[t].access[a].end };
          g_array_append_vals (spans, span, 1);
        }
  if (spans->len == 0)
    return;
  g_array_sort (spans, compare_ranges);
  for (guint i = 0; i < spans->len; i++)  /* merge touching spans in place */
    {
      guint64 *cur = &g_array_index (spans, guint64, 2 * i);
      guint64 *last = &g_array_index (spans, guint64, 2 * (n - 1));
      if (n > 0 && cur[0] <= last[1])
        last[1] = MAX (last[1], cur[1]);
      else
        {
          guint64 *dst = &g_array_index (spans, guint64, 2 * n++);
          dst[0] = cur[0];
          dst[1] = cur[1];
        }
    }
  for (guint l = list->len; l-- > 0;)
    {
      const guint *e = &g_array_index (list, guint, 2 * l);
      const Access *prev = &tiles[e[0]].access[e[1]];
      if (tiles[e[0]].op == o)
        continue;
      for (guint i = 0; i < n; i++)
        {
          const guint64 *span = &g_array_index (spans, guint64, 2 * i);
          if (prev->start >= span[0] && prev->end <= span[1])
            {
              g_array_remove_index_fast (list, l);
              break;
            }
        }
    }
}

/* Dependencies from the accesses, in op order: a read waits for the earlier writers of
 * its range, a write for the earlier readers and writers. The writes of an op retire
 * the earlier accesses they cover entirely (retire_covered), so the lists stay short
 * and the edges direct. */
static void
derive_dependencies (AmkProgram *self, Tile *tiles, OpTiles *ops)
{
  g_autoptr(GPtrArray) live = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(GArray) written = g_array_new (FALSE, FALSE, sizeof (gint32));

  for (guint b = 0; b < self->buffers->len; b++)
    g_ptr_array_add (live, g_array_new (FALSE, FALSE, sizeof (guint) * 2)); /* (tile, access) */

  for (guint o = 0; o < self->ops->len; o++)
    {
      const guint t0 = ops[o].first_tile, t1 = t0 + ops[o].n_tiles;

      for (guint t = t0; t < t1; t++)
        for (guint a = 0; a < tiles[t].n_access; a++)
          {
            const Access *acc = &tiles[t].access[a];
            GArray *list = g_ptr_array_index (live, acc->buffer);

            for (guint l = 0; l < list->len; l++)
              {
                const guint *entry = &g_array_index (list, guint, 2 * l);
                const Access *prev = &tiles[entry[0]].access[entry[1]];
                if ((acc->write || prev->write) && overlap (acc->start, acc->end, prev->start, prev->end))
                  add_pred (tiles, t, entry[0]);
              }
          }

      for (guint t = t0; t < t1; t++)
        for (guint a = 0; a < tiles[t].n_access; a++)
          {
            const Access *acc = &tiles[t].access[a];
            guint entry[2] = { t, a };

            g_array_append_vals (g_ptr_array_index (live, acc->buffer), entry, 1);
          }

      /* once per buffer the op writes */
      g_array_set_size (written, 0);
      for (guint t = t0; t < t1; t++)
        for (guint a = 0; a < tiles[t].n_access; a++)
          {
            const Access *acc = &tiles[t].access[a];
            gboolean seen = FALSE;

            for (guint w = 0; w < written->len && !seen; w++)
              seen = g_array_index (written, gint32, w) == acc->buffer;
            if (acc->write && !seen)
              {
                g_array_append_val (written, acc->buffer);
                retire_covered (tiles, o, t0, t1, acc->buffer, g_ptr_array_index (live, acc->buffer));
              }
          }
    }
}

#define IMPLIED_DEPTH   4u     /* predecessor levels searched for implied waits */
#define IMPLIED_VISITS  4096u  /* tiles visited per tile, at most */

/* Drops each tile's predecessors that another of its predecessors already waited for,
 * directly or up to IMPLIED_DEPTH levels back. A layer's o projection waits for the
 * attention merge, which ran after the attention, after RoPE, after q, k and v: its
 * write-after-read waits on q, k and v (they read x, which it overwrites) are implied.
 * Fewer waits mean fewer polls and fewer NOP wait carriers. Completion is transitive
 * (a chain of release signals and acquire waits), so a dropped wait still holds when the
 * tile starts; a search cut short by IMPLIED_VISITS only keeps some waits it could drop.
 * Tiles are numbered in program order, so every predecessor has a smaller index. */
static void
drop_implied_preds (Tile *tiles, guint n_tiles)
{
  g_autofree guint *stamp = g_new0 (guint, n_tiles); /* t + 1: reached while reducing t */
  g_autoptr(GArray) frontier = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr(GArray) next = g_array_new (FALSE, FALSE, sizeof (guint));

  for (guint t = 0; t < n_tiles; t++)
    {
      GArray *preds = tiles[t].preds;
      guint visits = 0;

      if (preds->len < 2)
        continue;
      g_array_set_size (frontier, 0);
      g_array_append_vals (frontier, preds->data, preds->len);
      for (guint depth = 0; depth < IMPLIED_DEPTH && frontier->len > 0 && visits < IMPLIED_VISITS; depth++)
        {
          g_array_set_size (next, 0);
          for (guint i = 0; i < frontier->len && visits < IMPLIED_VISITS; i++)
            {
              const GArray *up = tiles[g_array_index (frontier, guint, i)].preds;
              for (guint j = 0; j < up->len; j++)
                {
                  const guint a = g_array_index (up, guint, j);
                  if (stamp[a] == t + 1)
                    continue;
                  stamp[a] = t + 1;
                  g_array_append_val (next, a);
                  visits++;
                }
            }
          g_array_set_size (frontier, 0);
          g_array_append_vals (frontier, next->data, next->len);
        }
      for (guint i = 0; i < preds->len;)
        if (stamp[g_array_index (preds, guint, i)] == t + 1)
          g_array_remove_index (preds, i);
        else
          i++;
    }
}

/* Union-find over one op's tiles: the group a tile's counter belongs to. */
static guint
group_root (guint *parent, guint i)
{
  while (parent[i] != i)
    i = parent[i] = parent[parent[i]];
  return i;
}

/* The groups of `op` (roots, relative to its first tile) that consumer `t` reads,
 * distinct, into `out`; the first smallest and the first largest of them through *small
 * and *large. */
static void
consumer_groups (const Tile *tiles, const OpTiles *op, guint t, guint *parent,
                 const guint *size, GArray *out, guint *small, guint *large)
{
  const GArray *preds = tiles[t].preds;

  g_array_set_size (out, 0);
  *small = *large = G_MAXUINT;
  for (guint i = 0; i < preds->len; i++)
    {
      const guint p = g_array_index (preds, guint, i);
      guint r;
      gboolean seen = FALSE;

      if (p < op->first_tile || p >= op->first_tile + op->n_tiles)
        continue;
      r = group_root (parent, p - op->first_tile);
      for (guint j = 0; j < out->len && !seen; j++)
        seen = g_array_index (out, guint, j) == r;
      if (seen)
        continue;
      g_array_append_val (out, r);
      if (*small == G_MAXUINT || size[r] < size[*small])
        *small = r;
      if (*large == G_MAXUINT || size[r] > size[*large])
        *large = r;
    }
}

/* The counters. The tiles of a producer op are grouped by the consumer tiles that read
 * them, one counter per group: a consumer waits for the groups holding what it reads
 * (an attention head for its q, k and v rows, a split-K slice for the tiles of its
 * columns of x), not for the whole op. A consumer that would wait
 * for more than GROUP_WAITS_MAX groups of one op has its smallest merged into its
 * largest until it does not (a merge never adds a group to another consumer's waits);
 * a consumer of most of the op thus leaves it one counter. Each consumer then depends
 * on every tile of its groups, not only those it reads: scheduled before one it does
 * not read, on that tile's queue, it would wait for it forever. */
static void
assign_counters (AmkProgram *self, Tile *tiles, guint n_tiles, OpTiles *ops)
{
  g_autoptr(GPtrArray) readers = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr(GHashTable) signatures = g_hash_table_new_full (g_bytes_hash, g_bytes_equal,
                                                             (GDestroyNotify) g_bytes_unref, NULL);
  g_autoptr(GArray) groups = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autofree guint *stamp = g_new0 (guint, n_tiles + 1);

  /* readers[p]: the consumer tiles of tile p, ascending */
  for (guint t = 0; t < n_tiles; t++)
    g_ptr_array_add (readers, g_array_new (FALSE, FALSE, sizeof (guint)));
  for (guint t = 0; t < n_tiles; t++)
    for (guint i = 0; i < tiles[t].preds->len; i++)
      {
        const guint p = g_array_index (tiles[t].preds, guint, i);
        ops[tiles[p].op].has_consumers = TRUE;
        g_array_append_val ((GArray *) g_ptr_array_index (readers, p), t);
      }

  for (guint o = 0; o < self->ops->len; o++)
    {
      OpTiles *op = &ops[o];
      const guint n = op->n_tiles;
      g_autofree guint *parent = g_new (guint, MAX (n, 1));
      g_autofree guint *size = g_new (guint, MAX (n, 1));
      g_autofree gint32 *counter = g_new (gint32, MAX (n, 1));

      if (!op->has_consumers)
        continue;
      g_hash_table_remove_all (signatures);
      for (guint i = 0; i < n; i++)
        {
          const GArray *r = g_ptr_array_index (readers, op->first_tile + i);
          GBytes *key = g_bytes_new (r->data, r->len * sizeof (guint));
          gpointer first;

          size[i] = 1;
          if (g_hash_table_lookup_extended (signatures, key, NULL, &first))
            {
              parent[i] = GPOINTER_TO_UINT (first);
              size[parent[i]]++;
              g_bytes_unref (key);
            }
          else
            {
              parent[i] = i;
              g_hash_table_insert (signatures, key, GUINT_TO_POINTER (i));
            }
        }

      /* every consumer of the op, once, in program order */
      for (guint i = 0; i < n; i++)
        {
          const GArray *r = g_ptr_array_index (readers, op->first_tile + i);
          for (guint j = 0; j < r->len; j++)
            {
              const guint t = g_array_index (r, guint, j);
              guint small, large;

              if (stamp[t] == o + 1)
                continue;
              stamp[t] = o + 1;
              for (;;)
                {
                  consumer_groups (tiles, op, t, parent, size, groups, &small, &large);
                  if (groups->len <= GROUP_WAITS_MAX)
                    break;
                  if (small == large) /* all of one size: both are the first group */
                    small = g_array_index (groups, guint, 1);
                  parent[small] = large;
                  size[large] += size[small];
                }
            }
        }

      for (guint i = 0; i < n; i++)
        counter[i] = AMK_NO_COUNTER;
      for (guint i = 0; i < n; i++)
        {
          const guint r = group_root (parent, i);
          if (counter[r] == AMK_NO_COUNTER)
            counter[r] = amk_program_add_counter (self, NULL);
          tiles[op->first_tile + i].counter = counter[r];
          tiles[op->first_tile + i].counter_tiles = size[r];
        }
    }

  /* each consumer waits for the whole groups it reads */
  memset (stamp, 0, (n_tiles + 1) * sizeof (guint));
  for (guint t = 0; t < n_tiles; t++)
    {
      GArray *preds = tiles[t].preds, *all = g_array_new (FALSE, FALSE, sizeof (guint));

      for (guint i = 0; i < preds->len; i++)
        {
          const guint p = g_array_index (preds, guint, i);
          const OpTiles *op = &ops[tiles[p].op];

          if (tiles[p].counter_tiles == 1)
            {
              g_array_append_val (all, p);
              continue;
            }
          if (stamp[p] == t + 1)
            continue;
          for (guint q = op->first_tile; q < op->first_tile + op->n_tiles; q++)
            if (tiles[q].counter == tiles[p].counter)
              {
                stamp[q] = t + 1;
                g_array_append_val (all, q);
              }
        }
      for (guint i = 0; i < all->len; i++)
        g_array_append_val (tiles[g_array_index (all, guint, i)].succs, t);
      g_array_unref (preds);
      tiles[t].preds = all;
    }
}

/* ---- list scheduling ---------------------------------------------------------------- */

typedef struct {
  guint  *items;
  guint   len;
  Tile   *tiles;
} Heap;  /* max-heap of ready tiles by bottom level, ties to the lower index */

static gboolean
heap_before (Heap *h, guint a, guint b)
{
  double x = h->tiles[a].bottom, y = h->tiles[b].bottom;
  return x > y || (x == y && a < b);
}

static void
heap_push (Heap *h, guint t)
{
  guint i = h->len++;
  h->items[i] = t;
  while (i > 0 && heap_before (h, h->items[i], h->items[(i - 1) / 2]))
    {
      guint p = (i - 1) / 2, tmp = h->items[p];
      h->items[p] = h->items[i];
      h->items[i] = tmp;
      i = p;
    }
}

static guint
heap_pop (Heap *h)
{
  guint top = h->items[0], i = 0;

  h->items[0] = h->items[--h->len];
  for (;;)
    {
      guint l = 2 * i + 1, r = l + 1, m = i, tmp;
      if (l < h->len && heap_before (h, h->items[l], h->items[m]))
        m = l;
      if (r < h->len && heap_before (h, h->items[r], h->items[m]))
        m = r;
      if (m == i)
        break;
      tmp = h->items[m];
      h->items[m] = h->items[i];
      h->items[i] = tmp;
      i = m;
    }
  return top;
}

/* Critical-path list scheduling: the ready tile with the longest path to the end goes
 * to the queue where it can start first. Returns per queue the tiles in order. */
static GPtrArray *
schedule (AmkProgram *self, Tile *tiles, guint n_tiles)
{
  GPtrArray *order = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autofree double *free_at = g_new0 (double, self->num_queues);
  g_autofree guint *items = g_new (guint, MAX (n_tiles, 1));
  Heap heap = { items, 0, tiles };

  for (guint q = 0; q < self->num_queues; q++)
    g_ptr_array_add (order, g_array_new (FALSE, FALSE, sizeof (guint)));

  /* tiles are in op order, a topological order: bottom levels from the end */
  for (guint t = n_tiles; t-- > 0;)
    {
      double longest = 0;
      for (guint i = 0; i < tiles[t].succs->len; i++)
        longest = MAX (longest, tiles[g_array_index (tiles[t].succs, guint, i)].bottom);
      tiles[t].bottom = tiles[t].cost + longest;
      tiles[t].n_waiting = tiles[t].preds->len;
    }
  for (guint t = 0; t < n_tiles; t++)
    if (tiles[t].n_waiting == 0)
      heap_push (&heap, t);

  while (heap.len > 0)
    {
      guint t = heap_pop (&heap), best = 0;
      double ready = 0, best_start = G_MAXDOUBLE;

      for (guint i = 0; i < tiles[t].preds->len; i++)
        ready = MAX (ready, tiles[g_array_index (tiles[t].preds, guint, i)].finish);
      for (guint q = 0; q < self->num_queues; q++)
        {
          double start = MAX (free_at[q], ready);
          if (start < best_start)
            best_start = start, best = q;
        }
      tiles[t].finish = best_start + tiles[t].cost;
      free_at[best] = tiles[t].finish;
      g_array_append_val ((GArray *) g_ptr_array_index (order, best), t);

      for (guint i = 0; i < tiles[t].succs->len; i++)
        {
          guint s = g_array_index (tiles[t].succs, guint, i);
          if (--tiles[s].n_waiting == 0)
            heap_push (&heap, s);
        }
    }
  return order;
}

/* Appends tile `t` to `queue` with its waits; waits beyond AMK_MAX_WAITS go to NOPs
 * just before it on the same queue. */
static gboolean
emit (AmkProgram *self, Tile *tiles, guint t, guint queue, GError **error)
{
  g_autoptr(GArray) waits = g_array_new (FALSE, FALSE, sizeof (amk_wait_t));
  amk_instruction_t ins = tiles[t].ins;

  for (guint i = 0; i < tiles[t].preds->len; i++)
    {
      const Tile *p = &tiles[g_array_index (tiles[t].preds, guint, i)];
      amk_wait_t w = { p->counter, p->counter_tiles };
      gboolean seen = FALSE;

      for (guint j = 0; j < waits->len && !seen; j++)
        seen = g_array_index (waits, amk_wait_t, j).counter == w.counter;
      if (!seen)
        g_array_append_val (waits, w);
    }

  while (waits->len > AMK_MAX_WAITS)
    {
      amk_instruction_t nop = { 0 };
      guint n = MIN (AMK_MAX_WAITS, waits->len - AMK_MAX_WAITS);

      nop.opcode = AMK_ABI_OP_NOP;
      nop.signal.counter = AMK_NO_COUNTER;
      for (guint i = 0; i < AMK_MAX_BUFFER_REFS; i++)
        nop.buffers[i] = AMK_NO_BUFFER;
      for (guint i = 0; i < n; i++)
        nop.waits[i] = g_array_index (waits, amk_wait_t, waits->len - 1 - i);
      nop.n_waits = n;
      g_array_set_size (waits, waits->len - n);
      if (!amk_program_append_raw (self, queue, &nop, error))
        return FALSE;
    }
  for (guint i = 0; i < waits->len; i++)
    ins.waits[i] = g_array_index (waits, amk_wait_t, i);
  ins.n_waits = waits->len;
  if (tiles[t].counter != AMK_NO_COUNTER)
    {
      ins.signal.counter = tiles[t].counter;
      ins.signal.amount = 1;
    }
  return amk_program_append_raw (self, queue, &ins, error);
}

/* ---- scratch placement -------------------------------------------------------------- */

/* Whether every op in `first` finished, through the dependencies, before any op in
 * `then` starts (both non-empty): `first` is within the ops before each op of `then`. */
static gboolean
ordered_before (const guint64 *first, const guint64 *then, const guint64 *before,
                guint n_ops, guint words)
{
  gboolean any_first = FALSE, any_then = FALSE;

  for (guint w = 0; w < words; w++)
    any_first |= first[w] != 0, any_then |= then[w] != 0;
  if (!any_first || !any_then)
    return FALSE;  /* a buffer no op touches is live all the time */
  for (guint v = 0; v < n_ops; v++)
    if (then[v / 64] & (G_GUINT64_CONSTANT (1) << (v % 64)))
      for (guint w = 0; w < words; w++)
        if (first[w] & ~before[(gsize) v * words + w])
          return FALSE;
  return TRUE;
}

/* Scratch buffers share arena space when every op touching one is ordered, through the
 * dependencies, before every op touching the other; otherwise they could be live at the
 * same time on different queues. First fit, in buffer order. An op is before another
 * when all its tiles finish before any tile of the other starts: a tile follows all of
 * op a when it waits for every tile of a, or for a tile that follows all of a (a tile
 * that waits for some tiles of a follows only those). */
static void
place_scratch (AmkProgram *self, Tile *tiles, guint n_tiles, const OpTiles *ops)
{
  const guint n_ops = self->ops->len, n_buf = self->buffers->len;
  const guint words = (n_ops + 63) / 64 + 1;
  g_autofree guint64 *before = g_new0 (guint64, (gsize) (n_ops + 1) * words); /* ops all done before o */
  g_autofree guint64 *touch = g_new0 (guint64, (gsize) (n_buf + 1) * words);  /* ops touching b */
  g_autofree guint64 *follows = g_new (guint64, words);
  g_autofree guint *waited = g_new0 (guint, n_ops + 1);
  g_autofree guint *placed = g_new (guint, n_buf + 1);
  guint n_placed = 0;
  guint64 arena = 0;

  for (guint t = 0; t < n_tiles; t++)
    {
      const guint o = tiles[t].op;
      const GArray *preds = tiles[t].preds;
      guint64 *mine = before + (gsize) o * words;

      for (guint a = 0; a < tiles[t].n_access; a++)
        touch[(gsize) tiles[t].access[a].buffer * words + o / 64] |= G_GUINT64_CONSTANT (1) << (o % 64);
      memset (follows, 0, words * sizeof (guint64));
      for (guint i = 0; i < preds->len; i++)
        {
          const guint p = tiles[g_array_index (preds, guint, i)].op;
          for (guint w = 0; w < words; w++)
            follows[w] |= before[(gsize) p * words + w];
          waited[p]++;
        }
      for (guint i = 0; i < preds->len; i++)
        {
          const guint p = tiles[g_array_index (preds, guint, i)].op;
          if (waited[p] == ops[p].n_tiles)
            follows[p / 64] |= G_GUINT64_CONSTANT (1) << (p % 64);
          waited[p] = 0;
        }
      /* tiles are in op order: the first tile of o starts its set, the others narrow it */
      for (guint w = 0; w < words; w++)
        mine[w] = (t == 0 || tiles[t - 1].op != o) ? follows[w] : (mine[w] & follows[w]);
    }

  for (guint b = 0; b < n_buf; b++)
    {
      AmkBufferInfo *bi = info (self, b);
      const guint64 *tb = touch + (gsize) b * words;
      guint64 offset = 0;
      gboolean moved = TRUE;

      if (bi->role != AMK_BUFFER_ROLE_SCRATCH)
        continue;
      while (moved)
        {
          moved = FALSE;
          for (guint i = 0; i < n_placed; i++)
            {
              AmkBufferInfo *pi = info (self, placed[i]);
              const guint64 *tp = touch + (gsize) placed[i] * words;
              const guint64 end = pi->arena_offset + pi->size_bytes;

              if (!overlap (offset, offset + bi->size_bytes, pi->arena_offset, end) ||
                  ordered_before (tp, tb, before, n_ops, words) ||
                  ordered_before (tb, tp, before, n_ops, words))
                continue;
              offset = (end + AMK_ARENA_ALIGNMENT - 1) & ~(guint64) (AMK_ARENA_ALIGNMENT - 1);
              moved = TRUE;
            }
        }
      bi->arena_offset = offset;
      arena = MAX (arena, offset + bi->size_bytes);
      placed[n_placed++] = b;
    }
  amk_program_set_scratch_size (self, (arena + AMK_ARENA_ALIGNMENT - 1) & ~(guint64) (AMK_ARENA_ALIGNMENT - 1));
}

/**
 * amk_program_compile:
 * @self: a program
 * @error: return location for a #GError
 *
 * Lowers the ops recorded with the op API ([method@Amk.Program.op_matvec] and friends)
 * into instructions. Each op becomes tiles (a matvec spreads its rows over every queue);
 * a tile waits only for the tiles that wrote the elements it reads (or read the
 * elements it overwrites), through one counter per group of producer tiles that the
 * same consumers read (a whole op when its consumers need most of it). A SILU_MUL whose scratch output only the next MATVEC
 * reads becomes part of that MATVEC, and an attention op's merge part of its splits (one
 * stage less each). Tiles go to queues by critical-path list scheduling on
 * an estimated cost (bytes moved, see [method@Amk.Program.get_schedule_report]); scratch
 * buffers share arena space when their lifetimes cannot overlap. The result is verified.
 *
 * Returns: %TRUE on success
 */
gboolean
amk_program_compile (AmkProgram  *self,
                     GError     **error)
{
  g_autoptr(GArray) tile_array = NULL;
  g_autoptr(GPtrArray) order = NULL;
  g_autofree OpTiles *ops = NULL;
  g_autofree gboolean *absorbed = NULL;
  Tile *tiles;
  guint n_tiles;
  gboolean ok = TRUE;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (self->compiled)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                           _("The program is already compiled"));
      return FALSE;
    }
  if (self->instructions->len > 0 || self->counter_names->len > 0)
    {
      g_set_error_literal (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                           _("compile() lowers the ops of a program without raw instructions or counters; build either with the op API or with raw instructions"));
      return FALSE;
    }

  tile_array = g_array_new (FALSE, TRUE, sizeof (Tile));
  ops = g_new0 (OpTiles, MAX (self->ops->len, 1));
  /* ops that become part of a neighbour: a SILU_MUL of the MATVEC after it, an
   * ATTN_REDUCE of the ATTN_DECODE before it */
  absorbed = g_new0 (gboolean, self->ops->len + 1);
  for (guint o = 0; o < self->ops->len; o++)
    absorbed[o] = silu_fuses_into_next (self, o) || merge_fuses_into_attention (self, o);
  for (guint o = 0; o < self->ops->len; o++)
    {
      const AmkOpInfo *all = (const AmkOpInfo *) self->ops->data;

      ops[o].first_tile = tile_array->len;
      if (!absorbed[o])
        lower_op (self, o, &all[o],
                  o > 0 && absorbed[o - 1] && all[o - 1].opcode == AMK_ABI_OP_SILU_MUL ? &all[o - 1] : NULL,
                  absorbed[o + 1] && all[o + 1].opcode == AMK_ABI_OP_ATTN_REDUCE ? &all[o + 1] : NULL,
                  tile_array);
      ops[o].n_tiles = tile_array->len - ops[o].first_tile;
    }
  tiles = (Tile *) tile_array->data;
  n_tiles = tile_array->len;

  derive_dependencies (self, tiles, ops);
  drop_implied_preds (tiles, n_tiles);
  assign_counters (self, tiles, n_tiles, ops);
  order = schedule (self, tiles, n_tiles);
  for (guint q = 0; q < self->num_queues && ok; q++)
    {
      GArray *list = g_ptr_array_index (order, q);
      for (guint i = 0; i < list->len && ok; i++)
        ok = emit (self, tiles, g_array_index (list, guint, i), q, error);
    }
  if (ok)
    place_scratch (self, tiles, n_tiles, ops);

  for (guint t = 0; t < n_tiles; t++)
    {
      g_array_unref (tiles[t].preds);
      g_array_unref (tiles[t].succs);
    }
  if (!ok)
    return FALSE;
  self->compiled = TRUE;
  return amk_program_verify (self, error);
}

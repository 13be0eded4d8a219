/* test-compiler.c: the op API and amk_program_compile(). Random op graphs compile,
 * verify, and compute what a plain sequential interpreter of the same ops computes (on
 * every seed of the CPU executor's scheduler); matvecs spread over all queues; a
 * SILU_MUL fuses into the matvec that reads it; a matvec with too few rows for the queues
 * is split over its columns (split-K), each slice waiting only for the producer tiles of
 * its columns; the estimated makespan stays close to its lower bound.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

/* The program's data for `buffer`: `size` bytes at `data`, which outlive the program. */
static void
set_data (AmkProgram *p, gint buffer, const void *data, gsize size)
{
  g_autoptr(GBytes) bytes = g_bytes_new_static (data, size);
  GError *error = NULL;

  g_assert_true (amk_program_set_buffer_data (p, (guint) buffer, bytes, &error));
  g_assert_no_error (error);
}

/* `size` bytes at `data` into the executor's `buffer`. */
static void
upload (AmkCpuExecutor *ex, gint buffer, const void *data, gsize size)
{
  g_autoptr(GBytes) bytes = g_bytes_new_static (data, size);
  GError *error = NULL;

  g_assert_true (amk_cpu_executor_upload (ex, (guint) buffer, bytes, &error));
  g_assert_no_error (error);
}


#define N_BUFFERS 8

typedef struct {
  AmkOpcode op;
  gint      dst, a, b;  /* buffers; for MATVEC a = matrix, b = vector */
  gint      residual;   /* MATVEC only, or -1 */
  float     value;
} RefOp;

typedef struct {
  AmkProgram *p;
  gint        buf[N_BUFFERS];       /* f32 vectors of length n; 0 is the input */
  gint        mat[2];               /* n x n constant matrices */
  float      *data[N_BUFFERS];
  float      *w[2];
  GArray     *ops;                  /* RefOp */
  guint       n;
} Graph;

static void
graph_free (Graph *g)
{
  for (guint i = 0; i < N_BUFFERS; i++)
    g_free (g->data[i]);
  g_free (g->w[0]);
  g_free (g->w[1]);
  g_array_unref (g->ops);
  g_object_unref (g->p);
}

/* A random sequence of ops over 8 vectors (1 input, scratch, 2 outputs) and two
 * matrices; reads only buffers written before, so the result is defined. */
static void
graph_build (Graph *g, guint queues, guint n, guint n_ops)
{
  g_autoptr(GError) error = NULL;
  gboolean defined[N_BUFFERS] = { TRUE };
  gint64 mshape[2] = { n, n };

  g->p = amk_program_new (queues);
  g->n = n;
  g->ops = g_array_new (FALSE, FALSE, sizeof (RefOp));
  for (guint i = 0; i < N_BUFFERS; i++)
    {
      g_autofree char *name = g_strdup_printf ("v%u", i);
      AmkBufferRole role = i == 0 ? AMK_BUFFER_ROLE_INPUT
                         : i >= N_BUFFERS - 2 ? AMK_BUFFER_ROLE_OUTPUT : AMK_BUFFER_ROLE_SCRATCH;
      g->buf[i] = test_add_buffer (g->p, name, AMK_DTYPE_F32, n, role);
      g->data[i] = g_new0 (float, n);
    }
  for (guint i = 0; i < n; i++)
    g->data[0][i] = (float) g_test_rand_double_range (-1, 1);
  for (guint m = 0; m < 2; m++)
    {
      g_autofree char *name = g_strdup_printf ("m%u", m);
      g->mat[m] = amk_program_add_buffer (g->p, name, AMK_DTYPE_F32, mshape, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      g_assert_no_error (error);
      g->w[m] = g_new (float, (gsize) n * n);
      for (guint i = 0; i < n * n; i++)
        g->w[m][i] = (float) g_test_rand_double_range (-1, 1) / sqrtf ((float) n);
      set_data (g->p, g->mat[m], g->w[m], (gsize) n * n * 4);
    }

  for (guint k = 0; k < n_ops; k++)
    {
      RefOp op = { 0 };
      gint from[N_BUFFERS];
      guint n_from = 0;

      for (guint i = 0; i < N_BUFFERS; i++)
        if (defined[i])
          from[n_from++] = i;
      op.dst = g_test_rand_int_range (1, N_BUFFERS);
      op.a = from[g_test_rand_int_range (0, n_from)];
      op.b = from[g_test_rand_int_range (0, n_from)];
      op.residual = -1;
      switch (g_test_rand_int_range (0, 4))
        {
        case 0:
          op.op = AMK_OPCODE_FILL;
          op.value = (float) g_test_rand_int_range (-3, 4);
          g_assert_cmpint (amk_program_op_fill (g->p, g->buf[op.dst], op.value, &error), >=, 0);
          break;
        case 1:
          op.op = AMK_OPCODE_COPY;
          if (op.a == op.dst)
            op.a = 0;
          g_assert_cmpint (amk_program_op_copy (g->p, g->buf[op.dst], g->buf[op.a], &error), >=, 0);
          break;
        case 2:
          op.op = AMK_OPCODE_ADD;
          g_assert_cmpint (amk_program_op_add (g->p, g->buf[op.dst], g->buf[op.a], g->buf[op.b], &error), >=, 0);
          break;
        default:
          op.op = AMK_OPCODE_MATVEC;
          if (op.b == op.dst)
            op.b = 0;
          op.a = g_test_rand_int_range (0, 2);
          if (defined[op.dst] && g_test_rand_bit ())
            op.residual = op.dst;
          g_assert_cmpint (amk_program_op_matvec (g->p, g->buf[op.dst], g->mat[op.a], g->buf[op.b], -1,
                                                  op.residual >= 0 ? g->buf[op.residual] : -1, -1, 0.0f,
                                                  &error), >=, 0);
          break;
        }
      g_assert_no_error (error);
      defined[op.dst] = TRUE;
      g_array_append_val (g->ops, op);
    }
  /* the outputs get something defined at the end */
  for (guint i = N_BUFFERS - 2; i < N_BUFFERS; i++)
    {
      RefOp op = { AMK_OPCODE_ADD, (gint) i, 0, 0, -1, 0 };
      for (guint j = 1; j < N_BUFFERS - 2; j++)
        if (defined[j])
          op.b = (gint) j;
      g_assert_cmpint (amk_program_op_add (g->p, g->buf[i], g->buf[op.a], g->buf[op.b], &error), >=, 0);
      g_array_append_val (g->ops, op);
    }
}

/* The plain sequential reference of the recorded ops. */
static void
graph_reference (Graph *g)
{
  g_autofree float *tmp = g_new (float, g->n);

  for (guint k = 0; k < g->ops->len; k++)
    {
      const RefOp *op = &g_array_index (g->ops, RefOp, k);
      float *d = g->data[op->dst];

      for (guint i = 0; i < g->n; i++)
        switch (op->op)
          {
          case AMK_OPCODE_FILL:
            tmp[i] = op->value;
            break;
          case AMK_OPCODE_COPY:
            tmp[i] = g->data[op->a][i];
            break;
          case AMK_OPCODE_ADD:
            tmp[i] = g->data[op->a][i] + g->data[op->b][i];
            break;
          default:
            {
              double acc = 0;
              for (guint c = 0; c < g->n; c++)
                acc += (double) g->w[op->a][(gsize) i * g->n + c] * g->data[op->b][c];
              tmp[i] = (float) acc + (op->residual >= 0 ? d[i] : 0.0f);
            }
          }
      memcpy (d, tmp, g->n * sizeof (float));
    }
}

static void
test_random_graphs (void)
{
  for (guint round = 0; round < 12; round++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkCpuExecutor) ex = NULL;
      guint queues = g_test_rand_int_range (1, 20), n = 8 * g_test_rand_int_range (1, 40);
      Graph g = { 0 };

      graph_build (&g, queues, n, g_test_rand_int_range (1, 25));
      g_assert_true (amk_program_compile (g.p, &error));
      g_assert_no_error (error);
      graph_reference (&g);

      ex = amk_cpu_executor_new (g.p, &error);
      g_assert_no_error (error);
      upload (ex, g.buf[0], g.data[0], n * 4);
      amk_cpu_executor_set_threads (ex, 1);   /* the seeded scheduler */
      for (guint64 seed = 0; seed < 4; seed++)
        {
          amk_cpu_executor_set_seed (ex, seed * 7919 + round);
          g_assert_true (amk_cpu_executor_run (ex, &error));
          g_assert_no_error (error);
          for (guint i = N_BUFFERS - 2; i < N_BUFFERS; i++)
            {
              g_autoptr(GBytes) out = amk_cpu_executor_download (ex, g.buf[i], &error);
              const float *got = g_bytes_get_data (out, NULL);
              double diff = 0, norm = 0;

              for (guint e = 0; e < n; e++)
                {
                  diff += ((double) got[e] - g.data[i][e]) * ((double) got[e] - g.data[i][e]);
                  norm += (double) g.data[i][e] * g.data[i][e];
                }
              if (sqrt (diff) > 1e-5 * sqrt (norm) + 1e-6)
                g_error ("round %u (%u queues, n %u, %u ops) seed %" G_GUINT64_FORMAT ": output %u differs: %g vs norm %g",
                         round, queues, n, g.ops->len, seed, i, sqrt (diff), sqrt (norm));
            }
        }
      graph_free (&g);
    }
}

/* Which queues hold instructions of `opcode` writing `buffer`. */
static guint
queues_used (AmkProgram *p, guint opcode, gint buffer)
{
  guint used = 0;

  for (guint q = 0; q < p->num_queues; q++)
    {
      GArray *queue = g_ptr_array_index (p->queues, q);
      for (guint k = 0; k < queue->len; k++)
        {
          const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t,
                                                         g_array_index (queue, gint32, k));
          if (ins->opcode == opcode && ins->buffers[0] == buffer)
            {
              used++;
              break;
            }
        }
    }
  return used;
}

/* The rule: a matvec with at least 16 rows per queue uses every queue. */
static void
test_matvec_spreads (void)
{
  const guint queues = 132;
  const gint64 shapes[][2] = { { 16 * 132, 64 }, { 4096, 256 }, { 16 * 132 + 13, 128 }, { 32768, 64 } };

  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkProgram) p = amk_program_new (queues);
      gint w = amk_program_add_buffer (p, "w", AMK_DTYPE_BF16, shapes[s], 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, shapes[s][1], AMK_BUFFER_ROLE_INPUT);
      gint y = test_add_buffer (p, "y", AMK_DTYPE_F32, shapes[s][0], AMK_BUFFER_ROLE_OUTPUT);

      g_assert_cmpint (amk_program_op_matvec (p, y, w, x, -1, -1, -1, 0, &error), >=, 0);
      g_assert_true (amk_program_compile (p, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (queues_used (p, AMK_OPCODE_MATVEC, y), ==, queues);
    }
}

/* A matvec whose row tiles fill few of the queues (SmolLM2's 576-row o and down
 * projections on 132 queues) is cut into split-K slices that add onto its output when
 * that is its own f32 residual: the slices of a row cover its columns exactly once, more
 * queues stream, and the CPU executor computes what fp64 does. Written to another
 * output, the same op is not split. */
static void
test_matvec_split_k (void)
{
  const guint queues = 132, rows = 576, k = 1536;
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(GBytes) out = NULL;
  g_autofree float *w = g_new (float, (gsize) rows * k), *x = g_new (float, k);
  g_autofree float *y0 = g_new (float, rows);
  g_autofree guint *cover = g_new0 (guint, rows);
  gint64 shape[2] = { rows, k };
  const float *got;
  double diff = 0, norm = 0;
  guint split_tiles = 0;

  for (guint in_place = 0; in_place < 2; in_place++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (queues);
      gint wb = amk_program_add_buffer (p, "w", AMK_DTYPE_F32, shape, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      gint xb = test_add_buffer (p, "x", AMK_DTYPE_F32, k, AMK_BUFFER_ROLE_INPUT);
      gint yb = test_add_buffer (p, "y", AMK_DTYPE_F32, rows, AMK_BUFFER_ROLE_STATE);

      for (gsize i = 0; i < (gsize) rows * k; i++)
        w[i] = (float) g_test_rand_double_range (-1, 1);
      for (guint i = 0; i < k; i++)
        x[i] = (float) g_test_rand_double_range (-1, 1);
      for (guint i = 0; i < rows; i++)
        y0[i] = (float) g_test_rand_double_range (-1, 1);
      set_data (p, wb, w, (gsize) rows * k * 4);
      g_assert_cmpint (amk_program_op_matvec (p, yb, wb, xb, -1, in_place ? yb : -1, -1, 0, &error), >=, 0);
      g_assert_true (amk_program_compile (p, &error));
      g_assert_no_error (error);

      split_tiles = 0;
      memset (cover, 0, rows * sizeof (guint));
      for (guint i = 0; i < p->instructions->len; i++)
        {
          const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t, i);
          if (ins->opcode != AMK_OPCODE_MATVEC)
            continue;
          split_tiles += ins->params.matvec.k_len > 0;
          for (gint r = ins->params.matvec.row0; r < ins->params.matvec.row0 + ins->params.matvec.rows; r++)
            cover[r] += ins->params.matvec.k_len > 0 ? (guint) ins->params.matvec.k_len : k;
        }
      for (guint r = 0; r < rows; r++)
        g_assert_cmpuint (cover[r], ==, k);
      if (!in_place)
        {
          g_assert_cmpuint (split_tiles, ==, 0);
          continue;
        }
      /* 36 row tiles of 16 rows, each in 3 slices of 512 columns */
      g_assert_cmpuint (split_tiles, ==, 108);
      g_assert_cmpuint (queues_used (p, AMK_OPCODE_MATVEC, yb), ==, 108);

      ex = amk_cpu_executor_new (p, &error);
      g_assert_no_error (error);
      upload (ex, xb, x, k * 4);
      upload (ex, yb, y0, rows * 4);
      g_assert_true (amk_cpu_executor_run (ex, &error));
      out = amk_cpu_executor_download (ex, yb, &error);
      g_assert_no_error (error);
      got = g_bytes_get_data (out, NULL);
      for (guint r = 0; r < rows; r++)
        {
          double want = y0[r];
          for (guint c = 0; c < k; c++)
            want += (double) w[(gsize) r * k + c] * x[c];
          diff += (got[r] - want) * (got[r] - want);
          norm += want * want;
        }
      g_assert_cmpfloat (sqrt (diff), <=, 1e-5 * sqrt (norm));
    }
}

/* The waits of every instruction of `opcode` writing `buffer` on the counters that
 * instructions writing `producer` signal: how many, and their targets. */
static void
waits_on (AmkProgram *p, guint opcode, gint buffer, gint producer, GArray *targets)
{
  g_autofree gint *signals = g_new0 (gint, p->counter_names->len + 1);

  for (guint i = 0; i < p->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t, i);
      if (ins->buffers[0] == producer && ins->signal.counter >= 0)
        signals[ins->signal.counter]++;
    }
  g_array_set_size (targets, 0);
  for (guint i = 0; i < p->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t, i);
      if (ins->opcode != opcode || ins->buffers[0] != buffer)
        continue;
      for (guint w = 0; w < ins->n_waits; w++)
        if (signals[ins->waits[w].counter] > 0)
          {
            /* a group's wait is for all of its tiles */
            g_assert_cmpuint (ins->waits[w].target, ==, (guint) signals[ins->waits[w].counter]);
            g_array_append_val (targets, ins->waits[w].target);
          }
    }
}

/* Counters per group of producer tiles: a split-K slice of a matvec waits only for the
 * tiles that wrote its columns of x (a producer's 32 tiles in 4 groups of 8, one per
 * slice), and computes what a sequential run does; a matvec reading all of x waits for
 * the whole producer on one counter. */
static void
test_group_counters (void)
{
  const guint queues = 32, k = 256, mid = 512, rows = 64;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) targets = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autofree float *w1 = g_new (float, (gsize) mid * k), *w2 = g_new (float, (gsize) rows * mid);
  g_autofree float *x = g_new (float, k), *y0 = g_new (float, rows), *a = g_new (float, mid);

  for (gsize i = 0; i < (gsize) mid * k; i++)
    w1[i] = (float) g_test_rand_double_range (-1, 1);
  for (gsize i = 0; i < (gsize) rows * mid; i++)
    w2[i] = (float) g_test_rand_double_range (-1, 1);
  for (guint i = 0; i < k; i++)
    x[i] = (float) g_test_rand_double_range (-1, 1);
  for (guint i = 0; i < rows; i++)
    y0[i] = (float) g_test_rand_double_range (-1, 1);
  for (guint r = 0; r < mid; r++)
    {
      double s = 0;
      for (guint c = 0; c < k; c++)
        s += (double) w1[(gsize) r * k + c] * x[c];
      a[r] = (float) s;
    }

  for (guint in_place = 0; in_place < 2; in_place++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (queues);
      gint64 s1[2] = { mid, k }, s2[2] = { rows, mid };
      gint wb1 = amk_program_add_buffer (p, "w1", AMK_DTYPE_F32, s1, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      gint wb2 = amk_program_add_buffer (p, "w2", AMK_DTYPE_F32, s2, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      gint xb = test_add_buffer (p, "x", AMK_DTYPE_F32, k, AMK_BUFFER_ROLE_INPUT);
      gint ab = test_add_buffer (p, "a", AMK_DTYPE_F32, mid, AMK_BUFFER_ROLE_SCRATCH);
      gint yb = test_add_buffer (p, "y", AMK_DTYPE_F32, rows, AMK_BUFFER_ROLE_STATE);
      g_autoptr(AmkCpuExecutor) ex = NULL;
      g_autoptr(GBytes) out = NULL;
      const float *got;
      double diff = 0, norm = 0;

      set_data (p, wb1, w1, (gsize) mid * k * 4);
      set_data (p, wb2, w2, (gsize) rows * mid * 4);
      g_assert_cmpint (amk_program_op_matvec (p, ab, wb1, xb, -1, -1, -1, 0, &error), >=, 0);
      g_assert_cmpint (amk_program_op_matvec (p, yb, wb2, ab, -1, in_place ? yb : -1, -1, 0, &error), >=, 0);
      g_assert_true (amk_program_compile (p, &error));
      g_assert_no_error (error);

      waits_on (p, AMK_OPCODE_MATVEC, yb, ab, targets);
      if (in_place)
        {
          /* 4 row tiles, each in 4 slices of 128 columns: 8 tiles of a */
          g_assert_cmpuint (targets->len, ==, 16);
          for (guint i = 0; i < targets->len; i++)
            g_assert_cmpuint (g_array_index (targets, guint, i), ==, 8);
        }
      else
        {
          g_assert_cmpuint (targets->len, >, 0);
          for (guint i = 0; i < targets->len; i++)
            g_assert_cmpuint (g_array_index (targets, guint, i), ==, 32);
        }

      for (guint seed = 0; seed < 4; seed++)
        {
          ex = amk_cpu_executor_new (p, &error);
          g_assert_no_error (error);
          amk_cpu_executor_set_threads (ex, 1);   /* the seeded scheduler */
          amk_cpu_executor_set_seed (ex, (guint64) seed);
          upload (ex, xb, x, k * 4);
          upload (ex, yb, y0, rows * 4);
          g_assert_true (amk_cpu_executor_run (ex, &error));
          g_assert_no_error (error);
          out = amk_cpu_executor_download (ex, yb, &error);
          g_assert_no_error (error);
          got = g_bytes_get_data (out, NULL);
          diff = norm = 0;
          for (guint r = 0; r < rows; r++)
            {
              double want = in_place ? y0[r] : 0;
              for (guint c = 0; c < mid; c++)
                want += (double) w2[(gsize) r * mid + c] * a[c];
              diff += (got[r] - want) * (got[r] - want);
              norm += want * want;
            }
          g_assert_cmpfloat (sqrt (diff), <=, 1e-5 * sqrt (norm));
          g_clear_pointer (&out, g_bytes_unref);
          g_clear_object (&ex);
        }
    }
}

/* Sibling matvecs (one x, one fused norm: a layer's q, k, v, or its gate and up) share
 * the queues in proportion to their rows: every queue runs exactly one tile of the
 * group, none runs two one after the other. A matvec reading another x stays alone. */
static void
test_matvec_siblings (void)
{
  const guint queues = 132;
  const gint64 groups[][3] = { { 2048, 512, 512 }, { 8192, 8192, 0 } };

  for (guint s = 0; s < G_N_ELEMENTS (groups); s++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkProgram) p = amk_program_new (queues);
      gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 2048, AMK_BUFFER_ROLE_INPUT);
      gint g = test_add_buffer (p, "g", AMK_DTYPE_BF16, 2048, AMK_BUFFER_ROLE_CONSTANT);
      gint ys[3] = { -1, -1, -1 }, tiles = 0;

      for (guint m = 0; m < 3 && groups[s][m] > 0; m++)
        {
          gint64 shape[2] = { groups[s][m], 2048 };
          g_autofree char *wn = g_strdup_printf ("w%u", m), *yn = g_strdup_printf ("y%u", m);
          gint w = amk_program_add_buffer (p, wn, AMK_DTYPE_BF16, shape, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
          ys[m] = test_add_buffer (p, yn, AMK_DTYPE_F32, groups[s][m], AMK_BUFFER_ROLE_OUTPUT);
          g_assert_cmpint (amk_program_op_matvec (p, ys[m], w, x, -1, -1, g, 1e-5f, &error), >=, 0);
        }
      g_assert_true (amk_program_compile (p, &error));
      g_assert_no_error (error);
      for (guint q = 0; q < queues; q++)
        {
          GArray *queue = g_ptr_array_index (p->queues, q);
          guint here = 0;
          for (guint k = 0; k < queue->len; k++)
            here += g_array_index (p->instructions, amk_instruction_t,
                                   g_array_index (queue, gint32, k)).opcode == AMK_OPCODE_MATVEC;
          g_assert_cmpuint (here, ==, 1);
          tiles += here;
        }
      g_assert_cmpint (tiles, ==, queues);
      /* each op's share of the queues follows its rows */
      for (guint m = 0; m < 3 && ys[m] >= 0; m++)
        g_assert_cmpuint (queues_used (p, AMK_OPCODE_MATVEC, ys[m]), ==,
                          queues * groups[s][m] / (groups[s][0] + groups[s][1] + groups[s][2]));
    }
}

/* Counts the instructions of `opcode`, and of those the ones naming `n_buffers` buffers. */
static guint
count_instructions (AmkProgram *p, guint opcode, guint n_buffers, guint *with_n)
{
  guint n = 0;

  *with_n = 0;
  for (guint i = 0; i < p->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t, i);
      n += ins->opcode == opcode;
      *with_n += ins->opcode == opcode && ins->n_buffers == n_buffers;
    }
  return n;
}

/* A SILU_MUL whose output (F32 scratch, reused by the next layer) only the next MATVEC
 * reads fuses into it: no SILU_MUL instruction, the MATVEC reads gate and up (seven
 * buffers); the result equals the plain computation. When the caller can see the output
 * (an OUTPUT buffer) nothing is fused. Two layers, on the CPU executor against a double
 * reference, random data. */
static void
test_silu_fused (void)
{
  const guint h = 40, f = 96, queues = 6, layers = 2;

  for (guint visible = 0; visible < 2; visible++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkProgram) p = amk_program_new (queues);
      g_autoptr(AmkCpuExecutor) ex = NULL;
      g_autoptr(GBytes) out = NULL;
      gint64 s_up[2] = { f, h }, s_down[2] = { h, f };
      g_autofree float *x = g_new (float, h), *wg = g_new (float, f * h), *wu = g_new (float, f * h);
      g_autofree float *wd = g_new (float, h * f), *ref = g_new (float, h);
      gint bx = test_add_buffer (p, "x", AMK_DTYPE_F32, h, AMK_BUFFER_ROLE_STATE);
      gint bg = test_add_buffer (p, "gate", AMK_DTYPE_F32, f, AMK_BUFFER_ROLE_SCRATCH);
      gint bu = test_add_buffer (p, "up", AMK_DTYPE_F32, f, AMK_BUFFER_ROLE_SCRATCH);
      gint ba = test_add_buffer (p, "act", AMK_DTYPE_F32, f, visible ? AMK_BUFFER_ROLE_OUTPUT : AMK_BUFFER_ROLE_SCRATCH);
      gint mg = amk_program_add_buffer (p, "wg", AMK_DTYPE_F32, s_up, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      gint mu = amk_program_add_buffer (p, "wu", AMK_DTYPE_F32, s_up, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      gint md = amk_program_add_buffer (p, "wd", AMK_DTYPE_F32, s_down, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
      guint with7, silu;
      double diff = 0, norm = 0;

      for (guint i = 0; i < h; i++)
        x[i] = (float) g_test_rand_double_range (-1, 1);
      for (guint i = 0; i < f * h; i++)
        {
          wg[i] = (float) g_test_rand_double_range (-1, 1);
          wu[i] = (float) g_test_rand_double_range (-1, 1);
          wd[i] = (float) g_test_rand_double_range (-1, 1);
        }
      set_data (p, mg, wg, f * h * 4);
      set_data (p, mu, wu, f * h * 4);
      set_data (p, md, wd, f * h * 4);
      for (guint l = 0; l < layers; l++)
        {
          g_assert_cmpint (amk_program_op_matvec (p, bg, mg, bx, -1, -1, -1, 0, &error), >=, 0);
          g_assert_cmpint (amk_program_op_matvec (p, bu, mu, bx, -1, -1, -1, 0, &error), >=, 0);
          g_assert_cmpint (amk_program_op_silu_mul (p, ba, bg, bu, &error), >=, 0);
          g_assert_cmpint (amk_program_op_matvec (p, bx, md, ba, -1, bx, -1, 0, &error), >=, 0);
        }
      g_assert_true (amk_program_compile (p, &error));
      g_assert_no_error (error);

      silu = count_instructions (p, AMK_OPCODE_SILU_MUL, 3, &with7);
      g_assert_cmpuint (silu, ==, visible ? layers * MIN (queues, MAX (1, f / 256)) : 0);
      count_instructions (p, AMK_OPCODE_MATVEC, 7, &with7);
      g_assert_cmpuint (with7, ==, visible ? 0 : layers * MIN (queues, h / 16));

      for (guint r = 0; r < h; r++)
        ref[r] = x[r];
      for (guint l = 0; l < layers; l++)
        {
          g_autofree double *act = g_new0 (double, f);
          for (guint c = 0; c < f; c++)
            {
              double g = 0, u = 0;
              for (guint k = 0; k < h; k++)
                {
                  g += (double) wg[c * h + k] * ref[k];
                  u += (double) wu[c * h + k] * ref[k];
                }
              act[c] = g / (1 + exp (-g)) * u;
            }
          for (guint r = 0; r < h; r++)
            {
              double acc = ref[r];
              for (guint c = 0; c < f; c++)
                acc += (double) wd[r * f + c] * act[c];
              ref[r] = (float) acc;
            }
        }
      ex = amk_cpu_executor_new (p, &error);
      g_assert_no_error (error);
      upload (ex, bx, x, h * 4);
      g_assert_true (amk_cpu_executor_run (ex, &error));
      g_assert_no_error (error);
      out = amk_cpu_executor_download (ex, bx, &error);
      g_assert_no_error (error);
      for (guint r = 0; r < h; r++)
        {
          const double got = ((const float *) g_bytes_get_data (out, NULL))[r];
          diff += (got - ref[r]) * (got - ref[r]);
          norm += (double) ref[r] * ref[r];
        }
      g_assert_cmpfloat (sqrt (diff), <=, 1e-5 * sqrt (norm));
    }
}

/* A layer-like chain: norm + matvec, residual, a wide matvec, an add, a matvec back. */
static void
test_makespan_near_bound (void)
{
  const guint queues = 132;
  const gint64 h = 2048, f = 8192;
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkProgram) p = amk_program_new (queues);
  gint64 s1[2] = { h, h }, s2[2] = { f, h }, s3[2] = { h, f };
  gint wq = amk_program_add_buffer (p, "wq", AMK_DTYPE_BF16, s1, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
  gint wu = amk_program_add_buffer (p, "wu", AMK_DTYPE_BF16, s2, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
  gint wd = amk_program_add_buffer (p, "wd", AMK_DTYPE_BF16, s3, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
  gint g = test_add_buffer (p, "g", AMK_DTYPE_BF16, h, AMK_BUFFER_ROLE_CONSTANT);
  gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, h, AMK_BUFFER_ROLE_STATE);
  gint a = test_add_buffer (p, "a", AMK_DTYPE_F32, h, AMK_BUFFER_ROLE_SCRATCH);
  gint u = test_add_buffer (p, "u", AMK_DTYPE_F32, f, AMK_BUFFER_ROLE_SCRATCH);
  gint v = test_add_buffer (p, "v", AMK_DTYPE_F32, f, AMK_BUFFER_ROLE_SCRATCH);
  double makespan, total, path, bound;
  g_autofree char *report = NULL;

  g_assert_cmpint (amk_program_op_matvec (p, a, wq, x, -1, -1, g, 1e-5f, &error), >=, 0);
  g_assert_cmpint (amk_program_op_add (p, x, x, a, &error), >=, 0);
  g_assert_cmpint (amk_program_op_matvec (p, u, wu, x, -1, -1, g, 1e-5f, &error), >=, 0);
  g_assert_cmpint (amk_program_op_add (p, v, u, u, &error), >=, 0);
  g_assert_cmpint (amk_program_op_matvec (p, x, wd, v, -1, x, -1, 0, &error), >=, 0);
  g_assert_true (amk_program_compile (p, &error));
  g_assert_no_error (error);

  g_assert_true (amk_program_estimate_schedule (p, &makespan, &total, &path));
  bound = MAX (total / queues, path);
  report = amk_program_get_schedule_report (p);
  g_test_message ("%s", report);
  g_assert_cmpfloat (makespan, <=, 1.15 * bound);
  g_assert_cmpfloat (makespan, >=, bound * 0.999);
  /* u (f32, 32 KiB) and a may share arena space: a is dead once x absorbed it */
  g_assert_cmpuint (amk_program_get_scratch_size (p), <, (guint64) (h + 2 * f) * 4);
}

static void
test_op_errors (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  gint64 ws[2] = { 8, 12 };
  GError *error = NULL;
  gint w = amk_program_add_buffer (p, "w", AMK_DTYPE_F32, ws, 2, AMK_BUFFER_ROLE_CONSTANT, NULL);
  gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 12, AMK_BUFFER_ROLE_INPUT);
  gint y = test_add_buffer (p, "y", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);
  gint z = test_add_buffer (p, "z", AMK_DTYPE_BF16, 8, AMK_BUFFER_ROLE_OUTPUT);

  g_assert_cmpint (amk_program_op_copy (p, y, z, &error), ==, -1);       /* dtype */
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_op_fill (p, w, 1.0f, &error), ==, -1);    /* constant */
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_op_add (p, y, y, 99, &error), ==, -1);    /* no such buffer */
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_op_matvec (p, y, w, z, -1, -1, -1, 0, &error), ==, -1); /* x of 8, K is 12 */
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_op_matvec (p, x, w, x, -1, -1, -1, 0, &error), ==, -1); /* y is x */
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_op_matvec (p, y, w, x, -1, y, -1, 0, &error), >=, 0);   /* y += W x */
  g_assert_no_error (error);
}

static void
test_compile_errors (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  GError *error = NULL;
  gint y = test_add_buffer (p, "y", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);

  g_assert_cmpint (amk_program_op_fill (p, y, 2.0f, &error), >=, 0);
  g_assert_true (amk_program_compile (p, &error));
  g_assert_false (amk_program_compile (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_op_fill (p, y, 2.0f, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  {
    g_autoptr(AmkProgram) raw = amk_program_new (1);
    gint b = test_add_buffer (raw, "b", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);
    g_assert_cmpint (amk_program_add_instruction (raw, 0, AMK_OPCODE_NOP, NULL, 0, &error), >=, 0);
    g_assert_cmpint (amk_program_op_fill (raw, b, 1.0f, &error), >=, 0);
    g_assert_false (amk_program_compile (raw, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
    g_clear_error (&error);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/compiler/random-graphs", test_random_graphs);
  g_test_add_func ("/amk/compiler/matvec-spreads", test_matvec_spreads);
  g_test_add_func ("/amk/compiler/matvec-siblings", test_matvec_siblings);
  g_test_add_func ("/amk/compiler/matvec-split-k", test_matvec_split_k);
  g_test_add_func ("/amk/compiler/group-counters", test_group_counters);
  g_test_add_func ("/amk/compiler/silu-fused", test_silu_fused);
  g_test_add_func ("/amk/compiler/makespan-near-bound", test_makespan_near_bound);
  g_test_add_func ("/amk/compiler/op-errors", test_op_errors);
  g_test_add_func ("/amk/compiler/compile-errors", test_compile_errors);

  return g_test_run ();
}

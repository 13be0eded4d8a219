/* test-attention-rows.c: the many-token ops ROPE_ROWS, ATTN_ROWS and EMBED of many
 * tokens: every error of their op API, every refusal of their verifier checks, and how
 * the compiler cuts them into tiles. Their numbers are checked against numpy in
 * tests/python/test_attention_rows.py.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

#define D    8
#define NQ   4
#define NKV  2
#define M    3
#define CTX  4
#define W    ((NQ + 2 * NKV) * D)

/* A program with what both ops take: qkv [M, W], caches [CTX, NKV D], pos and seq [M],
 * norms [D], out [M, NQ D]. */
typedef struct {
  AmkProgram *p;
  gint qkv, kc, vc, pos, seq, qn, kn, out;
} Rig;

static gint
add_2d (AmkProgram *p, const char *name, AmkDType dtype, gint64 rows, gint64 cols, AmkBufferRole role)
{
  g_autoptr(GError) error = NULL;
  gint64 shape[2] = { rows, cols };
  gint index = amk_program_add_buffer (p, name, dtype, shape, 2, role, &error);

  g_assert_no_error (error);
  return index;
}

static Rig
rig_new (guint queues)
{
  Rig r;

  r.p = amk_program_new (queues);
  r.qkv = add_2d (r.p, "qkv", AMK_DTYPE_F32, M, W, AMK_BUFFER_ROLE_INPUT);
  r.kc = add_2d (r.p, "k cache", AMK_DTYPE_BF16, CTX, NKV * D, AMK_BUFFER_ROLE_INPUT);
  r.vc = add_2d (r.p, "v cache", AMK_DTYPE_BF16, CTX, NKV * D, AMK_BUFFER_ROLE_INPUT);
  r.pos = test_add_buffer (r.p, "pos", AMK_DTYPE_I32, M, AMK_BUFFER_ROLE_INPUT);
  r.seq = test_add_buffer (r.p, "seq", AMK_DTYPE_I32, M, AMK_BUFFER_ROLE_INPUT);
  r.qn = test_add_buffer (r.p, "q norm", AMK_DTYPE_F32, D, AMK_BUFFER_ROLE_INPUT);
  r.kn = test_add_buffer (r.p, "k norm", AMK_DTYPE_BF16, D, AMK_BUFFER_ROLE_INPUT);
  r.out = add_2d (r.p, "out", AMK_DTYPE_F32, M, NQ * D, AMK_BUFFER_ROLE_OUTPUT);
  return r;
}

/* The arguments of op_rope_rows: the rig's buffers, a plain RoPE, Qwen3's norms. */
typedef struct {
  gint qkv, kc, vc, pos, seq, qn, kn;
  guint d, nq, nkv;
  gfloat eps, theta, factor;
} RopeArgs;

static RopeArgs
rope_defaults (const Rig *r)
{
  return (RopeArgs) { r->qkv, r->kc, r->vc, r->pos, r->seq, r->qn, r->kn, D, NQ, NKV, 1e-6f, 10000.0f, 0.0f };
}

static gint
rope (Rig *r, RopeArgs a, GError **error)
{
  return amk_program_op_rope_rows (r->p, a.qkv, a.kc, a.vc, a.pos, a.seq, a.qn, a.kn, a.d, a.nq, a.nkv,
                                   a.eps, a.theta, a.factor, 1.0f, 4.0f, 8192, error);
}

/* op_rope_rows with one argument changed fails with `code`. */
#define EXPECT_ROPE_ERROR(field, value, code) \
  G_STMT_START { \
    RopeArgs a_ = rope_defaults (&r); \
    a_.field = (value); \
    expect_rope_error (&r, a_, (code)); \
  } G_STMT_END

static void
expect_rope_error (Rig *r, RopeArgs a, gint code)
{
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (rope (r, a, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, code);
  test_assert_message_has (error, "ROPE_ROWS");
}

static void
test_rope_rows_api (void)
{
  Rig r = rig_new (2);
  g_autoptr(AmkProgram) owner = r.p;
  g_autoptr(GError) error = NULL;
  gint cst = add_2d (r.p, "constant qkv", AMK_DTYPE_F32, M, W, AMK_BUFFER_ROLE_CONSTANT);
  gint pos4 = test_add_buffer (r.p, "pos4", AMK_DTYPE_I32, M + 1, AMK_BUFFER_ROLE_INPUT);
  gint odd = test_add_buffer (r.p, "odd", AMK_DTYPE_F32, W + 1, AMK_BUFFER_ROLE_INPUT);
  gint c3 = add_2d (r.p, "wide cache", AMK_DTYPE_BF16, CTX, NKV * D + 2, AMK_BUFFER_ROLE_INPUT);
  gint qn7 = test_add_buffer (r.p, "norm7", AMK_DTYPE_F32, D - 1, AMK_BUFFER_ROLE_INPUT);

  EXPECT_ROPE_ERROR (d, 7, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (nq, 3, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (d, 258, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (qkv, 99, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  EXPECT_ROPE_ERROR (qkv, odd, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (pos, pos4, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (seq, pos4, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (seq, 99, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  EXPECT_ROPE_ERROR (kc, 99, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  EXPECT_ROPE_ERROR (vc, 99, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  EXPECT_ROPE_ERROR (vc, c3, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (kc, r.out, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (vc, r.kc, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (qkv, cst, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (kn, -1, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (qn, qn7, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (eps, -1.0f, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (eps, NAN, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (theta, -5.0f, AMK_PROGRAM_ERROR_INVALID);
  EXPECT_ROPE_ERROR (factor, -1.0f, AMK_PROGRAM_ERROR_INVALID);

  /* the good ones: with and without norms and seq */
  g_assert_cmpint (rope (&r, rope_defaults (&r), &error), ==, 0);
  g_assert_no_error (error);
  {
    RopeArgs a = rope_defaults (&r);
    a.seq = a.qn = a.kn = -1;
    a.factor = 8.0f;
    g_assert_cmpint (rope (&r, a, &error), ==, 1);
    g_assert_no_error (error);
  }
  g_assert_true (amk_program_compile (r.p, &error));
  g_assert_no_error (error);
  /* once compiled, no more */
  expect_rope_error (&r, rope_defaults (&r), AMK_PROGRAM_ERROR_INVALID);
}

static void
expect_attn_error (Rig *r, gint out, gint qkv, gfloat scale, gint code)
{
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (amk_program_op_attention_rows (r->p, out, qkv, r->kc, r->vc, r->pos, r->seq, D, NQ,
                                                  NKV, scale, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, code);
  test_assert_message_has (error, "ATTN_ROWS");
}

static void
test_attn_rows_api (void)
{
  Rig r = rig_new (2);
  g_autoptr(AmkProgram) owner = r.p;
  g_autoptr(GError) error = NULL;
  gint cst = add_2d (r.p, "constant out", AMK_DTYPE_F32, M, NQ * D, AMK_BUFFER_ROLE_CONSTANT);
  gint small = add_2d (r.p, "small out", AMK_DTYPE_F32, M - 1, NQ * D, AMK_BUFFER_ROLE_OUTPUT);

  expect_attn_error (&r, r.out, 99, 0.5f, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  expect_attn_error (&r, 99, r.qkv, 0.5f, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  expect_attn_error (&r, small, r.qkv, 0.5f, AMK_PROGRAM_ERROR_INVALID);
  expect_attn_error (&r, cst, r.qkv, 0.5f, AMK_PROGRAM_ERROR_INVALID);
  expect_attn_error (&r, r.out, r.qkv, 0.0f, AMK_PROGRAM_ERROR_INVALID);
  expect_attn_error (&r, r.out, r.qkv, INFINITY, AMK_PROGRAM_ERROR_INVALID);

  g_assert_cmpint (amk_program_op_attention_rows (r.p, r.out, r.qkv, r.kc, r.vc, r.pos, -1, D, NQ, NKV,
                                                  0.5f, &error), ==, 0);
  g_assert_no_error (error);
  g_assert_true (amk_program_compile (r.p, &error));
  g_assert_no_error (error);
  expect_attn_error (&r, r.out, r.qkv, 0.5f, AMK_PROGRAM_ERROR_INVALID);
}

/* The output is one of the caches (an f32 one of the very size): the op API's check. */
static void
test_attn_rows_api_out_is_cache (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  gint qkv = add_2d (p, "qkv", AMK_DTYPE_F32, 2, W, AMK_BUFFER_ROLE_INPUT);
  gint kc = add_2d (p, "k cache", AMK_DTYPE_F32, 4, NKV * D, AMK_BUFFER_ROLE_INPUT);
  gint vc = add_2d (p, "v cache", AMK_DTYPE_F32, 4, NKV * D, AMK_BUFFER_ROLE_INPUT);
  gint pos = test_add_buffer (p, "pos", AMK_DTYPE_I32, 2, AMK_BUFFER_ROLE_INPUT);

  /* 2 rows × 4 × 8 = 4 positions × 2 × 8 */
  g_assert_cmpint (amk_program_op_attention_rows (p, kc, qkv, kc, vc, pos, -1, D, NQ, NKV, 0.5f, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
}

static void
expect_embed_error (AmkProgram *p, gint out, gint table, gint tokens, gint code)
{
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (amk_program_op_embed_rows (p, out, table, tokens, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, code);
  test_assert_message_has (error, "EMBED");
}

static void
test_embed_rows_api (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  g_autoptr(GError) error = NULL;
  gint table = add_2d (p, "table", AMK_DTYPE_BF16, 10, 16, AMK_BUFFER_ROLE_CONSTANT);
  gint flat = test_add_buffer (p, "flat", AMK_DTYPE_BF16, 160, AMK_BUFFER_ROLE_CONSTANT);
  gint tokens = test_add_buffer (p, "tokens", AMK_DTYPE_I32, 3, AMK_BUFFER_ROLE_INPUT);
  gint ftokens = test_add_buffer (p, "float tokens", AMK_DTYPE_F32, 3, AMK_BUFFER_ROLE_INPUT);
  gint out = add_2d (p, "out", AMK_DTYPE_F32, 3, 16, AMK_BUFFER_ROLE_OUTPUT);
  gint short_out = add_2d (p, "short out", AMK_DTYPE_F32, 2, 16, AMK_BUFFER_ROLE_OUTPUT);
  gint cst = add_2d (p, "constant out", AMK_DTYPE_F32, 3, 16, AMK_BUFFER_ROLE_CONSTANT);

  expect_embed_error (p, out, 99, tokens, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  expect_embed_error (p, out, table, 99, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  expect_embed_error (p, out, flat, tokens, AMK_PROGRAM_ERROR_INVALID);
  expect_embed_error (p, out, table, ftokens, AMK_PROGRAM_ERROR_INVALID);
  expect_embed_error (p, short_out, table, tokens, AMK_PROGRAM_ERROR_INVALID);
  expect_embed_error (p, 99, table, tokens, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  expect_embed_error (p, cst, table, tokens, AMK_PROGRAM_ERROR_INVALID);

  g_assert_cmpint (amk_program_op_embed_rows (p, out, table, tokens, &error), ==, 0);
  g_assert_no_error (error);
  g_assert_true (amk_program_compile (p, &error));
  g_assert_no_error (error);
  expect_embed_error (p, out, table, tokens, AMK_PROGRAM_ERROR_INVALID);
}

/* ---- the verifier ------------------------------------------------------------------- */

static gint
raw_rope_rows (Rig *r)
{
  amk_instruction_t ins = test_raw (AMK_ABI_OP_ROPE_ROWS);
  amk_rope_rows_params_t *p = &ins.params.rope_rows;

  ins.n_buffers = 7;
  memcpy (ins.buffers, (gint32[]) { r->qkv, r->kc, r->vc, r->pos, r->seq, r->qn, r->kn }, 7 * sizeof (gint32));
  *p = (amk_rope_rows_params_t) { .shape = { D, NQ, NKV, CTX }, .row0 = 1, .n_rows = 2,
                                  .freq = { 10000.0f, 8.0f, 1.0f, 4.0f, 8192 }, .eps = 1e-6f };
  return test_append_raw (r->p, 0, &ins);
}

static gint
raw_attn_rows (Rig *r)
{
  amk_instruction_t ins = test_raw (AMK_ABI_OP_ATTN_ROWS);

  ins.n_buffers = 6;
  memcpy (ins.buffers, (gint32[]) { r->out, r->qkv, r->kc, r->vc, r->pos, AMK_NO_BUFFER }, 6 * sizeof (gint32));
  ins.params.attn_rows = (amk_attn_rows_params_t) { .shape = { D, NQ, NKV, CTX }, .kv_head = 1,
                                                    .row0 = 0, .n_rows = M, .scale = 0.25f };
  return test_append_raw (r->p, 0, &ins);
}

/* Each case breaks one thing of a good instruction; the verifier must name it. */
typedef struct {
  const char *what;
  gint        code;
  void      (*breaks) (Rig *r, amk_instruction_t *ins);
  const char *needle;
} Refusal;

static AmkBufferInfo *
info_of (Rig *r, gint buffer)
{
  return g_ptr_array_index (r->p->buffers, buffer);
}

static void odd_head (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.head_dim = 7; }
static void wide_head (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.head_dim = 258; }
static void many_heads (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.n_q_heads = 8192; }
static void bad_group (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.n_q_heads = 3; }
static void no_ctx (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.max_ctx = 0; }
static void wide_rows (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.n_q_heads = 6; }
static void rows_past (Rig *r, amk_instruction_t *i) { i->params.rope_rows.n_rows = 3; }
static void rows_negative (Rig *r, amk_instruction_t *i) { i->params.rope_rows.row0 = -1; }
static void ctx_too_long (Rig *r, amk_instruction_t *i) { i->params.rope_rows.shape.max_ctx = 3; }
static void cache_dtypes (Rig *r, amk_instruction_t *i) { info_of (r, r->vc)->dtype = AMK_DTYPE_F16; }
static void pos_f32 (Rig *r, amk_instruction_t *i) { i->buffers[3] = r->qn; }
static void seq_short (Rig *r, amk_instruction_t *i) { i->buffers[4] = r->kn; }
static void one_norm (Rig *r, amk_instruction_t *i) { i->n_buffers = 6; }
static void one_norm_absent (Rig *r, amk_instruction_t *i) { i->buffers[5] = AMK_NO_BUFFER; }
static void norm_short (Rig *r, amk_instruction_t *i) { i->buffers[6] = r->pos; }
static void bad_eps (Rig *r, amk_instruction_t *i) { i->params.rope_rows.eps = -1.0f; }
static void bad_theta (Rig *r, amk_instruction_t *i) { i->params.rope_rows.freq.theta = INFINITY; }
static void bad_llama3 (Rig *r, amk_instruction_t *i) { i->params.rope_rows.freq.high_freq_factor = 0.5f; }
static void const_cache (Rig *r, amk_instruction_t *i) { info_of (r, r->kc)->role = AMK_BUFFER_ROLE_CONSTANT; }
static void same_caches (Rig *r, amk_instruction_t *i) { i->buffers[2] = r->kc; }
/* no buffer that large can be declared: the infos are made to claim it */
static void
claim_elements (Rig *r, gint buffer, guint64 n)
{
  info_of (r, buffer)->n_elements = n;
  info_of (r, buffer)->size_bytes = n * test_dtype_size (info_of (r, buffer)->dtype);
}
static void huge_rows (Rig *r, amk_instruction_t *i) { claim_elements (r, r->qkv, (guint64) W << 31); }
static void
huge_caches (Rig *r, amk_instruction_t *i)
{
  claim_elements (r, r->kc, (guint64) CTX * NKV * D << 31);
  claim_elements (r, r->vc, (guint64) CTX * NKV * D << 31);
}

static void kv_head_past (Rig *r, amk_instruction_t *i) { i->params.attn_rows.kv_head = NKV; }
static void bad_scale (Rig *r, amk_instruction_t *i) { i->params.attn_rows.scale = NAN; }
static void out_short (Rig *r, amk_instruction_t *i) { i->buffers[0] = r->qn; }
static void const_out (Rig *r, amk_instruction_t *i) { info_of (r, r->out)->role = AMK_BUFFER_ROLE_CONSTANT; }
static void attn_rows_past (Rig *r, amk_instruction_t *i) { i->params.attn_rows.row0 = 1; }
static void attn_seq_short (Rig *r, amk_instruction_t *i) { i->buffers[5] = r->qn; }
static void attn_same_caches (Rig *r, amk_instruction_t *i) { i->buffers[3] = r->kc; }

static const Refusal rope_refusals[] = {
  { "odd head_dim", AMK_PROGRAM_ERROR_INVALID, odd_head, "head_dim 7" },
  { "query heads not a multiple", AMK_PROGRAM_ERROR_INVALID, bad_group, "multiple" },
  { "head_dim past 256", AMK_PROGRAM_ERROR_INVALID, wide_head, "head_dim 258" },
  { "more than 4096 query heads", AMK_PROGRAM_ERROR_INVALID, many_heads, "8192 query heads" },
  { "no positions", AMK_PROGRAM_ERROR_OUT_OF_RANGE, no_ctx, "at least one position" },
  { "qkv not whole rows", AMK_PROGRAM_ERROR_INVALID, wide_rows, "multiple of" },
  { "rows past M", AMK_PROGRAM_ERROR_OUT_OF_RANGE, rows_past, "outside the 3 rows" },
  { "negative row", AMK_PROGRAM_ERROR_OUT_OF_RANGE, rows_negative, "outside the 3 rows" },
  { "caches not whole sequences", AMK_PROGRAM_ERROR_INVALID, ctx_too_long, "caches" },
  { "cache dtypes", AMK_PROGRAM_ERROR_INVALID, cache_dtypes, "caches" },
  { "pos not i32", AMK_PROGRAM_ERROR_INVALID, pos_f32, "the positions" },
  { "seq of the wrong size", AMK_PROGRAM_ERROR_INVALID, seq_short, "the sequences" },
  { "six buffers: one norm", AMK_PROGRAM_ERROR_INVALID, one_norm, "one norm weight" },
  { "one norm absent", AMK_PROGRAM_ERROR_INVALID, one_norm_absent, "one norm weight" },
  { "norm weight not [head_dim]", AMK_PROGRAM_ERROR_INVALID, norm_short, "norm weight" },
  { "negative epsilon", AMK_PROGRAM_ERROR_INVALID, bad_eps, "epsilon" },
  { "infinite theta", AMK_PROGRAM_ERROR_INVALID, bad_theta, "theta" },
  { "high < low frequency factor", AMK_PROGRAM_ERROR_INVALID, bad_llama3, "Llama-3" },
  { "constant cache", AMK_PROGRAM_ERROR_INVALID, const_cache, "constant" },
  { "one buffer for both caches", AMK_PROGRAM_ERROR_INVALID, same_caches,
    "the key cache, buffer 1 “k cache”, shares memory with the value cache, buffer 1 “k cache”" },
  { "2^31 rows", AMK_PROGRAM_ERROR_OUT_OF_RANGE, huge_rows, "2147483648 rows" },
  { "2^31 sequences", AMK_PROGRAM_ERROR_OUT_OF_RANGE, huge_caches, "2147483648 sequences" },
};

static const Refusal attn_refusals[] = {
  { "kv head past", AMK_PROGRAM_ERROR_OUT_OF_RANGE, kv_head_past, "key/value head 2" },
  { "NaN scale", AMK_PROGRAM_ERROR_INVALID, bad_scale, "scale" },
  { "output not [M, NQ D]", AMK_PROGRAM_ERROR_INVALID, out_short, "the output" },
  { "constant output", AMK_PROGRAM_ERROR_INVALID, const_out, "constant" },
  { "rows past M", AMK_PROGRAM_ERROR_OUT_OF_RANGE, attn_rows_past, "outside the 3 rows" },
  { "seq of the wrong size", AMK_PROGRAM_ERROR_INVALID, attn_seq_short, "the sequences" },
  /* read, not written, but the device refuses it */
  { "one buffer for both caches", AMK_PROGRAM_ERROR_INVALID, attn_same_caches,
    "the key cache, buffer 1 “k cache”, shares memory with the value cache, buffer 1 “k cache”" },
};

static void
run_refusals (gint (*raw) (Rig *r), const Refusal *cases, guint n)
{
  for (guint c = 0; c <= n; c++)
    {
      Rig r = rig_new (1);
      g_autoptr(AmkProgram) owner = r.p;
      g_autoptr(GError) error = NULL;
      gint i = raw (&r);

      if (c == n)
        {
          /* unbroken, it verifies */
          g_assert_true (amk_program_verify (r.p, &error));
          g_assert_no_error (error);
          continue;
        }
      g_test_message ("%s", cases[c].what);
      cases[c].breaks (&r, test_instruction (r.p, i));
      g_assert_false (amk_program_verify (r.p, &error));
      g_assert_error (error, AMK_PROGRAM_ERROR, cases[c].code);
      test_assert_message_has (error, cases[c].needle);
    }
}

static void
test_verify_rope_rows (void)
{
  run_refusals (raw_rope_rows, rope_refusals, G_N_ELEMENTS (rope_refusals));
}

static void
test_verify_attn_rows (void)
{
  run_refusals (raw_attn_rows, attn_refusals, G_N_ELEMENTS (attn_refusals));
}

/* The output written by ATTN_ROWS is also its k cache (sizes that fit both). */
static void
test_verify_attn_rows_alias (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  amk_instruction_t ins = test_raw (AMK_ABI_OP_ATTN_ROWS);
  gint qkv = add_2d (p, "qkv", AMK_DTYPE_F32, 2, W, AMK_BUFFER_ROLE_INPUT);
  gint kc = add_2d (p, "k cache", AMK_DTYPE_F32, 4, NKV * D, AMK_BUFFER_ROLE_INPUT);
  gint vc = add_2d (p, "v cache", AMK_DTYPE_F32, 4, NKV * D, AMK_BUFFER_ROLE_INPUT);
  gint pos = test_add_buffer (p, "pos", AMK_DTYPE_I32, 2, AMK_BUFFER_ROLE_INPUT);

  ins.n_buffers = 6;
  memcpy (ins.buffers, (gint32[]) { kc, qkv, kc, vc, pos, AMK_NO_BUFFER }, 6 * sizeof (gint32));
  ins.params.attn_rows = (amk_attn_rows_params_t) { .shape = { D, NQ, NKV, 4 }, .n_rows = 2, .scale = 1.0f };
  test_append_raw (p, 0, &ins);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  test_assert_message_has (error, "shares memory");
}

/* The rows and the caches as scratch buffers placed in the arena so that two of them
 * overlap: the device refuses that in both ops, ATTN_ROWS included, which writes none
 * of them; placed apart they verify. */
static void
test_verify_caches_apart (void)
{
  /* arena offsets of qkv (512 bytes), the k and the v cache (256 bytes each) */
  const struct { guint64 qkv, kc, vc; const char *first, *second; } cases[] = {
    { 0, 512, 768, NULL, NULL },
    { 512, 0, 0, "the key cache, buffer 1 “k cache”", "the value cache, buffer 2 “v cache”" },
    { 0, 256, 512, "the key cache, buffer 1 “k cache”", "the rows, buffer 0 “qkv”" },
    { 0, 512, 256, "the value cache, buffer 2 “v cache”", "the rows, buffer 0 “qkv”" },
  };

  for (guint attn = 0; attn < 2; attn++)
    for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
      {
        g_autoptr(AmkProgram) p = amk_program_new (1);
        g_autoptr(GError) error = NULL;
        amk_instruction_t ins = test_raw (attn ? AMK_ABI_OP_ATTN_ROWS : AMK_ABI_OP_ROPE_ROWS);
        gint qkv = add_2d (p, "qkv", AMK_DTYPE_F32, 2, W, AMK_BUFFER_ROLE_SCRATCH);
        gint kc = add_2d (p, "k cache", AMK_DTYPE_F32, 4, NKV * D, AMK_BUFFER_ROLE_SCRATCH);
        gint vc = add_2d (p, "v cache", AMK_DTYPE_F32, 4, NKV * D, AMK_BUFFER_ROLE_SCRATCH);
        gint pos = test_add_buffer (p, "pos", AMK_DTYPE_I32, 2, AMK_BUFFER_ROLE_INPUT);
        gint out = add_2d (p, "out", AMK_DTYPE_F32, 2, NQ * D, AMK_BUFFER_ROLE_OUTPUT);
        const amk_attn_shape_t shape = { D, NQ, NKV, 4 };
        const gint placed[3] = { qkv, kc, vc };
        const guint64 offsets[3] = { cases[c].qkv, cases[c].kc, cases[c].vc };

        p->scratch_size = 0;
        for (guint b = 0; b < 3; b++)
          {
            AmkBufferInfo *info = g_ptr_array_index (p->buffers, placed[b]);

            info->arena_offset = offsets[b];
            p->scratch_size = MAX (p->scratch_size, offsets[b] + info->size_bytes);
          }
        if (attn)
          {
            ins.n_buffers = 6;
            memcpy (ins.buffers, (gint32[]) { out, qkv, kc, vc, pos, AMK_NO_BUFFER }, 6 * sizeof (gint32));
            ins.params.attn_rows = (amk_attn_rows_params_t) { .shape = shape, .n_rows = 2, .scale = 1.0f };
          }
        else
          {
            ins.n_buffers = 5;
            memcpy (ins.buffers, (gint32[]) { qkv, kc, vc, pos, AMK_NO_BUFFER }, 5 * sizeof (gint32));
            ins.params.rope_rows = (amk_rope_rows_params_t) { .shape = shape, .n_rows = 2,
                                                              .freq = { .theta = 10000.0f } };
          }
        test_append_raw (p, 0, &ins);
        g_test_message ("%s, case %u", attn ? "ATTN_ROWS" : "ROPE_ROWS", c);
        if (cases[c].first == NULL)
          {
            g_assert_true (amk_program_verify (p, &error));
            g_assert_no_error (error);
            continue;
          }
        g_assert_false (amk_program_verify (p, &error));
        g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
        test_assert_message_has (error, cases[c].first);
        test_assert_message_has (error, cases[c].second);
      }
}

/* EMBED of many tokens: n_tokens negative, rows past the output or the tokens. */
static void
test_verify_embed_rows (void)
{
  const struct { gint32 first, n; gint64 out_rows, n_tokens; gint code; } cases[] = {
    { 0, 3, 3, 3, 0 },
    { 0, -1, 3, 3, AMK_PROGRAM_ERROR_OUT_OF_RANGE },
    { 1, 3, 3, 4, AMK_PROGRAM_ERROR_OUT_OF_RANGE },  /* out has rows 0 .. 2 */
    { 1, 3, 4, 3, AMK_PROGRAM_ERROR_OUT_OF_RANGE },  /* tokens has 0 .. 2 */
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (1);
      g_autoptr(GError) error = NULL;
      gint table = add_2d (p, "table", AMK_DTYPE_F32, 10, 16, AMK_BUFFER_ROLE_CONSTANT);
      gint tokens = test_add_buffer (p, "tokens", AMK_DTYPE_I32, cases[c].n_tokens, AMK_BUFFER_ROLE_INPUT);
      gint out = add_2d (p, "out", AMK_DTYPE_F32, cases[c].out_rows, 16, AMK_BUFFER_ROLE_OUTPUT);

      test_add (p, 0, AMK_OPCODE_EMBED, (gint[]) { out, table, tokens }, 3, "token_index", cases[c].first,
                "n_tokens", cases[c].n, "n_cols", 16, "dim", 16, NULL);
      if (cases[c].code == 0)
        {
          g_assert_true (amk_program_verify (p, &error));
          g_assert_no_error (error);
        }
      else
        {
          g_assert_false (amk_program_verify (p, &error));
          g_assert_error (error, AMK_PROGRAM_ERROR, cases[c].code);
        }
    }
}

/* ---- lowering ----------------------------------------------------------------------- */

/* ATTN_ROWS tiles: one per (block of rows, kv head), blocks of 64 when they fill the
 * queues and of 16 when not; together they cover every row of every kv head once.
 * ROPE_ROWS tiles: rows split over the queues, 5 operands without norms, 7 with. */
static void
test_lowering (void)
{
  const struct { gint64 m; guint queues, nkv, block; } cases[] = {
    { 200, 4, 2, 64 }, { 100, 8, 2, 16 }, { 7, 132, 2, 16 }, { 1, 1, 2, 64 },
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    for (guint norms = 0; norms < 2; norms++)
      {
        const gint64 m = cases[c].m;
        const guint nkv = cases[c].nkv, nq = 2 * nkv, w = (nq + 2 * nkv) * D;
        g_autoptr(AmkProgram) p = amk_program_new (cases[c].queues);
        g_autoptr(GError) error = NULL;
        g_autofree guint *rows = g_new0 (guint, m * nkv);
        g_autofree guint *roped = g_new0 (guint, m);
        gint qkv = add_2d (p, "qkv", AMK_DTYPE_F32, m, w, AMK_BUFFER_ROLE_INPUT);
        gint kc = add_2d (p, "k", AMK_DTYPE_BF16, 256, nkv * D, AMK_BUFFER_ROLE_INPUT);
        gint vc = add_2d (p, "v", AMK_DTYPE_BF16, 256, nkv * D, AMK_BUFFER_ROLE_INPUT);
        gint pos = test_add_buffer (p, "pos", AMK_DTYPE_I32, m, AMK_BUFFER_ROLE_INPUT);
        gint out = add_2d (p, "out", AMK_DTYPE_F32, m, nq * D, AMK_BUFFER_ROLE_OUTPUT);
        gint qn = norms ? test_add_buffer (p, "qn", AMK_DTYPE_F32, D, AMK_BUFFER_ROLE_INPUT) : -1;
        gint kn = norms ? test_add_buffer (p, "kn", AMK_DTYPE_F32, D, AMK_BUFFER_ROLE_INPUT) : -1;

        g_assert_cmpint (amk_program_op_rope_rows (p, qkv, kc, vc, pos, -1, qn, kn, D, nq, nkv, 1e-6f,
                                                   10000.0f, 0.0f, 0.0f, 0.0f, 0, &error), >=, 0);
        g_assert_cmpint (amk_program_op_attention_rows (p, out, qkv, kc, vc, pos, -1, D, nq, nkv, 0.5f,
                                                        &error), >=, 0);
        g_assert_true (amk_program_compile (p, &error));
        g_assert_no_error (error);
        for (guint i = 0; i < p->instructions->len; i++)
          {
            const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t, i);

            if (ins->opcode == AMK_ABI_OP_ROPE_ROWS)
              {
                const amk_rope_rows_params_t *rp = &ins->params.rope_rows;
                g_assert_cmpuint (ins->n_buffers, ==, norms ? 7 : 5);
                g_assert_cmpint (rp->n_rows, >=, 1);
                for (gint32 r = rp->row0; r < rp->row0 + rp->n_rows; r++)
                  roped[r]++;
              }
            else if (ins->opcode == AMK_ABI_OP_ATTN_ROWS)
              {
                const amk_attn_rows_params_t *ap = &ins->params.attn_rows;
                g_assert_cmpint (ap->row0 % cases[c].block, ==, 0);
                g_assert_cmpint (ap->n_rows, ==, MIN ((gint64) cases[c].block, m - ap->row0));
                for (gint32 r = ap->row0; r < ap->row0 + ap->n_rows; r++)
                  rows[r * nkv + ap->kv_head]++;
              }
          }
        /* the full blocks of the later rows cost more (they attend to more positions),
         * so each queue runs them first */
        for (guint q = 0; q < p->queues->len; q++)
          {
            GArray *list = g_ptr_array_index (p->queues, q);
            gint32 last = G_MAXINT32;

            for (guint k = 0; k < list->len; k++)
              {
                const amk_instruction_t *ins = &g_array_index (p->instructions, amk_instruction_t,
                                                               g_array_index (list, gint32, k));
                if (ins->opcode != AMK_ABI_OP_ATTN_ROWS || ins->params.attn_rows.n_rows != (gint32) cases[c].block)
                  continue;
                g_assert_cmpint (ins->params.attn_rows.row0, <=, last);
                last = ins->params.attn_rows.row0;
              }
          }
        for (gint64 r = 0; r < m; r++)
          {
            g_assert_cmpuint (roped[r], ==, 1);
            for (guint g = 0; g < nkv; g++)
              g_assert_cmpuint (rows[r * nkv + g], ==, 1);
          }
      }
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/attention-rows/api/rope-rows", test_rope_rows_api);
  g_test_add_func ("/amk/attention-rows/api/attention-rows", test_attn_rows_api);
  g_test_add_func ("/amk/attention-rows/api/attention-rows-out-is-cache", test_attn_rows_api_out_is_cache);
  g_test_add_func ("/amk/attention-rows/api/embed-rows", test_embed_rows_api);
  g_test_add_func ("/amk/attention-rows/verify/rope-rows", test_verify_rope_rows);
  g_test_add_func ("/amk/attention-rows/verify/attn-rows", test_verify_attn_rows);
  g_test_add_func ("/amk/attention-rows/verify/attn-rows-alias", test_verify_attn_rows_alias);
  g_test_add_func ("/amk/attention-rows/verify/caches-apart", test_verify_caches_apart);
  g_test_add_func ("/amk/attention-rows/verify/embed-rows", test_verify_embed_rows);
  g_test_add_func ("/amk/attention-rows/lowering", test_lowering);
  return g_test_run ();
}

/* amk-op-private.h: one descriptor per opcode. An op family's file (amk-op-utility.c,
 * amk-op-matvec.c, amk-op-vector.c, amk-op-attention.c) holds everything about its ops:
 * the op API that records them, the verifier's checks, the lowering into tiles, the cost
 * and the CPU reference. The verifier, the compiler and the CPU executor look an op up
 * in this table instead of switching on the opcode.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "amk-program-private.h"
#include "amk-dtype-private.h"

G_BEGIN_DECLS

/* ---- the descriptor -------------------------------------------------------------- */

/* A named parameter of an op: where it sits in amk_params_t and whether it is a float. */
typedef struct {
  const char *name;
  guint16     offset;
  gboolean    is_float;
} AmkParamField;

#define AMK_PARAM_INT(op, field)   { #field, (guint16) offsetof (amk_params_t, op.field), FALSE }
#define AMK_PARAM_FLOAT(op, field) { #field, (guint16) offsetof (amk_params_t, op.field), TRUE }
#define AMK_PARAM_FIELDS(array)    array, G_N_ELEMENTS (array)

/* The host side of one buffer of the CPU executor. */
typedef struct {
  guint8              *data;
  const AmkBufferInfo *info;
} AmkCpuBuffer;

/* Element i of a CPU buffer as a float (from its dtype) and back; of an I32 buffer. */
static inline float
amk_cpu_load (const AmkCpuBuffer *b, guint64 i)
{
  return amk_dtype_load (b->info->dtype, b->data, i);
}

/* Elements i .. i + n - 1 of a CPU buffer as floats into dst, the dtype looked at once. */
static inline void
amk_cpu_load_run (const AmkCpuBuffer *b, guint64 i, gint32 n, float *dst)
{
  if (b->info->dtype == AMK_DTYPE_F32)
    memcpy (dst, b->data + i * 4, sizeof (float) * (gsize) n);
  else if (b->info->dtype == AMK_DTYPE_BF16)
    for (gint32 c = 0; c < n; c++)
      {
        guint16 h;
        guint32 bits;
        memcpy (&h, b->data + (i + (guint64) c) * 2, 2);
        bits = (guint32) h << 16;
        memcpy (&dst[c], &bits, 4);
      }
  else
    for (gint32 c = 0; c < n; c++)
      dst[c] = amk_dtype_load (b->info->dtype, b->data, i + (guint64) c);
}

static inline void
amk_cpu_store (AmkCpuBuffer *b, guint64 i, float v)
{
  amk_dtype_store (b->info->dtype, b->data, i, v);
}

/* The CPU's blocked dot products (MATMUL and MATVEC): 4-lane vectors (GCC's generic
 * vectors: SSE or NEON), AMK_CPU_COLS rows of W converted to fp32 and transposed at a
 * time, so that each lane sums one output over K in order, as a plain dot product would. */
typedef float v4sf __attribute__ ((vector_size (16)));

#define AMK_CPU_COLS  8u
/* multiply-adds of an instruction from which a second thread pays for its start */
#define AMK_CPU_THREAD_MACS  (1 << 20)

/* Eight-lane vectors for the 8 × 8 blocks of bf16 weights: 8 columns of 8 rows loaded,
 * widened and transposed in registers (three rounds of shuffles). Macros, not functions:
 * a function taking or returning a 32-byte vector would have two ABIs, with and without
 * AVX, and the ops clone their loops for AVX2. */
/* GCC's __builtin_shuffle; clang (the fuzzers' compiler) takes the element-wise path */
#if defined(__GNUC__) && !defined(__clang__)
#define AMK_CPU_SHUFFLE 1
#else
#define AMK_CPU_SHUFFLE 0
#endif

typedef float v8sf __attribute__ ((vector_size (32)));
typedef gint32 v8si __attribute__ ((vector_size (32)));
typedef guint16 v8hu __attribute__ ((vector_size (16)));
typedef guint32 v8su __attribute__ ((vector_size (32)));

/* The CPU's dot products (MATVEC, MATMUL) accumulate with fused multiply-adds, each
 * output over K in order, so that both ops and every vector width give the same bits.
 * AMK_CPU_FMA_LANES(acc, s, v): acc = s * v + acc lane by lane with fmaf (exact where the
 * processor has no FMA, as a library call); AMK_CPU_FMA_X86 the same in one instruction,
 * in functions built for target("avx2,fma") and called where amk_cpu_has_fma(). */
#define AMK_CPU_FMA_LANES(acc, s, v) \
  G_STMT_START { \
    for (guint l_ = 0; l_ < sizeof (acc) / sizeof (float); l_++) \
      (acc)[l_] = fmaf ((s), (v)[l_], (acc)[l_]); \
  } G_STMT_END

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AMK_CPU_X86_FMA 1
#define AMK_CPU_FMA_X86(acc, s, v) \
  ((acc) = __builtin_ia32_vfmaddps256 ((v8sf) { s, s, s, s, s, s, s, s }, (v), (acc)))

static inline gboolean
amk_cpu_has_fma (void)
{
  return __builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma");
}
#else
#define AMK_CPU_X86_FMA 0
#endif

/* f = the eight bf16 values at p as floats */
#define AMK_CPU_BF16X8(p, f) \
  G_STMT_START { \
    v8hu h_; \
    v8su w_; \
    memcpy (&h_, (p), 16); \
    w_ = __builtin_convertvector (h_, v8su) << 16; \
    memcpy (&(f), &w_, 32); \
  } G_STMT_END

/* col[j] = column j (0 .. 7) of the 8 × 8 bf16 block at p whose rows are row_bytes apart:
 * lane i is row i */
#if AMK_CPU_SHUFFLE
#define AMK_CPU_BF16_COLUMNS_8X8(p, row_bytes, col) \
  G_STMT_START { \
    const v8si lo_ = { 0, 8, 1, 9, 4, 12, 5, 13 }, hi_ = { 2, 10, 3, 11, 6, 14, 7, 15 }; \
    const v8si lo64_ = { 0, 1, 8, 9, 4, 5, 12, 13 }, hi64_ = { 2, 3, 10, 11, 6, 7, 14, 15 }; \
    const v8si lo128_ = { 0, 1, 2, 3, 8, 9, 10, 11 }, hi128_ = { 4, 5, 6, 7, 12, 13, 14, 15 }; \
    const guint8 *p_ = (p); \
    const gsize s_ = (row_bytes); \
    v8sf r0_, r1_, r2_, r3_, r4_, r5_, r6_, r7_, t0_, t1_, t2_, t3_, t4_, t5_, t6_, t7_; \
    v8sf u0_, u1_, u2_, u3_, u4_, u5_, u6_, u7_; \
    /* written out, not looped: the vectors stay in registers */ \
    AMK_CPU_BF16X8 (p_, r0_); \
    AMK_CPU_BF16X8 (p_ + s_, r1_); \
    AMK_CPU_BF16X8 (p_ + 2 * s_, r2_); \
    AMK_CPU_BF16X8 (p_ + 3 * s_, r3_); \
    AMK_CPU_BF16X8 (p_ + 4 * s_, r4_); \
    AMK_CPU_BF16X8 (p_ + 5 * s_, r5_); \
    AMK_CPU_BF16X8 (p_ + 6 * s_, r6_); \
    AMK_CPU_BF16X8 (p_ + 7 * s_, r7_); \
    t0_ = __builtin_shuffle (r0_, r1_, lo_); \
    t1_ = __builtin_shuffle (r0_, r1_, hi_); \
    t2_ = __builtin_shuffle (r2_, r3_, lo_); \
    t3_ = __builtin_shuffle (r2_, r3_, hi_); \
    t4_ = __builtin_shuffle (r4_, r5_, lo_); \
    t5_ = __builtin_shuffle (r4_, r5_, hi_); \
    t6_ = __builtin_shuffle (r6_, r7_, lo_); \
    t7_ = __builtin_shuffle (r6_, r7_, hi_); \
    u0_ = __builtin_shuffle (t0_, t2_, lo64_); \
    u1_ = __builtin_shuffle (t0_, t2_, hi64_); \
    u2_ = __builtin_shuffle (t1_, t3_, lo64_); \
    u3_ = __builtin_shuffle (t1_, t3_, hi64_); \
    u4_ = __builtin_shuffle (t4_, t6_, lo64_); \
    u5_ = __builtin_shuffle (t4_, t6_, hi64_); \
    u6_ = __builtin_shuffle (t5_, t7_, lo64_); \
    u7_ = __builtin_shuffle (t5_, t7_, hi64_); \
    (col)[0] = __builtin_shuffle (u0_, u4_, lo128_); \
    (col)[1] = __builtin_shuffle (u1_, u5_, lo128_); \
    (col)[2] = __builtin_shuffle (u2_, u6_, lo128_); \
    (col)[3] = __builtin_shuffle (u3_, u7_, lo128_); \
    (col)[4] = __builtin_shuffle (u0_, u4_, hi128_); \
    (col)[5] = __builtin_shuffle (u1_, u5_, hi128_); \
    (col)[6] = __builtin_shuffle (u2_, u6_, hi128_); \
    (col)[7] = __builtin_shuffle (u3_, u7_, hi128_); \
  } G_STMT_END
#endif

/* Rows n0 .. n0 + nc (at most AMK_CPU_COLS) of the matrix W [N, k] as fp32, transposed:
 * wt[c * AMK_CPU_COLS + j] is W[n0 + j, c] (0 past nc). Inline: it runs once per block
 * of rows, in the ops' inner loops. */
static inline void
amk_cpu_load_columns (const AmkCpuBuffer *w, gint32 k, gint32 n0, gint32 nc, float *wt)
{
  G_STATIC_ASSERT (AMK_CPU_COLS == 8);
#if AMK_CPU_SHUFFLE
  if (nc == 8 && w->info->dtype == AMK_DTYPE_BF16)
    {
      const guint8 *src = w->data + (guint64) n0 * k * 2;
      gint32 c = 0;

      for (; c + 8 <= k; c += 8)
        {
          v8sf col[8];
          AMK_CPU_BF16_COLUMNS_8X8 (src + (gsize) c * 2, (gsize) k * 2, col);
          memcpy (wt + (gsize) c * 8, col, sizeof col);
        }
      for (; c < k; c++)
        for (gint32 j = 0; j < 8; j++)
          {
            guint16 h;
            guint32 bits;
            memcpy (&h, src + ((guint64) j * k + c) * 2, 2);
            bits = (guint32) h << 16;
            memcpy (&wt[(guint64) c * AMK_CPU_COLS + j], &bits, 4);
          }
      return;
    }
#endif
  memset (wt, 0, sizeof (float) * AMK_CPU_COLS * k);
  for (gint32 j = 0; j < nc; j++)
    {
      const guint64 row = (guint64) (n0 + j) * k;

      if (w->info->dtype == AMK_DTYPE_BF16)
        {
          const guint8 *src = w->data + row * 2;
          for (gint32 c = 0; c < k; c++)
            {
              guint16 h;
              guint32 bits;
              memcpy (&h, src + 2 * (guint64) c, 2);
              bits = (guint32) h << 16;
              memcpy (&wt[(guint64) c * AMK_CPU_COLS + j], &bits, 4);
            }
        }
      else
        for (gint32 c = 0; c < k; c++)
          wt[(guint64) c * AMK_CPU_COLS + j] = amk_dtype_load (w->info->dtype, w->data, row + c);
    }
}


/* out[r] = the dot product of w[0 .. n) and x[r][0 .. n) for r < nx (at most
 * AMK_CPU_QUANT_ROWS; n a multiple of 32), summed in 32 interleaved partial sums: how the
 * ops multiply a quantized matrix's rows, decoded to floats, by their inputs. */
#define AMK_CPU_QUANT_ROWS 2u
void amk_cpu_quant_dots (const float *w, const float *const *x, guint nx, gint32 n, float *out);
/* amk_cpu_quant_dots() of one row of 32-value blocks (Q8_0, Q5_0, Q5_1: n / 32 blocks)
 * and x, decoding in registers: the same bits; FALSE (nothing done) for other types or
 * where the processor has no AVX2, FMA and F16C. */
gboolean amk_cpu_block_dot (AmkDType dtype, const guint8 *blocks, const float *x, gint32 n, float *out);

/* A range of rows or columns, the first member of a thread's share of an instruction. */
typedef struct {
  gint32 start, end;
} AmkCpuRange;

/* Runs work (a) over a's range, or, when the instruction's `macs` multiply-adds pay
 * for a thread's start, a's range in two: the last whole `block`s of its half in b
 * (work (b) in a second thread), the rest in a. The threads write disjoint outputs. */
void amk_cpu_run_split (GThreadFunc work, AmkCpuRange *a, AmkCpuRange *b, gint32 block, double macs);
/* Lets amk_cpu_run_split() use its second thread in the calling thread, or not (in the
 * CPU executor's workers, whose cores are taken); returns what held before. */
gboolean amk_cpu_split_allow_here (gboolean allowed);
/* *p += v, atomically: split-K's adds, which workers on other threads may make at once. */
void amk_cpu_atomic_add_f32 (float *p, float v);

static inline gint32
amk_cpu_load_i32 (const AmkCpuBuffer *b, guint64 i)
{
  gint32 v;

  memcpy (&v, b->data + i * 4, 4);
  return v;
}

static inline void
amk_cpu_store_i32 (AmkCpuBuffer *b, guint64 i, gint32 v)
{
  memcpy (b->data + i * 4, &v, 4);
}

/* One element range of a buffer that a tile reads or writes (the compiler derives the
 * dependencies from these). */
typedef struct {
  gint32   buffer;
  guint64  start, end;  /* elements */
  gboolean write;
} AmkAccess;

/* One tile of an op: an instruction without waits and signal, and what it touches. */
typedef struct {
  guint    op;
  guint64  start, end;     /* units of the op's output (rows, elements, heads) */
  amk_instruction_t ins;
  AmkAccess access[AMK_MAX_BUFFER_REFS + 2]; /* a buffer may be read in several ranges */
  guint    n_access;
  double   cost;
  GArray  *preds;          /* guint: tiles this one must wait for */
  GArray  *succs;
  gint32   counter;        /* the counter this tile signals, or AMK_NO_COUNTER */
  guint    counter_tiles;  /* the tiles that signal it: the target of a wait on it */
  double   bottom;         /* longest cost path from here to the end */
  double   finish;
  guint    n_waiting;      /* unscheduled predecessors */
} AmkTile;

/* The compiler's lowering of one op into tiles. */
typedef struct {
  AmkProgram      *program;
  const AmkOpInfo *op;
  const AmkOpInfo *silu;     /* MATVEC: the SILU_MUL fused into it, or NULL */
  const AmkOpInfo *merge;    /* ATTN_DECODE: the ATTN_REDUCE fused into it, or NULL */
  guint            index;    /* the op's index */
  guint64          n;        /* the units the op is cut along */
  guint64          n_tiles;  /* tiles as even as integers allow */
  guint64          splits;   /* split-K slices per tile (MATVEC), else 1 */
  gint32           arrival;  /* ATTN_DECODE: the arrival counter of the current kv head */
} AmkLowering;

/* An elementwise op's smallest tile, in elements (tiles: at most one per queue). */
#define AMK_ELEMENTWISE_MIN_TILE 256u

/* What an instruction reads or writes of one operand, for the race proof: `rows` runs of
 * `length` elements, `stride` elements apart, from element `start` (rows 1: one range). */
typedef enum {
  AMK_ACCESS_READ,
  AMK_ACCESS_WRITE,
  AMK_ACCESS_ATOMIC_ADD,  /* split-K: adds that may run in any order among themselves */
} AmkAccessKind;

typedef struct {
  guint          slot;
  guint64        start, length, stride, rows;
  AmkAccessKind  kind;
  /* the rows are chosen on the device (a KV cache row by pos and seq): the box is every
   * row the choice can reach, and two such writes are not compared (distinct positions
   * are the caller's part: the generator and the batch give each row its own) */
  gboolean       device_rows;
} AmkAccessBox;

#define AMK_MAX_ACCESSES 12

void amk_access_range (AmkAccessBox *out, guint *n, const amk_instruction_t *ins, guint slot,
                       guint64 start, guint64 count, AmkAccessKind kind);
void amk_access_rows  (AmkAccessBox *out, guint *n, const amk_instruction_t *ins, guint slot,
                       guint64 start, guint64 length, guint64 stride, guint64 rows,
                       AmkAccessKind kind, gboolean device_rows);

typedef struct {
  guint                opcode;
  const char          *name;           /* as in messages: "MATVEC" */
  guint                n_buffers;      /* operands every instruction of the op names */
  guint                n_extra;        /* optional operands after those (fusions) */
  guint32              optional_slots; /* bit s: buffer slot s may be AMK_NO_BUFFER */
  const AmkParamField *fields;
  guint                n_fields;

  /* The op's own checks of an instruction, after the generic ones (opcode, counts,
   * indices in range): parameters, dtypes, ranges, writes to constant buffers,
   * aliasing. NULL: nothing more to check. */
  gboolean     (*verify)  (AmkProgram              *self,
                           guint                    queue,
                           guint                    pos,
                           const amk_instruction_t *ins,
                           GError                 **error);
  /* Lowering: plan sets lw->n, n_tiles and splits; lower fills tile t (t->start and
   * t->end set, t->ins.params a copy of the op's) for `tile` and split-K `slice`. NULL
   * plan: elementwise over buffer 0. NULL lower: the op is only recorded fused into
   * another. */
  void         (*plan)    (AmkLowering *lw);
  void         (*lower)   (AmkLowering *lw,
                           AmkTile     *t,
                           guint64      tile,
                           guint64      slice);
  /* What a verified instruction reads and writes (the race proof), at most
   * AMK_MAX_ACCESSES boxes into out; returns their number. NULL: every operand whole,
   * written where amk_abi_written_slots() says. */
  guint        (*accesses) (AmkProgram              *self,
                            const amk_instruction_t *ins,
                            AmkAccessBox            *out);
  /* The bytes an instruction moves (the cost model). NULL: none. */
  double       (*bytes)   (AmkProgram              *self,
                           const amk_instruction_t *ins);
  /* The CPU reference of a verified instruction. Returns AMK_ABORT_CODE_NONE, or why it
   * aborted with *detail set. counters: the run's (ATTN_DECODE's arrival counter). */
  AmkAbortCode (*run_cpu) (const amk_instruction_t *ins,
                           AmkCpuBuffer            *buffers,
                           guint32                 *counters,
                           gint                    *detail);
} AmkOpClass;

/* The descriptor of `opcode`, or NULL for an unknown opcode. */
const AmkOpClass    *amk_op_class             (guint opcode);

/* Runs a verified instruction on the CPU (the descriptor's run_cpu); an unknown opcode
 * aborts with AMK_ABORT_CODE_BAD_OPCODE. */
AmkAbortCode         amk_op_run_cpu           (const amk_instruction_t *ins,
                                               AmkCpuBuffer            *buffers,
                                               guint32                 *counters,
                                               gint                    *detail);

/* The op's name for messages ("MATVEC"), or "?" for an unknown opcode. */
const char          *amk_op_name              (guint opcode);

/* The named parameter `name` of `opcode`, or NULL with @error set. */
const AmkParamField *amk_op_find_param        (guint        opcode,
                                               const char  *name,
                                               GError     **error);

/* "name value, name value, ..." of the instruction's parameters, for messages. */
char                *amk_op_describe_params   (const amk_instruction_t *ins);

/* The families' descriptors (amk-op-*.c). */
extern const AmkOpClass amk_op_nop, amk_op_copy, amk_op_fill, amk_op_add, amk_op_trap,
                        amk_op_grid_sync;
extern const AmkOpClass amk_op_matvec;
extern const AmkOpClass amk_op_matmul;
extern const AmkOpClass amk_op_rmsnorm, amk_op_silu_mul, amk_op_embed, amk_op_argmax_partial,
                        amk_op_argmax_final;
extern const AmkOpClass amk_op_rope_kv, amk_op_attn_decode, amk_op_attn_reduce;
extern const AmkOpClass amk_op_rope_rows, amk_op_attn_rows;

/* ---- for the op API (amk-op-record.c) --------------------------------------------- */

/* Appends an op; `buffers` ends at G_MININT32 (or after 6: an op with more operands sets
 * the others in self->ops itself). `params` holds what the op
 * fixes for all its tiles (lowering fills in each tile's range); NULL for none. Returns
 * the op's index. */
gint           amk_op_record            (AmkProgram         *self,
                                         guint               opcode,
                                         const gint32       *buffers,
                                         const amk_params_t *params);
/* FALSE with @error set once the program is compiled. */
gboolean       amk_op_can_record        (AmkProgram *self, const char *op, GError **error);
/* Buffer `buffer`, or NULL with @error set (OUT_OF_RANGE) naming the op and `what`. */
AmkBufferInfo *amk_op_tensor            (AmkProgram *self, const char *op, const char *what,
                                         gint buffer, GError **error);
gboolean       amk_op_writable          (const char *op, AmkBufferInfo *info, GError **error);
gboolean       amk_op_same_shape        (const char *op, AmkBufferInfo *a, AmkBufferInfo *b,
                                         GError **error);
/* Not block-quantized: only the matrix and table operands take those types. */
gboolean       amk_op_elementwise_dtype (const char *op, AmkBufferInfo *info, GError **error);
gboolean       amk_op_is_vector_dtype   (AmkBufferInfo *info);
/* An F32 or BF16 vector of `n` elements (n 0: any length); *info_out may be NULL. */
gboolean       amk_op_vector_of         (AmkProgram *self, const char *op, const char *what,
                                         gint buffer, guint64 n, AmkBufferInfo **info_out,
                                         GError **error);
/* An I32 tensor of at least `min` elements. */
gboolean       amk_op_int_tensor        (AmkProgram *self, const char *op, const char *what,
                                         gint buffer, guint64 min, GError **error);
/* An F32 tensor of exactly `n` elements. */
gboolean       amk_op_f32_of            (AmkProgram *self, const char *op, const char *what,
                                         gint buffer, guint64 n, GError **error);
/* RoPE's frequency parameters (theta, and Llama-3 scaling's when factor > 0) are sane. */
gboolean       amk_op_rope_freq_ok      (const char *op, gfloat theta, gfloat factor,
                                         gfloat low_freq_factor, gfloat high_freq_factor,
                                         guint original_context, GError **error);
/* A scratch buffer of the program's own (partials of argmax and attention). */
gint           amk_op_internal_scratch  (AmkProgram *self, const char *what, AmkDType dtype,
                                         guint64 n, GError **error);

/* ---- for the ops' checks (amk-verifier.c) ----------------------------------------- */

AmkBufferInfo *amk_verify_slot_buffer   (AmkProgram *self, const amk_instruction_t *ins, guint slot);
/* No operand that the op writes is a constant buffer. */
gboolean       amk_verify_writes        (AmkProgram *self, guint queue, guint pos,
                                         const amk_instruction_t *ins, GError **error);
/* [offset, offset + count) lies inside the buffer of `slot`, in elements. */
gboolean       amk_verify_range         (AmkProgram *self, guint queue, guint pos,
                                         const amk_instruction_t *ins, guint slot,
                                         gint32 offset, gint32 count, GError **error);
/* The first n operands have one dtype. */
gboolean       amk_verify_same_dtype    (AmkProgram *self, guint queue, guint pos,
                                         const amk_instruction_t *ins, guint n, GError **error);
/* Operand 0 is not block-quantized (an op of elements: COPY, FILL, ADD). */
gboolean       amk_verify_elementwise_dtype (AmkProgram *self, guint queue, guint pos,
                                             const amk_instruction_t *ins, GError **error);
/* The bytes an operand covers, as (region, start, length): scratch buffers share the
 * arena (region -1), other buffers are their own region. */
void           amk_verify_operand_bytes (AmkProgram *self, const amk_instruction_t *ins,
                                         guint slot, gint32 offset, gint32 count,
                                         gint64 *region, guint64 *start, guint64 *length);
/* The output may be an input exactly (in place) but not partly overlap it. */
gboolean       amk_verify_no_partial_overlap (AmkProgram *self, guint queue, guint pos,
                                              const amk_instruction_t *ins, guint dst_slot,
                                              gint32 dst_off, guint src_slot, gint32 src_off,
                                              gint32 count, GError **error);

/* ---- for the ops' lowering (amk-compiler.c) --------------------------------------- */

AmkBufferInfo *amk_lower_buffer         (AmkLowering *lw, gint32 buffer);
/* The op's first n buffers become the tile's operands. */
void           amk_tile_use_buffers     (AmkTile *t, const AmkOpInfo *op, guint n);
/* The tile touches elements [start, end) of `buffer` (AMK_NO_BUFFER: nothing). */
void           amk_tile_access          (AmkTile *t, gint32 buffer, guint64 start, guint64 end,
                                         gboolean write);
/* The size of an element of the instruction's buffer in `slot` (0 if none). */
guint          amk_instruction_elem_size (AmkProgram *self, const amk_instruction_t *ins, guint slot);
/* The block-quantized dtypes, as a mask of 1 << dtype */
#define AMK_DTYPE_BLOCK_MASK ((1u << AMK_DTYPE_Q8_0) | (1u << AMK_DTYPE_Q4_K) | \
                              (1u << AMK_DTYPE_Q5_K) | (1u << AMK_DTYPE_Q6_K) | \
                              (1u << AMK_DTYPE_Q5_0) | (1u << AMK_DTYPE_Q5_1))
/* The bytes n values of the slot's buffer take (quantized blocks included); 0 absent. */
double         amk_instruction_bytes     (AmkProgram *self, const amk_instruction_t *ins, guint slot, double n);

G_END_DECLS

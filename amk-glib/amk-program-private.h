/* amk-program-private.h: the image inside an AmkProgram, for the verifier, the image
 * (de)serializer and the two executors.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-program.h"
#include "amk-abi.h"

G_BEGIN_DECLS

/* Largest image we accept: keeps every count in an int32 and allocation sizes sane. */
#define AMK_MAX_QUEUES        65536u
#define AMK_MAX_DIMS          8u
#define AMK_MAX_ENTRIES       (1u << 24)
#define AMK_ARENA_ALIGNMENT   256u
/* ATTN_DECODE: the fewest positions worth a split of their own. A shorter split costs
 * more to start and merge than its positions save, so a short context runs on one split
 * per key/value head, which writes the result itself; longer ones spread over queues. */
#define ATTN_MIN_SPLIT_POSITIONS 128

typedef struct {
  char          *name;
  AmkDType       dtype;
  AmkBufferRole  role;
  gint64        *shape;
  guint          n_dims;
  guint64        n_elements;
  guint64        size_bytes;
  guint64        arena_offset;   /* scratch buffers only */
  GBytes        *data;           /* default contents, or NULL (zeros) */
} AmkBufferInfo;

/* An op recorded by the op API, lowered into tile instructions by compile. */
typedef struct {
  guint16 opcode;      /* AMK_ABI_OP_* of the instructions it becomes */
  gint32  buffers[AMK_MAX_BUFFER_REFS]; /* written buffer first; AMK_NO_BUFFER where absent */
  amk_params_t params; /* what the op fixes for all its tiles; lowering sets the ranges */
} AmkOpInfo;

struct _AmkProgram
{
  GObject parent_instance;

  guint      num_queues;
  GPtrArray *buffers;       /* AmkBufferInfo */
  GHashTable *buffer_names; /* name -> index + 1, so that loading stays linear */
  GPtrArray *counter_names; /* char*, may hold NULL */
  GArray    *instructions;  /* amk_instruction_t */
  GPtrArray *queues;        /* GArray of gint32 instruction indices, one per queue */
  guint64    scratch_size;
  gboolean   verified;
  GArray    *ops;           /* AmkOpInfo, recorded by amk_program_op_*() */
  gboolean   compiled;
};

void         amk_buffer_info_free         (AmkBufferInfo *info);
AmkBufferInfo *amk_program_get_buffer_info (AmkProgram *self, guint buffer);

/* The opcode's name for messages and traces ("matvec", "rope-kv"), or "unknown". */
const char  *amk_opcode_nick              (guint opcode);

/* Marks the program changed: it must be verified again before it runs. */
void         amk_program_invalidate       (AmkProgram *self);

/* Adds a buffer whose arena offset is already known (scratch buffers of loaded images). */
gint         amk_program_add_buffer_at    (AmkProgram    *self,
                                           const char    *name,
                                           AmkDType       dtype,
                                           const gint64  *shape,
                                           gsize          n_dims,
                                           AmkBufferRole  role,
                                           guint64        arena_offset,
                                           GError       **error);
void         amk_program_set_scratch_size (AmkProgram *self, guint64 size);
gboolean     amk_program_append_raw       (AmkProgram              *self,
                                           guint                    queue,
                                           const amk_instruction_t *instruction,
                                           GError                 **error);

/* The flat queue arrays of amk_device_program, in host memory. */
void         amk_program_flatten_queues   (AmkProgram  *self,
                                           GArray     **flat,
                                           GArray     **offsets,
                                           GArray     **lengths);

/* Abstract run of the queues (amk-verifier.c). */
gboolean     amk_verifier_check           (AmkProgram  *self,
                                           GError     **error);

/* The cost model shared by the compiler and the schedule report: estimated ns one
 * queue (one SM) spends on an instruction. */
double       amk_instruction_cost_ns      (AmkProgram *self, const amk_instruction_t *ins);

/* Instruction `pc` of queue `q`, or NULL past the queue's end: an executor's head. */
static inline const amk_instruction_t *
amk_program_queue_instruction (AmkProgram *self, guint q, guint pc)
{
  GArray *queue = g_ptr_array_index (self->queues, q);

  if (pc >= queue->len)
    return NULL;
  return &g_array_index (self->instructions, amk_instruction_t, g_array_index (queue, gint32, pc));
}

/* Hands out the next arena offset for a scratch buffer of `size` bytes. */
guint64      amk_arena_place              (guint64 *arena_end, guint64 size);

/* The splits of the positions of each key/value head that amk_program_op_attention()
 * and amk_program_op_rope_attention() record: as many as asked for (0: as many as fill
 * the queues), at most one per position. */
static inline guint
amk_program_attention_splits (AmkProgram *self, guint n_kv_heads, guint n_splits, guint64 max_ctx)
{
  if (n_splits == 0)
    n_splits = MAX (1, self->num_queues / n_kv_heads);
  return (guint) MIN (n_splits, MAX (max_ctx, 1));
}

/* Whether amk_program_op_rope_attention() takes these shapes (amk_abi_rope_attn_fits):
 * the model builder's choice between it and the two separate ops. */
static inline gboolean
amk_program_rope_attention_fits (AmkProgram *self, guint head_dim, guint n_q_heads,
                                 guint n_kv_heads, guint64 max_ctx, guint n_splits)
{
  return n_kv_heads > 0 && n_q_heads % n_kv_heads == 0 &&
         amk_abi_rope_attn_fits (head_dim, n_q_heads / n_kv_heads, (int64_t) max_ctx,
                                 amk_program_attention_splits (self, n_kv_heads, n_splits, max_ctx),
                                 ATTN_MIN_SPLIT_POSITIONS);
}

G_END_DECLS

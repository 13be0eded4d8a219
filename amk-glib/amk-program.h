/* amk-program.h: a megakernel image: buffers, counters, queues of instructions.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-types.h>

G_BEGIN_DECLS

#define AMK_TYPE_PROGRAM (amk_program_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkProgram, amk_program, AMK, PROGRAM, GObject)

AMK_AVAILABLE_IN_1_0
AmkProgram   *amk_program_new                 (guint          num_queues);
AMK_AVAILABLE_IN_1_0
AmkProgram   *amk_program_new_from_bytes      (GBytes        *bytes,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
AmkProgram   *amk_program_new_from_file       (const char    *path,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
GBytes       *amk_program_serialize           (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_save                (AmkProgram    *self,
                                               const char    *path,
                                               GError       **error);

AMK_AVAILABLE_IN_1_0
guint         amk_program_get_num_queues      (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
guint64       amk_program_get_scratch_size    (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_get_verified        (AmkProgram    *self);

AMK_AVAILABLE_IN_1_0
gint          amk_program_add_buffer          (AmkProgram    *self,
                                               const char    *name,
                                               AmkDType       dtype,
                                               const gint64  *shape,
                                               gsize          n_dims,
                                               AmkBufferRole  role,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
guint         amk_program_get_n_buffers       (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
gint          amk_program_find_buffer         (AmkProgram    *self,
                                               const char    *name);
AMK_AVAILABLE_IN_1_0
const char   *amk_program_get_buffer_name     (AmkProgram    *self,
                                               guint          buffer);
AMK_AVAILABLE_IN_1_0
AmkDType      amk_program_get_buffer_dtype    (AmkProgram    *self,
                                               guint          buffer);
AMK_AVAILABLE_IN_1_0
AmkBufferRole amk_program_get_buffer_role     (AmkProgram    *self,
                                               guint          buffer);
AMK_AVAILABLE_IN_1_0
const gint64 *amk_program_get_buffer_shape    (AmkProgram    *self,
                                               guint          buffer,
                                               gsize         *n_dims);
AMK_AVAILABLE_IN_1_0
guint64       amk_program_get_buffer_size     (AmkProgram    *self,
                                               guint          buffer);
AMK_AVAILABLE_IN_1_0
guint64       amk_program_get_buffer_n_elements (AmkProgram  *self,
                                               guint          buffer);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_set_buffer_data     (AmkProgram    *self,
                                               guint          buffer,
                                               GBytes        *data,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
GBytes       *amk_program_get_buffer_data     (AmkProgram    *self,
                                               guint          buffer);

AMK_AVAILABLE_IN_1_0
gint          amk_program_add_counter         (AmkProgram    *self,
                                               const char    *name);
AMK_AVAILABLE_IN_1_0
guint         amk_program_get_n_counters      (AmkProgram    *self);

AMK_AVAILABLE_IN_1_0
gint          amk_program_add_instruction     (AmkProgram    *self,
                                               guint          queue,
                                               AmkOpcode      opcode,
                                               const gint    *buffers,
                                               gsize          n_buffers,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_set_param_int       (AmkProgram    *self,
                                               guint          instruction,
                                               const char    *name,
                                               gint           value,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_set_param_float     (AmkProgram    *self,
                                               guint          instruction,
                                               const char    *name,
                                               gfloat         value,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_get_param_int       (AmkProgram    *self,
                                               guint          instruction,
                                               const char    *name,
                                               gint          *value,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_get_param_float     (AmkProgram    *self,
                                               guint          instruction,
                                               const char    *name,
                                               gfloat        *value,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_add_wait            (AmkProgram    *self,
                                               guint          instruction,
                                               guint          counter,
                                               guint          target,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_set_signal          (AmkProgram    *self,
                                               guint          instruction,
                                               guint          counter,
                                               guint          amount,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
guint         amk_program_get_n_instructions  (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
guint         amk_program_get_queue_length    (AmkProgram    *self,
                                               guint          queue);

AMK_AVAILABLE_IN_1_0
gint          amk_program_op_copy             (AmkProgram    *self,
                                               gint           dst,
                                               gint           src,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_fill             (AmkProgram    *self,
                                               gint           dst,
                                               gfloat         value,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_add              (AmkProgram    *self,
                                               gint           dst,
                                               gint           a,
                                               gint           b,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_matvec           (AmkProgram    *self,
                                               gint           y,
                                               gint           w,
                                               gint           x,
                                               gint           bias,
                                               gint           residual,
                                               gint           norm,
                                               gfloat         eps,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_matmul           (AmkProgram    *self,
                                               gint           y,
                                               gint           w,
                                               gint           x,
                                               gint           bias,
                                               gint           residual,
                                               gint           norm,
                                               gfloat         eps,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_matmul_rows      (AmkProgram    *self,
                                               gint           y,
                                               gint           w,
                                               gint           x,
                                               gint           bias,
                                               gint           residual,
                                               gint           norm,
                                               gfloat         eps,
                                               gint           pos,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_rmsnorm          (AmkProgram    *self,
                                               gint           out,
                                               gint           x,
                                               gint           weight,
                                               guint          n,
                                               gfloat         eps,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_silu_mul         (AmkProgram    *self,
                                               gint           out,
                                               gint           gate,
                                               gint           up,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_embed            (AmkProgram    *self,
                                               gint           out,
                                               gint           table,
                                               gint           tokens,
                                               guint          token_index,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_embed_rows       (AmkProgram    *self,
                                               gint           out,
                                               gint           table,
                                               gint           tokens,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_argmax           (AmkProgram    *self,
                                               gint           out,
                                               guint          out_index,
                                               gint           logits,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_argmax_rows      (AmkProgram    *self,
                                               gint           out,
                                               gint           logits,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_rope_kv          (AmkProgram    *self,
                                               gint           q,
                                               gint           k,
                                               gint           v,
                                               gint           k_cache,
                                               gint           v_cache,
                                               gint           pos,
                                               guint          head_dim,
                                               guint          n_q_heads,
                                               guint          n_kv_heads,
                                               gfloat         theta,
                                               gfloat         factor,
                                               gfloat         low_freq_factor,
                                               gfloat         high_freq_factor,
                                               guint          original_context,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_attention        (AmkProgram    *self,
                                               gint           out,
                                               gint           q,
                                               gint           k_cache,
                                               gint           v_cache,
                                               gint           pos,
                                               guint          head_dim,
                                               guint          n_q_heads,
                                               guint          n_kv_heads,
                                               guint          n_splits,
                                               gfloat         scale,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_rope_attention   (AmkProgram    *self,
                                               gint           out,
                                               gint           qkv,
                                               gint           k_cache,
                                               gint           v_cache,
                                               gint           pos,
                                               guint          head_dim,
                                               guint          n_q_heads,
                                               guint          n_kv_heads,
                                               guint          n_splits,
                                               gfloat         scale,
                                               gfloat         theta,
                                               gfloat         factor,
                                               gfloat         low_freq_factor,
                                               gfloat         high_freq_factor,
                                               guint          original_context,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_rope_rows        (AmkProgram    *self,
                                               gint           qkv,
                                               gint           k_cache,
                                               gint           v_cache,
                                               gint           pos,
                                               gint           seq,
                                               gint           q_norm,
                                               gint           k_norm,
                                               guint          head_dim,
                                               guint          n_q_heads,
                                               guint          n_kv_heads,
                                               gfloat         eps,
                                               gfloat         theta,
                                               gfloat         factor,
                                               gfloat         low_freq_factor,
                                               gfloat         high_freq_factor,
                                               guint          original_context,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
gint          amk_program_op_attention_rows   (AmkProgram    *self,
                                               gint           out,
                                               gint           qkv,
                                               gint           k_cache,
                                               gint           v_cache,
                                               gint           pos,
                                               gint           seq,
                                               guint          head_dim,
                                               guint          n_q_heads,
                                               guint          n_kv_heads,
                                               gfloat         scale,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
guint         amk_program_get_n_ops           (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_compile             (AmkProgram    *self,
                                               GError       **error);
AMK_AVAILABLE_IN_1_0
char         *amk_program_get_schedule_report (AmkProgram    *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_program_estimate_schedule   (AmkProgram    *self,
                                               gdouble       *makespan_ns,
                                               gdouble       *total_ns,
                                               gdouble       *critical_path_ns);

AMK_AVAILABLE_IN_1_0
gboolean      amk_program_verify              (AmkProgram    *self,
                                               GError       **error);

G_END_DECLS

/* amk-op-table.c: the table of op descriptors, indexed by opcode (the descriptors
 * themselves live with their ops in amk-op-*.c), and the lookups the verifier, the
 * compiler, the CPU executor and the raw instruction API share.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <stddef.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-error.h"
#include "amk-op-private.h"

static const AmkOpClass *const op_classes[AMK_ABI_N_OPS] = {
  [AMK_ABI_OP_NOP]            = &amk_op_nop,
  [AMK_ABI_OP_COPY]           = &amk_op_copy,
  [AMK_ABI_OP_FILL]           = &amk_op_fill,
  [AMK_ABI_OP_ADD]            = &amk_op_add,
  [AMK_ABI_OP_TRAP]           = &amk_op_trap,
  [AMK_ABI_OP_GRID_SYNC]      = &amk_op_grid_sync,
  [AMK_ABI_OP_MATVEC]         = &amk_op_matvec,
  [AMK_ABI_OP_RMSNORM]        = &amk_op_rmsnorm,
  [AMK_ABI_OP_SILU_MUL]       = &amk_op_silu_mul,
  [AMK_ABI_OP_EMBED]          = &amk_op_embed,
  [AMK_ABI_OP_ARGMAX_PARTIAL] = &amk_op_argmax_partial,
  [AMK_ABI_OP_ARGMAX_FINAL]   = &amk_op_argmax_final,
  [AMK_ABI_OP_ROPE_KV]        = &amk_op_rope_kv,
  [AMK_ABI_OP_ATTN_DECODE]    = &amk_op_attn_decode,
  [AMK_ABI_OP_ATTN_REDUCE]    = &amk_op_attn_reduce,
  [AMK_ABI_OP_MATMUL]         = &amk_op_matmul,
  [AMK_ABI_OP_ROPE_ROWS]      = &amk_op_rope_rows,
  [AMK_ABI_OP_ATTN_ROWS]      = &amk_op_attn_rows,
};

const AmkOpClass *
amk_op_class (guint opcode)
{
  return opcode < G_N_ELEMENTS (op_classes) ? op_classes[opcode] : NULL;
}

AmkAbortCode
amk_op_run_cpu (const amk_instruction_t *ins,
                AmkCpuBuffer            *buffers,
                guint32                 *counters,
                gint                    *detail)
{
  const AmkOpClass *klass = amk_op_class (ins->opcode);

  if (klass == NULL)
    {
      *detail = ins->opcode;
      return AMK_ABORT_CODE_BAD_OPCODE;
    }
  return klass->run_cpu (ins, buffers, counters, detail);
}

const char *
amk_op_name (guint opcode)
{
  const AmkOpClass *klass = amk_op_class (opcode);

  return klass != NULL ? klass->name : "?";
}

/* The field name without its group ("shape.head_dim" is also found as "head_dim"). */
static const char *
short_name (const char *name)
{
  const char *dot = strrchr (name, '.');

  return dot != NULL ? dot + 1 : name;
}

const AmkParamField *
amk_op_find_param (guint        opcode,
                   const char  *name,
                   GError     **error)
{
  const AmkOpClass *klass = amk_op_class (opcode);
  g_autoptr(GString) names = NULL;

  if (klass == NULL)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Opcode %u is unknown, so it has no parameter “%s”"), opcode, name);
      return NULL;
    }
  for (guint i = 0; i < klass->n_fields; i++)
    if (g_str_equal (klass->fields[i].name, name) || g_str_equal (short_name (klass->fields[i].name), name))
      return &klass->fields[i];

  names = g_string_new (NULL);
  for (guint i = 0; i < klass->n_fields; i++)
    g_string_append_printf (names, "%s%s", i > 0 ? ", " : "", short_name (klass->fields[i].name));
  if (klass->n_fields == 0)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("%s has no parameters, so none called “%s”"), klass->name, name);
  else
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("%s has no parameter “%s”; its parameters are %s"), klass->name, name, names->str);
  return NULL;
}

char *
amk_op_describe_params (const amk_instruction_t *ins)
{
  const AmkOpClass *klass = amk_op_class (ins->opcode);
  GString *out = g_string_new (NULL);

  for (guint i = 0; klass != NULL && i < klass->n_fields; i++)
    {
      const AmkParamField *f = &klass->fields[i];
      const guint8 *at = (const guint8 *) &ins->params + f->offset;

      if (f->is_float)
        {
          float v;
          memcpy (&v, at, sizeof v);
          g_string_append_printf (out, "%s%s %g", i > 0 ? ", " : "", short_name (f->name), v);
        }
      else
        {
          gint32 v;
          memcpy (&v, at, sizeof v);
          g_string_append_printf (out, "%s%s %d", i > 0 ? ", " : "", short_name (f->name), v);
        }
    }
  return g_string_free (out, FALSE);
}

/* amk-launch-config.c: the launcher's choice of threads per block and dynamic shared
 * memory, apart from the device so that it is tested without one.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-launch-config-private.h"
#include "amk-program-private.h"
#include "amk-abi.h"

void
amk_launch_needs_from_program (AmkProgram     *program,
                               AmkLaunchNeeds *needs)
{
  *needs = (AmkLaunchNeeds) { program->num_queues, 0, FALSE, FALSE };
  for (guint i = 0; i < program->instructions->len; i++)
    {
      const amk_instruction_t *ins = &g_array_index (program->instructions, amk_instruction_t, i);
      gint32 k;

      if (ins->opcode == AMK_ABI_OP_MATMUL)
        needs->has_matmul = TRUE;
      if (ins->opcode == AMK_ABI_OP_ATTN_ROWS)
        needs->has_attn_rows = TRUE;
      if (ins->opcode != AMK_ABI_OP_MATVEC)
        continue;
      /* a split-K tile stages its k_len columns, a whole row its k (kernels/amk-abi.h) */
      k = ins->params.matvec.k_len > 0 ? ins->params.matvec.k_len : ins->params.matvec.k;
      if (k > 0)
        needs->max_matvec_k = MAX (needs->max_matvec_k, (guint) k);
    }
}

/* The dynamic shared memory MATVEC's ring takes at this many threads, or 0 when the
 * program has no MATVEC or the ring does not fit under the cap. */
static guint
ring_bytes (guint threads, guint max_k, guint64 dynamic_cap)
{
  guint64 bytes;

  if (max_k == 0)
    return 0;
  bytes = (guint64) threads * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * (guint64) max_k;
  return bytes <= dynamic_cap ? (guint) bytes : 0;
}

/* The dynamic shared memory MATMUL's tiles take at this many threads, or 0 when the
 * count is not a multiple of 128 (four warps per 32 rows of a tile) or it does not fit. */
static guint
matmul_bytes (guint threads, guint64 dynamic_cap)
{
  const guint64 bytes = AMK_MATMUL_SMEM_BYTES ((guint64) threads);

  return threads % 128 == 0 && bytes <= dynamic_cap ? (guint) bytes : 0;
}

/* Most threads first: MATVEC keeps more loads in flight with more warps; at each count
 * the ring first, as it streams W faster than loads into registers. A count is taken
 * only where every queue's block is co-resident, so a program with more queues than
 * multiprocessors gets smaller blocks rather than a refused launch. */
void
amk_launch_config_choose (const AmkKernelAttributes *attributes,
                          const AmkLaunchNeeds      *needs,
                          guint                      fixed_threads,
                          gboolean                   fixed_smem,
                          guint                      fixed_smem_bytes,
                          AmkOccupancyFunc           occupancy,
                          gpointer                   user_data,
                          guint                     *threads,
                          guint                     *dynamic_shared_memory)
{
  /* the dynamic part starts behind the static part, 128-byte aligned */
  const gint64 static_used = ((gint64) MAX (attributes->static_smem_bytes, 0) + 127) / 128 * 128;
  const gint64 dynamic_cap = MAX ((gint64) attributes->max_dynamic_smem_optin - static_used, 0);
  const guint n_sms = MAX (attributes->num_sms, 1);
  const guint blocks = MAX ((needs->n_queues + n_sms - 1) / n_sms, 1);
  guint top, t;

  top = fixed_threads;
  if (top == 0)
    top = MAX ((guint) CLAMP (attributes->max_threads, 0, 1024) / 32 * 32, 32);
  *threads = top;
  *dynamic_shared_memory = fixed_smem ? fixed_smem_bytes : 0;
  if (fixed_threads != 0 && fixed_smem)
    return;

  for (t = top; t >= 32; t = t / 2 / 32 * 32)
    {
      if (fixed_smem)
        {
          if (occupancy (t, fixed_smem_bytes, user_data) >= blocks)
            {
              *threads = t;
              return;
            }
        }
      else if (!needs->has_matmul || matmul_bytes (t, (guint64) dynamic_cap) > 0)
        {
          /* the many-token ops need their shared memory whether or not the ring fits */
          guint floor = needs->has_matmul ? matmul_bytes (t, (guint64) dynamic_cap) : 0;

          if (needs->has_attn_rows && AMK_ATTN_ROWS_SMEM_BYTES <= dynamic_cap)
            floor = MAX (floor, AMK_ATTN_ROWS_SMEM_BYTES);
          guint ring = ring_bytes (t, needs->max_matvec_k, (guint64) dynamic_cap);

          if (ring > 0 && occupancy (t, MAX (ring, floor), user_data) >= blocks)
            {
              *threads = t;
              *dynamic_shared_memory = MAX (ring, floor);
              return;
            }
          if (occupancy (t, floor, user_data) >= blocks)
            {
              *threads = t;
              *dynamic_shared_memory = floor;
              return;
            }
        }
      if (fixed_threads != 0)
        return;
    }
  /* nothing co-resides: the launch is refused, and says why, with the largest blocks */
}

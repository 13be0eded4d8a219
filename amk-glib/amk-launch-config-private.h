/* amk-launch-config-private.h: how AmkLauncher chooses its threads per block and dynamic
 * shared memory from the kernel's attributes and the loaded program.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-kernel-attributes.h"
#include "amk-program.h"

G_BEGIN_DECLS

/* Co-resident blocks per multiprocessor at (threads, dynamic_shared_memory), as the
 * driver's occupancy calculator says; 0 where the configuration cannot launch. */
typedef guint (*AmkOccupancyFunc) (guint     threads,
                                   guint     dynamic_shared_memory,
                                   gpointer  user_data);

/* What a program asks of a launch. */
typedef struct {
  guint n_queues;       /* one block per queue, all co-resident */
  guint max_matvec_k;   /* the most columns a MATVEC tile stages in shared memory; 0: none */
  gboolean has_matmul;  /* a MATMUL: threads a multiple of 128, AMK_MATMUL_SMEM_BYTES */
  gboolean has_attn_rows; /* an ATTN_ROWS: AMK_ATTN_ROWS_SMEM_BYTES for its fast path */
} AmkLaunchNeeds;

void  amk_launch_needs_from_program (AmkProgram                *program,
                                     AmkLaunchNeeds            *needs);

/* Chooses *threads and *dynamic_shared_memory; fixed_threads (0: choose) and, when
 * fixed_smem is set, fixed_smem_bytes are kept as given. */
void  amk_launch_config_choose      (const AmkKernelAttributes *attributes,
                                     const AmkLaunchNeeds      *needs,
                                     guint                      fixed_threads,
                                     gboolean                   fixed_smem,
                                     guint                      fixed_smem_bytes,
                                     AmkOccupancyFunc           occupancy,
                                     gpointer                   user_data,
                                     guint                     *threads,
                                     guint                     *dynamic_shared_memory);

G_END_DECLS

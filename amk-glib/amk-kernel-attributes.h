/* amk-kernel-attributes.h: the compiled megakernel's resources, from the driver.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <glib-object.h>
#include <amk-glib/amk-version-macros.h>

G_BEGIN_DECLS

#define AMK_TYPE_KERNEL_ATTRIBUTES (amk_kernel_attributes_get_type ())

/**
 * AmkKernelAttributes:
 * @num_regs: registers per thread (`cudaFuncAttributes.numRegs`)
 * @static_smem_bytes: static shared memory per block
 * @local_bytes: local memory (stack, spills) per thread
 * @max_threads: the most threads a block of this kernel can have
 * @const_bytes: constant memory used
 * @blocks_per_sm: co-resident blocks per multiprocessor at the queried
 *   (threads, dynamic shared memory), from `cudaOccupancyMaxActiveBlocksPerMultiprocessor`
 * @num_sms: multiprocessors of the device
 * @max_grid: @blocks_per_sm times @num_sms: the largest cooperative grid
 * @max_dynamic_smem_optin: the per-block dynamic shared memory opt-in cap of the device
 *
 * Straight from the driver, never estimated. See [method@Amk.Launcher.kernel_attributes].
 */
typedef struct {
  gint num_regs;
  gint static_smem_bytes;
  gint local_bytes;
  gint max_threads;
  gint const_bytes;
  gint blocks_per_sm;
  gint num_sms;
  gint max_grid;
  gint max_dynamic_smem_optin;
} AmkKernelAttributes;

AMK_AVAILABLE_IN_1_0
GType amk_kernel_attributes_get_type (void) G_GNUC_CONST;
AMK_AVAILABLE_IN_1_0
AmkKernelAttributes *amk_kernel_attributes_copy (const AmkKernelAttributes *attributes);
AMK_AVAILABLE_IN_1_0
void amk_kernel_attributes_free (AmkKernelAttributes *attributes);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkKernelAttributes, amk_kernel_attributes_free)

G_END_DECLS

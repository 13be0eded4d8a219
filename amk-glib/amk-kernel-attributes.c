/* amk-kernel-attributes.c: the boxed kernel attributes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-kernel-attributes.h"

G_DEFINE_BOXED_TYPE (AmkKernelAttributes, amk_kernel_attributes,
                     amk_kernel_attributes_copy, amk_kernel_attributes_free)

/**
 * amk_kernel_attributes_copy:
 * @attributes: kernel attributes
 *
 * Copies @attributes.
 *
 * Returns: (transfer full): a newly allocated copy of @attributes
 */
AmkKernelAttributes *
amk_kernel_attributes_copy (const AmkKernelAttributes *attributes)
{
  g_return_val_if_fail (attributes != NULL, NULL);
  return g_memdup2 (attributes, sizeof *attributes);
}

/**
 * amk_kernel_attributes_free:
 * @attributes: (nullable): kernel attributes
 *
 * Frees @attributes.
 */
void
amk_kernel_attributes_free (AmkKernelAttributes *attributes)
{
  g_free (attributes);
}

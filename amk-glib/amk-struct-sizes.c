/* amk-struct-sizes.c: the ABI struct sizes as this library was compiled.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-struct-sizes.h"
#include "amk-abi.h"

G_DEFINE_BOXED_TYPE (AmkStructSizes, amk_struct_sizes, amk_struct_sizes_copy, amk_struct_sizes_free)

/**
 * amk_struct_sizes_get:
 *
 * Reports `sizeof` of every ABI struct in kernels/amk-abi.h and the ABI version, so a
 * binding that packs instructions itself can check its layout.
 *
 * Returns: (transfer full): the sizes
 */
AmkStructSizes *
amk_struct_sizes_get (void)
{
  AmkStructSizes *sizes = g_new0 (AmkStructSizes, 1);

  sizes->abi_version = AMK_ABI_VERSION;
  sizes->params = sizeof (amk_params_t);
  sizes->buffer = sizeof (amk_buffer_t);
  sizes->instruction = sizeof (amk_instruction_t);
  sizes->abort_record = sizeof (amk_abort_record_t);
  sizes->trace_event = sizeof (amk_trace_event_t);
  sizes->device_program = sizeof (amk_device_program);
  return sizes;
}

/**
 * amk_struct_sizes_copy:
 * @sizes: struct sizes
 *
 * Copies @sizes.
 *
 * Returns: (transfer full): a newly allocated copy of @sizes
 */
AmkStructSizes *
amk_struct_sizes_copy (const AmkStructSizes *sizes)
{
  g_return_val_if_fail (sizes != NULL, NULL);
  return g_memdup2 (sizes, sizeof *sizes);
}

/**
 * amk_struct_sizes_free:
 * @sizes: (nullable): struct sizes
 *
 * Frees @sizes.
 */
void
amk_struct_sizes_free (AmkStructSizes *sizes)
{
  g_free (sizes);
}

/* amk-struct-sizes.h: the sizes of the ABI structs, a drift guard for bindings.
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

#define AMK_TYPE_STRUCT_SIZES (amk_struct_sizes_get_type ())

/**
 * AmkStructSizes:
 * @abi_version: `AMK_ABI_VERSION` the library was built with
 * @params: `sizeof (amk_params_t)`
 * @buffer: `sizeof (amk_buffer_t)`
 * @instruction: `sizeof (amk_instruction_t)`
 * @abort_record: `sizeof (amk_abort_record_t)`
 * @trace_event: `sizeof (amk_trace_event_t)`
 * @device_program: `sizeof (amk_device_program)`
 *
 * The C sizes of the ABI structs in kernels/amk-abi.h as this library was compiled.
 * Anything that packs instructions by hand can check its layout against them.
 */
typedef struct {
  guint abi_version;
  guint params;
  guint buffer;
  guint instruction;
  guint abort_record;
  guint trace_event;
  guint device_program;
} AmkStructSizes;

AMK_AVAILABLE_IN_1_0
GType amk_struct_sizes_get_type (void) G_GNUC_CONST;
AMK_AVAILABLE_IN_1_0
AmkStructSizes *amk_struct_sizes_copy (const AmkStructSizes *sizes);
AMK_AVAILABLE_IN_1_0
void amk_struct_sizes_free (AmkStructSizes *sizes);
AMK_AVAILABLE_IN_1_0
AmkStructSizes *amk_struct_sizes_get (void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkStructSizes, amk_struct_sizes_free)

G_END_DECLS

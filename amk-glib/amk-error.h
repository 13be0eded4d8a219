/* amk-error.h: the error domains of amk-glib.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <glib.h>
#include <amk-glib/amk-version-macros.h>

G_BEGIN_DECLS

/**
 * AMK_PROGRAM_ERROR:
 *
 * Error domain of [class@Amk.Program]: building, loading and verifying images.
 * Errors in this domain are from the [error@Amk.ProgramError] enumeration.
 */
#define AMK_PROGRAM_ERROR (amk_program_error_quark ())

/**
 * AmkProgramError:
 * @AMK_PROGRAM_ERROR_INVALID: an argument or a field makes no sense (unknown dtype,
 *   an opcode with the wrong buffers, a write to a constant buffer)
 * @AMK_PROGRAM_ERROR_OUT_OF_RANGE: an index, size or offset is out of range
 * @AMK_PROGRAM_ERROR_DEADLOCK: the abstract run of the queues cannot finish
 * @AMK_PROGRAM_ERROR_CORRUPT: serialized bytes are not an amk image
 * @AMK_PROGRAM_ERROR_VERSION: the image was made for another ABI version
 * @AMK_PROGRAM_ERROR_NOT_VERIFIED: the program must be verified before it runs
 * @AMK_PROGRAM_ERROR_RACE: two instructions touch the same bytes, at least one writing,
 *   and no counter orders them (the result would depend on the schedule)
 *
 * Error codes of the %AMK_PROGRAM_ERROR domain.
 */
typedef enum {
  AMK_PROGRAM_ERROR_INVALID,
  AMK_PROGRAM_ERROR_OUT_OF_RANGE,
  AMK_PROGRAM_ERROR_DEADLOCK,
  AMK_PROGRAM_ERROR_CORRUPT,
  AMK_PROGRAM_ERROR_VERSION,
  AMK_PROGRAM_ERROR_NOT_VERIFIED,
  AMK_PROGRAM_ERROR_RACE
} AmkProgramError;

/**
 * AMK_LAUNCH_ERROR:
 *
 * Error domain of [class@Amk.Launcher]. Errors in this domain are from the
 * [error@Amk.LaunchError] enumeration.
 */
#define AMK_LAUNCH_ERROR (amk_launch_error_quark ())

/**
 * AmkLaunchError:
 * @AMK_LAUNCH_ERROR_NO_DEVICE: no usable CUDA device
 * @AMK_LAUNCH_ERROR_UNSUPPORTED: the library was built without CUDA, the device
 *   cannot launch cooperative kernels, or the program has buffers of a type the
 *   executor does not run ([method@Amk.Executor.supports_dtype])
 * @AMK_LAUNCH_ERROR_REJECTED: the launch contract refused the launch before it started
 *   (grid larger than the co-resident blocks, zero occupancy, shared memory over the cap)
 * @AMK_LAUNCH_ERROR_TIMEOUT: a wait outlived the watchdog budget, or the driver's watchdog fired
 * @AMK_LAUNCH_ERROR_ABORTED: the device aborted the launch (TRAP, bad opcode or index);
 *   [method@Amk.Launcher.get_last_abort] has the record
 * @AMK_LAUNCH_ERROR_FAILED: any other CUDA error
 *
 * Error codes of the %AMK_LAUNCH_ERROR domain.
 */
typedef enum {
  AMK_LAUNCH_ERROR_NO_DEVICE,
  AMK_LAUNCH_ERROR_UNSUPPORTED,
  AMK_LAUNCH_ERROR_REJECTED,
  AMK_LAUNCH_ERROR_TIMEOUT,
  AMK_LAUNCH_ERROR_ABORTED,
  AMK_LAUNCH_ERROR_FAILED
} AmkLaunchError;

AMK_AVAILABLE_IN_1_0
GQuark amk_program_error_quark (void);
AMK_AVAILABLE_IN_1_0
GQuark amk_launch_error_quark (void);

G_END_DECLS

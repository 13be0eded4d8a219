/* amk-error.c: the error quarks.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-error.h"

G_DEFINE_QUARK (amk-program-error-quark, amk_program_error)
G_DEFINE_QUARK (amk-launch-error-quark, amk_launch_error)

/* amk-race-private.h: the verifier's race proof (amk-race.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

#include "amk-program.h"

G_BEGIN_DECLS

/* Proves that every two instructions of a program (checked, without deadlock) that touch
 * overlapping bytes, one of them writing, are ordered; `order` is every instruction
 * index in the order the abstract run of the queues finished them. Otherwise
 * AMK_PROGRAM_ERROR_RACE naming both instructions, the buffer and the bytes. */
gboolean amk_race_check (AmkProgram    *self,
                         const guint32 *order,
                         GError       **error);

G_END_DECLS

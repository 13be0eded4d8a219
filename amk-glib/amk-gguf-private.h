/* amk-gguf-private.h: the gguf file parser (untrusted input).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

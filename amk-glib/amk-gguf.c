/* amk-gguf.c: the gguf file parser (untrusted input).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-gguf-private.h"

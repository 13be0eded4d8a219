/* amk-safetensors.c: the safetensors file parser (untrusted input).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-safetensors-private.h"

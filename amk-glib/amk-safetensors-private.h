/* amk-safetensors-private.h: the safetensors file parser (untrusted input).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

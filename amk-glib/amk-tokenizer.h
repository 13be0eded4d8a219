/* amk-tokenizer.h: byte-level BPE tokenizer (HF tokenizer.json, GGUF metadata).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>

G_BEGIN_DECLS

#define AMK_TYPE_TOKENIZER (amk_tokenizer_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkTokenizer, amk_tokenizer, AMK, TOKENIZER, GObject)

G_END_DECLS

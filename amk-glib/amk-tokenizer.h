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

AMK_AVAILABLE_IN_1_0
AmkTokenizer *amk_tokenizer_new_from_json_file (const char          *path,
                                                GError             **error);
AMK_AVAILABLE_IN_1_0
AmkTokenizer *amk_tokenizer_new_from_json_data (const char          *data,
                                                gssize               length,
                                                GError             **error);
AMK_AVAILABLE_IN_1_0
AmkTokenizer *amk_tokenizer_new_from_vocab     (const char *const   *tokens,
                                                const char *const   *merges,
                                                const gint32        *token_types,
                                                gsize                n_types,
                                                const char          *pre_tokenizer,
                                                GError             **error);

AMK_AVAILABLE_IN_1_0
gint32       *amk_tokenizer_encode             (AmkTokenizer        *self,
                                                const char          *text,
                                                gboolean             add_special,
                                                gsize               *n_ids,
                                                GError             **error);
AMK_AVAILABLE_IN_1_0
char         *amk_tokenizer_decode             (AmkTokenizer        *self,
                                                const gint32        *ids,
                                                gsize                n_ids,
                                                GError             **error);

AMK_AVAILABLE_IN_1_0
guint         amk_tokenizer_get_vocab_size     (AmkTokenizer        *self);
AMK_AVAILABLE_IN_1_0
gint32        amk_tokenizer_get_bos_id         (AmkTokenizer        *self);
AMK_AVAILABLE_IN_1_0
void          amk_tokenizer_set_bos_id         (AmkTokenizer        *self,
                                                gint32               bos_id);
AMK_AVAILABLE_IN_1_0
gint32        amk_tokenizer_get_eos_id         (AmkTokenizer        *self);
AMK_AVAILABLE_IN_1_0
void          amk_tokenizer_set_eos_id         (AmkTokenizer        *self,
                                                gint32               eos_id);
AMK_AVAILABLE_IN_1_0
gboolean      amk_tokenizer_get_add_bos        (AmkTokenizer        *self);
AMK_AVAILABLE_IN_1_0
void          amk_tokenizer_set_add_bos        (AmkTokenizer        *self,
                                                gboolean             add_bos);
AMK_AVAILABLE_IN_1_0
gint32        amk_tokenizer_token_to_id        (AmkTokenizer        *self,
                                                const char          *token);
AMK_AVAILABLE_IN_1_0
const char   *amk_tokenizer_id_to_token        (AmkTokenizer        *self,
                                                gint32               id);
AMK_AVAILABLE_IN_1_0
gboolean      amk_tokenizer_is_special         (AmkTokenizer        *self,
                                                gint32               id);

G_END_DECLS

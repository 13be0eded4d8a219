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

/**
 * AMK_TOKENIZER_ERROR:
 *
 * Error domain of [class@Amk.Tokenizer]: loading a tokenizer, encoding and decoding.
 * Errors in this domain are from the [error@Amk.TokenizerError] enumeration. A file
 * that cannot be read fails with a %G_IO_ERROR instead.
 */
#define AMK_TOKENIZER_ERROR (amk_tokenizer_error_quark ())

/**
 * AmkTokenizerError:
 * @AMK_TOKENIZER_ERROR_INVALID_JSON: the `tokenizer.json` text is not UTF-8, not JSON,
 *   empty, or nests deeper than the reader allows
 * @AMK_TOKENIZER_ERROR_INVALID_STRUCTURE: a member of the `tokenizer.json` is missing
 *   or has the wrong type, or a template or a sequence of steps is malformed
 * @AMK_TOKENIZER_ERROR_INVALID_VOCAB: the vocabulary or the added tokens contradict
 *   themselves: an id out of range or given twice, a token listed twice, a token that
 *   is not UTF-8, an unknown GGUF token type, a reference to a token that does not exist
 * @AMK_TOKENIZER_ERROR_INVALID_MERGES: a merge is not two tokens, or a token it names
 *   or makes is not in the vocabulary
 * @AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL: the model is not byte-level BPE (`WordPiece`,
 *   `Unigram`, or BPE with `byte_fallback` or a subword prefix or suffix)
 * @AMK_TOKENIZER_ERROR_UNSUPPORTED_NORMALIZER: a normalizer other than `NFC`
 * @AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER: a pre-tokenizer, an option of one, a
 *   regular expression or a GGUF `tokenizer.ggml.pre` name this tokenizer does not
 *   implement, or a pre-tokenizer without `ByteLevel`
 * @AMK_TOKENIZER_ERROR_UNSUPPORTED_POST_PROCESSOR: a post-processor other than
 *   `TemplateProcessing`, `ByteLevel` or a `Sequence` of them
 * @AMK_TOKENIZER_ERROR_INVALID_TEXT: the text to encode is not valid UTF-8
 * @AMK_TOKENIZER_ERROR_PATTERN_FAILED: a pre-tokenizer's regular expression gave up on
 *   the text to encode (its backtracking limit)
 * @AMK_TOKENIZER_ERROR_UNKNOWN_ID: a token id to decode is not in the vocabulary
 *
 * Error codes of the %AMK_TOKENIZER_ERROR domain.
 */
typedef enum {
  AMK_TOKENIZER_ERROR_INVALID_JSON,
  AMK_TOKENIZER_ERROR_INVALID_STRUCTURE,
  AMK_TOKENIZER_ERROR_INVALID_VOCAB,
  AMK_TOKENIZER_ERROR_INVALID_MERGES,
  AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL,
  AMK_TOKENIZER_ERROR_UNSUPPORTED_NORMALIZER,
  AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
  AMK_TOKENIZER_ERROR_UNSUPPORTED_POST_PROCESSOR,
  AMK_TOKENIZER_ERROR_INVALID_TEXT,
  AMK_TOKENIZER_ERROR_PATTERN_FAILED,
  AMK_TOKENIZER_ERROR_UNKNOWN_ID
} AmkTokenizerError;

AMK_AVAILABLE_IN_1_0
GQuark amk_tokenizer_error_quark (void);

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
const char   *amk_tokenizer_get_chat_template  (AmkTokenizer        *self);
AMK_AVAILABLE_IN_1_0
void          amk_tokenizer_set_chat_template  (AmkTokenizer        *self,
                                                const char          *chat_template);
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

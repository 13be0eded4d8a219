/* amk-tokenizer-private.h: what the files of AmkTokenizer share: the instance, its
 * tables, and the functions each concept gives the others.
 *
 *   amk-tokenizer.c                  the GObject, errors, encode, the accessors
 *   amk-tokenizer-json.c             tokenizer.json: the file, the model, the JSON readers
 *   amk-tokenizer-json-pipeline.c    tokenizer.json: pre_tokenizer and post_processor
 *   amk-tokenizer-gguf.c             a GGUF file's tokenizer.ggml.* arrays
 *   amk-tokenizer-pretokenizer.c     the pre-tokenizer steps (Split, ByteLevel)
 *   amk-tokenizer-added-tokens.c     added tokens: the table and cutting them out of text
 *   amk-tokenizer-bpe.c              vocabulary, merges, and BPE on one word
 *   amk-tokenizer-decode.c           ids back to text (the ByteLevel decoder)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib/gi18n-lib.h>
#include <json-glib/json-glib.h>

#include "amk-tokenizer.h"

G_BEGIN_DECLS

typedef enum {
  STEP_SPLIT,       /* regex, matches and gaps become pieces */
  STEP_BYTE_LEVEL,  /* optional prefix space, optional GPT-2 regex, bytes to chars */
} StepKind;

typedef struct {
  StepKind kind;
  GRegex  *regex;             /* NULL: ByteLevel without use_regex */
  gboolean add_prefix_space;
} PreStep;

typedef struct {
  char    *content;
  gsize    len;
  gint32   id;
  gboolean special;
  gboolean normalized;
  gboolean lstrip;
  gboolean rstrip;
  gboolean single_word;
} AddedToken;

/* A stretch of the input: text still to encode (id < 0) or one added token. */
typedef struct {
  const char *start;
  gsize       len;
  gint32      id;
} Segment;

/* Value of the merge table: the rank and the token the pair becomes. */
typedef struct {
  guint64 pair;   /* (left id << 32) | right id: the key */
  guint32 rank;
  gint32  new_id;
} Merge;

struct _AmkTokenizer
{
  GObject parent_instance;

  char       **id_to_token;    /* vocab_size entries, NULL where no token has the id */
  guint8      *special;        /* vocab_size flags */
  guint        vocab_size;
  GHashTable  *vocab;          /* token (owned by id_to_token) -> id + 1 */
  Merge       *merges;         /* the keys of merge_table point into it */
  gsize        n_merges;
  GHashTable  *merge_table;    /* &Merge.pair -> Merge* */
  GArray      *added;          /* AddedToken, in file order */
  GHashTable  *added_by_text;  /* content (owned by added) -> AddedToken index + 1 */
  GPtrArray   *steps;          /* PreStep* */
  gboolean     ignore_merges;
  gboolean     nfc;            /* normalizer NFC (Qwen 2 and 3) */
  gint32       unk_id;
  GArray      *prefix;         /* gint32 ids the post-processor puts before the text */
  GArray      *suffix;         /* ... and after it */
  gint32       bos_id;
  gint32       eos_id;
  gboolean     add_bos;
  char        *chat_template;  /* the model's Jinja chat template, or NULL */

  char         byte_to_char[256][3];   /* GPT-2's bytes_to_unicode, as UTF-8 */
  gint16       char_to_byte[324];      /* the inverse; -1 for other characters */

  GMutex       cache_lock;
  GHashTable  *cache;          /* word -> gint32[1 + n]: n then the ids */
};

/* ---- errors (amk-tokenizer.c) ------------------------------------------------------ */

/* "Tokenizer “source”: field “field” what", in the AMK_TOKENIZER_ERROR domain. */
void amk_tokenizer_set_field_error       (GError            **error,
                                          AmkTokenizerError   code,
                                          const char         *source,
                                          const char         *field,
                                          const char         *what);
/* A field whose value names a feature this tokenizer lacks; @code is one of the
 * UNSUPPORTED codes. */
void amk_tokenizer_set_unsupported_error (GError            **error,
                                          AmkTokenizerError   code,
                                          const char         *source,
                                          const char         *field,
                                          const char         *value);

/* ---- pre-tokenizer steps (amk-tokenizer-pretokenizer.c) ---------------------------- */

void     amk_tokenizer_pre_step_free       (gpointer       data);
gboolean amk_tokenizer_add_split_step      (AmkTokenizer  *self,
                                            const char    *pattern,
                                            const char    *source,
                                            const char    *field,
                                            GError       **error);
gboolean amk_tokenizer_add_byte_level_step (AmkTokenizer  *self,
                                            gboolean       use_regex,
                                            gboolean       add_prefix_space,
                                            GError       **error);
gboolean amk_tokenizer_has_byte_level_step (AmkTokenizer  *self);
/* Runs the steps on @len bytes of @text; the pieces are byte-level words for BPE. */
gboolean amk_tokenizer_pre_tokenize        (AmkTokenizer  *self,
                                            const char    *text,
                                            gsize          len,
                                            GPtrArray    **out_pieces,
                                            GError       **error);

/* ---- vocabulary, merges, BPE (amk-tokenizer-bpe.c) --------------------------------- */

void     amk_tokenizer_alloc_ids           (AmkTokenizer  *self,
                                            guint          vocab_size);
gboolean amk_tokenizer_set_token           (AmkTokenizer  *self,
                                            const char    *token,
                                            gint64         id,
                                            const char    *source,
                                            const char    *field,
                                            GError       **error);
gint32   amk_tokenizer_lookup_vocab        (AmkTokenizer  *self,
                                            const char    *token);
void     amk_tokenizer_alloc_merges        (AmkTokenizer  *self,
                                            gsize          n_merges);
gboolean amk_tokenizer_add_merge           (AmkTokenizer  *self,
                                            const char    *left,
                                            const char    *right,
                                            gsize          index,
                                            const char    *source,
                                            GError       **error);
gboolean amk_tokenizer_add_merge_string    (AmkTokenizer  *self,
                                            const char    *line,
                                            gsize          index,
                                            const char    *source,
                                            GError       **error);
/* Appends the ids of one pre-tokenized word to @out, through the word cache. */
void     amk_tokenizer_encode_word         (AmkTokenizer  *self,
                                            const char    *word,
                                            GArray        *out);

/* ---- added tokens (amk-tokenizer-added-tokens.c) ----------------------------------- */

void     amk_tokenizer_added_token_clear   (gpointer       data);
gboolean amk_tokenizer_add_added_token     (AmkTokenizer  *self,
                                            const char    *content,
                                            gint64         id,
                                            gboolean       special,
                                            gboolean       normalized,
                                            gboolean       lstrip,
                                            gboolean       rstrip,
                                            gboolean       single_word,
                                            const char    *source,
                                            GError       **error);
void     amk_tokenizer_rebuild_added_index (AmkTokenizer  *self);
void     amk_tokenizer_split_added         (AmkTokenizer  *self,
                                            GArray        *segments,
                                            gboolean       normalized);

/* ---- JSON readers (amk-tokenizer-json.c) ------------------------------------------- */

/* Typed members of a tokenizer.json object. A missing or null member is fine where
 * @optional (NULL, no error); anything else that is not of the type fails with
 * AMK_TOKENIZER_ERROR_INVALID_STRUCTURE naming @field. */
JsonObject *amk_tokenizer_json_get_object (JsonObject  *object,
                                           const char  *member,
                                           gboolean     optional,
                                           const char  *source,
                                           const char  *field,
                                           GError     **error);
JsonArray  *amk_tokenizer_json_get_array  (JsonObject  *object,
                                           const char  *member,
                                           gboolean     optional,
                                           const char  *source,
                                           const char  *field,
                                           GError     **error);
const char *amk_tokenizer_json_get_string (JsonObject  *object,
                                           const char  *member,
                                           gboolean     optional,
                                           const char  *source,
                                           const char  *field,
                                           GError     **error);
gboolean    amk_tokenizer_json_get_bool   (JsonObject  *object,
                                           const char  *member,
                                           gboolean     fallback,
                                           gboolean    *out,
                                           const char  *source,
                                           const char  *field,
                                           GError     **error);
gboolean    amk_tokenizer_json_get_int    (JsonNode    *node,
                                           gint64      *out,
                                           const char  *source,
                                           const char  *field,
                                           GError     **error);

/* ---- pre_tokenizer and post_processor (amk-tokenizer-json-pipeline.c) -------------- */

gboolean amk_tokenizer_parse_pre_tokenizer  (AmkTokenizer  *self,
                                             JsonObject    *object,
                                             const char    *source,
                                             const char    *field,
                                             int            depth,
                                             GError       **error);
gboolean amk_tokenizer_parse_post_processor (AmkTokenizer  *self,
                                             JsonObject    *object,
                                             const char    *source,
                                             int            depth,
                                             GError       **error);

G_END_DECLS

/* amk-tokenizer-json.c: AmkTokenizer from a Hugging Face tokenizer.json: the text
 * checked and parsed, then its model (BPE vocab and merges), added_tokens and normalizer
 * read; the pre_tokenizer and post_processor are read in
 * amk-tokenizer-json-pipeline.c. Also the typed member readers both files use, whose
 * errors name the field.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-loader-private.h"
#include "amk-tokenizer-private.h"
#include "amk-json-private.h"

/* The deepest nesting of objects and arrays a tokenizer.json may have. */
#define MAX_JSON_DEPTH  128

JsonObject *
amk_tokenizer_json_get_object (JsonObject  *object,
                               const char  *member,
                               gboolean     optional,
                               const char  *source,
                               const char  *field,
                               GError     **error)
{
  JsonNode *node = amk_json_member (object, member);

  if (node == NULL && optional)
    return NULL;
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT (node))
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source, field,
                                     _("is missing or not an object"));
      return NULL;
    }
  return json_node_get_object (node);
}

JsonArray *
amk_tokenizer_json_get_array (JsonObject  *object,
                              const char  *member,
                              gboolean     optional,
                              const char  *source,
                              const char  *field,
                              GError     **error)
{
  JsonNode *node = amk_json_member (object, member);

  if (node == NULL && optional)
    return NULL;
  if (node == NULL || !JSON_NODE_HOLDS_ARRAY (node))
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source, field,
                                     _("is missing or not an array"));
      return NULL;
    }
  return json_node_get_array (node);
}

/* A string member; NULL with @error set if it is missing (and not optional) or no
 * string. */
const char *
amk_tokenizer_json_get_string (JsonObject  *object,
                               const char  *member,
                               gboolean     optional,
                               const char  *source,
                               const char  *field,
                               GError     **error)
{
  JsonNode *node = amk_json_member (object, member);

  if (node == NULL && optional)
    return NULL;
  if (!amk_json_is_string (node))
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source, field,
                                     _("is missing or not a string"));
      return NULL;
    }
  return json_node_get_string (node);
}

gboolean
amk_tokenizer_json_get_bool (JsonObject  *object,
                             const char  *member,
                             gboolean     fallback,
                             gboolean    *out,
                             const char  *source,
                             const char  *field,
                             GError     **error)
{
  JsonNode *node = amk_json_member (object, member);

  if (node == NULL)
    {
      *out = fallback;
      return TRUE;
    }
  if (!amk_json_is_boolean (node))
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source, field,
                                     _("is not true or false"));
      return FALSE;
    }
  *out = json_node_get_boolean (node);
  return TRUE;
}

gboolean
amk_tokenizer_json_get_int (JsonNode    *node,
                            gint64      *out,
                            const char  *source,
                            const char  *field,
                            GError     **error)
{
  if (!amk_json_is_integer (node))
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source, field,
                                     _("is missing or not an integer"));
      return FALSE;
    }
  *out = json_node_get_int (node);
  return TRUE;
}

static AmkTokenizer *
tokenizer_from_json (JsonNode    *root,
                     const char  *source,
                     GError     **error)
{
  g_autoptr(AmkTokenizer) self = g_object_new (AMK_TYPE_TOKENIZER, NULL);
  JsonObject *top, *model, *vocab, *pre, *post;
  JsonArray *merges, *added;
  JsonObjectIter iter;
  const char *type, *unk, *member;
  JsonNode *node;
  gint64 max_id = -1;
  guint n_vocab, n_added;
  gboolean flag;

  if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                     "(top level)", _("is not an object"));
      return NULL;
    }
  top = json_node_get_object (root);

  node = json_object_get_member (top, "normalizer");
  if (node != NULL && !JSON_NODE_HOLDS_NULL (node))
    {
      JsonObject *normalizer = amk_tokenizer_json_get_object (top, "normalizer", FALSE, source,
                                                              "normalizer", error);
      const char *kind;

      if (normalizer == NULL)
        return NULL;
      kind = amk_tokenizer_json_get_string (normalizer, "type", FALSE, source, "normalizer.type",
                                            error);
      if (kind == NULL)
        return NULL;
      if (strcmp (kind, "NFC") != 0)
        {
          amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_NORMALIZER,
                                               source, "normalizer.type", kind);
          return NULL;
        }
      self->nfc = TRUE;
    }

  model = amk_tokenizer_json_get_object (top, "model", FALSE, source, "model", error);
  if (model == NULL)
    return NULL;
  type = amk_tokenizer_json_get_string (model, "type", TRUE, source, "model.type", error);
  if (type == NULL && error != NULL && *error != NULL)
    return NULL;
  if (type != NULL && strcmp (type, "BPE") != 0)
    {
      amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL, source,
                                           "model.type", type);
      return NULL;
    }
  if (!amk_tokenizer_json_get_bool (model, "byte_fallback", FALSE, &flag, source,
                                    "model.byte_fallback", error))
    return NULL;
  if (flag)
    {
      amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL, source,
                                           "model.byte_fallback", "true");
      return NULL;
    }
  for (guint i = 0; i < 2; i++)
    {
      const char *name = i == 0 ? "continuing_subword_prefix" : "end_of_word_suffix";
      g_autofree char *field = g_strconcat ("model.", name, NULL);
      const char *value = amk_tokenizer_json_get_string (model, name, TRUE, source, field, error);

      if (value == NULL && error != NULL && *error != NULL)
        return NULL;
      if (value != NULL && value[0] != '\0')
        {
          amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL,
                                               source, field, value);
          return NULL;
        }
    }
  if (!amk_tokenizer_json_get_bool (model, "ignore_merges", FALSE, &self->ignore_merges, source,
                                    "model.ignore_merges", error))
    return NULL;

  vocab = amk_tokenizer_json_get_object (model, "vocab", FALSE, source, "model.vocab", error);
  if (vocab == NULL)
    return NULL;
  merges = amk_tokenizer_json_get_array (model, "merges", FALSE, source, "model.merges", error);
  if (merges == NULL)
    return NULL;
  added = amk_tokenizer_json_get_array (top, "added_tokens", TRUE, source, "added_tokens", error);
  if (added == NULL && error != NULL && *error != NULL)
    return NULL;

  /* Ids may leave holes but never exceed the number of entries: a tiny file cannot
   * ask for a huge table. */
  n_vocab = json_object_get_size (vocab);
  n_added = added != NULL ? json_array_get_length (added) : 0;
  json_object_iter_init (&iter, vocab);
  while (json_object_iter_next (&iter, &member, &node))
    {
      gint64 id;

      if (!amk_tokenizer_json_get_int (node, &id, source, "model.vocab", error))
        return NULL;
      max_id = MAX (max_id, id);
    }
  for (guint i = 0; i < n_added; i++)
    {
      gint64 id;

      node = json_array_get_element (added, i);
      if (!JSON_NODE_HOLDS_OBJECT (node))
        {
          amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                         "added_tokens", _("holds a non-object"));
          return NULL;
        }
      if (!amk_tokenizer_json_get_int (json_object_get_member (json_node_get_object (node), "id"),
                                       &id, source, "added_tokens.id", error))
        return NULL;
      max_id = MAX (max_id, id);
    }
  if (max_id < 0 || (guint64) max_id >= (guint64) n_vocab + n_added)
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_VOCAB, source,
                                     "model.vocab",
                                     max_id < 0 ? _("is empty")
                                                : _("has ids larger than the number of tokens"));
      return NULL;
    }
  amk_tokenizer_alloc_ids (self, (guint) max_id + 1);

  json_object_iter_init (&iter, vocab);
  while (json_object_iter_next (&iter, &member, &node))
    if (!amk_tokenizer_set_token (self, member, json_node_get_int (node), source, "model.vocab",
                                  error))
      return NULL;

  unk = amk_tokenizer_json_get_string (model, "unk_token", TRUE, source, "model.unk_token", error);
  if (unk == NULL && error != NULL && *error != NULL)
    return NULL;

  for (guint i = 0; i < n_added; i++)
    {
      JsonObject *object = json_node_get_object (json_array_get_element (added, i));
      const char *content = amk_tokenizer_json_get_string (object, "content", FALSE, source,
                                                           "added_tokens.content", error);
      gboolean special, normalized, lstrip, rstrip, single_word;

      if (content == NULL ||
          !amk_tokenizer_json_get_bool (object, "special", FALSE, &special, source,
                                        "added_tokens.special", error) ||
          !amk_tokenizer_json_get_bool (object, "normalized", !special, &normalized, source,
                                        "added_tokens.normalized", error) ||
          !amk_tokenizer_json_get_bool (object, "lstrip", FALSE, &lstrip, source,
                                        "added_tokens.lstrip", error) ||
          !amk_tokenizer_json_get_bool (object, "rstrip", FALSE, &rstrip, source,
                                        "added_tokens.rstrip", error) ||
          !amk_tokenizer_json_get_bool (object, "single_word", FALSE, &single_word, source,
                                        "added_tokens.single_word", error))
        return NULL;
      if (!amk_tokenizer_add_added_token (self, content,
                                          json_node_get_int (json_object_get_member (object, "id")),
                                          special, normalized, lstrip, rstrip, single_word, source, error))
        return NULL;
    }
  amk_tokenizer_rebuild_added_index (self);

  if (unk != NULL)
    {
      self->unk_id = amk_tokenizer_token_to_id (self, unk);
      if (self->unk_id < 0)
        {
          amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_VOCAB, source,
                                         "model.unk_token", _("names no token"));
          return NULL;
        }
    }

  amk_tokenizer_alloc_merges (self, json_array_get_length (merges));
  for (guint i = 0; i < json_array_get_length (merges); i++)
    {
      node = json_array_get_element (merges, i);
      if (amk_json_is_string (node))
        {
          if (!amk_tokenizer_add_merge_string (self, json_node_get_string (node), i, source, error))
            return NULL;
        }
      else if (JSON_NODE_HOLDS_ARRAY (node) &&
               json_array_get_length (json_node_get_array (node)) == 2 &&
               amk_json_is_string (json_array_get_element (json_node_get_array (node), 0)) &&
               amk_json_is_string (json_array_get_element (json_node_get_array (node), 1)))
        {
          JsonArray *pair = json_node_get_array (node);

          if (!amk_tokenizer_add_merge (self, json_array_get_string_element (pair, 0),
                                        json_array_get_string_element (pair, 1), i, source, error))
            return NULL;
        }
      else
        {
          g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES,
                       _("Tokenizer “%s”: field “merges”: merge %u is neither “a b” nor [\"a\", \"b\"]"),
                       source, i);
          return NULL;
        }
    }

  pre = amk_tokenizer_json_get_object (top, "pre_tokenizer", TRUE, source, "pre_tokenizer", error);
  if (pre == NULL && error != NULL && *error != NULL)
    return NULL;
  if (pre != NULL && !amk_tokenizer_parse_pre_tokenizer (self, pre, source, "pre_tokenizer", 0,
                                                         error))
    return NULL;
  if (!amk_tokenizer_has_byte_level_step (self))
    {
      amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                                           source, "pre_tokenizer", _("(without ByteLevel)"));
      return NULL;
    }

  post = amk_tokenizer_json_get_object (top, "post_processor", TRUE, source, "post_processor",
                                        error);
  if (post == NULL && error != NULL && *error != NULL)
    return NULL;
  if (post != NULL && !amk_tokenizer_parse_post_processor (self, post, source, 0, error))
    return NULL;

  return g_steal_pointer (&self);
}

static AmkTokenizer *
tokenizer_from_json_data (const char  *data,
                          gsize        len,
                          const char  *source,
                          GError     **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autoptr(GError) build_error = NULL;
  AmkTokenizer *self;

  if (!g_utf8_validate_len (data, len, NULL) || memchr (data, '\0', len) != NULL)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_JSON,
                   _("Tokenizer “%s” is not UTF-8 text"), source);
      return NULL;
    }
  /* json-glib recurses without a limit: refuse deep nesting before parsing */
  if (amk_json_scan (data, len, MAX_JSON_DEPTH) != AMK_JSON_SCAN_OK)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_JSON,
                   _("Tokenizer “%s” nests JSON deeper than %d levels"), source, MAX_JSON_DEPTH);
      return NULL;
    }
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, data, (gssize) len, &local_error))
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_JSON,
                   _("Tokenizer “%s” is not valid JSON: %s"), source, local_error->message);
      return NULL;
    }
  if (json_parser_get_root (parser) == NULL)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_JSON,
                   _("Tokenizer “%s” is empty"), source);
      return NULL;
    }
  self = tokenizer_from_json (json_parser_get_root (parser), source, &build_error);
  if (self == NULL)
    {
      g_assert (build_error != NULL);
      g_propagate_error (error, g_steal_pointer (&build_error));
    }
  return self;
}

/**
 * amk_tokenizer_new_from_json_data:
 * @data: the contents of a Hugging Face `tokenizer.json`
 * @length: the length of @data in bytes, or -1 if it is NUL-terminated
 * @error: return location for a #GError
 *
 * Loads a byte-level BPE tokenizer from the text of a `tokenizer.json`; see
 * [ctor@Amk.Tokenizer.new_from_json_file].
 *
 * Returns: (transfer full) (nullable): the tokenizer, or %NULL with @error set
 */
AmkTokenizer *
amk_tokenizer_new_from_json_data (const char  *data,
                                  gssize       length,
                                  GError     **error)
{
  g_return_val_if_fail (data != NULL || length == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (length < 0)
    length = (gssize) strlen (data);
  return tokenizer_from_json_data (length > 0 ? data : "", (gsize) length, "<data>", error);
}

/**
 * amk_tokenizer_new_from_json_file:
 * @path: (type filename): a Hugging Face `tokenizer.json`
 * @error: return location for a #GError
 *
 * Loads a byte-level BPE tokenizer: `model` of type `BPE` (`vocab`, `merges` as
 * `"a b"` strings or `["a", "b"]` pairs, `ignore_merges`, `unk_token`), `added_tokens`
 * (with their `special`, `lstrip`, `rstrip`, `single_word` and `normalized` flags), a
 * `pre_tokenizer` made of `ByteLevel`, `Split` (behavior `Isolated`) and `Digits`, alone
 * or in a `Sequence` (what GPT-2, SmolLM2, Llama 3 and Qwen 2 ship), no `normalizer` or an
 * `NFC` one (Qwen 2 and 3: applied between the non-normalized added tokens), and
 * a `post_processor` that is `ByteLevel`, `TemplateProcessing` or a `Sequence` of them.
 *
 * A file that cannot be read fails with a %G_IO_ERROR. A file that is not such a
 * tokenizer fails with an %AMK_TOKENIZER_ERROR (a message naming the file and the
 * field): %AMK_TOKENIZER_ERROR_INVALID_JSON, %AMK_TOKENIZER_ERROR_INVALID_STRUCTURE,
 * %AMK_TOKENIZER_ERROR_INVALID_VOCAB or %AMK_TOKENIZER_ERROR_INVALID_MERGES, or, for a
 * feature this tokenizer lacks, one of the `UNSUPPORTED` codes.
 *
 * Returns: (transfer full) (nullable): the tokenizer, or %NULL with @error set
 */
AmkTokenizer *
amk_tokenizer_new_from_json_file (const char  *path,
                                  GError     **error)
{
  g_autoptr(GFile) file = NULL;
  g_autofree char *contents = NULL;
  gsize length = 0;

  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  file = g_file_new_for_path (path);
  if (!g_file_load_contents (file, NULL, &contents, &length, NULL, error))
    return NULL;
  return tokenizer_from_json_data (contents, length, path, error);
}

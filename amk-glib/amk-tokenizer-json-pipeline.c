/* amk-tokenizer-json-pipeline.c: the pipeline sections of a tokenizer.json, read into
 * AmkTokenizer: the pre_tokenizer (ByteLevel, Split, Digits, alone or in a Sequence)
 * becomes pre-tokenizer steps, the post_processor (TemplateProcessing, ByteLevel, or a
 * Sequence of them) the ids put before and after the text.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-tokenizer-private.h"

gboolean
amk_tokenizer_parse_pre_tokenizer (AmkTokenizer  *self,
                                   JsonObject    *object,
                                   const char    *source,
                                   const char    *field,
                                   int            depth,
                                   GError       **error)
{
  g_autofree char *type_field = g_strconcat (field, ".type", NULL);
  const char *type = amk_tokenizer_json_get_string (object, "type", FALSE, source, type_field,
                                                    error);

  if (type == NULL)
    return FALSE;

  if (strcmp (type, "Sequence") == 0)
    {
      g_autofree char *list_field = g_strconcat (field, ".pretokenizers", NULL);
      JsonArray *list = amk_tokenizer_json_get_array (object, "pretokenizers", FALSE, source,
                                                      list_field, error);

      if (list == NULL)
        return FALSE;
      if (depth > 8)
        {
          amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                         list_field, _("nests sequences too deeply"));
          return FALSE;
        }
      for (guint i = 0; i < json_array_get_length (list); i++)
        {
          JsonNode *node = json_array_get_element (list, i);
          g_autofree char *item_field = g_strdup_printf ("%s[%u]", list_field, i);

          if (!JSON_NODE_HOLDS_OBJECT (node))
            {
              amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                             item_field, _("is not an object"));
              return FALSE;
            }
          if (!amk_tokenizer_parse_pre_tokenizer (self, json_node_get_object (node), source,
                                                  item_field, depth + 1, error))
            return FALSE;
        }
      return TRUE;
    }

  if (strcmp (type, "ByteLevel") == 0)
    {
      gboolean use_regex, add_prefix_space;

      if (!amk_tokenizer_json_get_bool (object, "use_regex", TRUE, &use_regex, source, field,
                                        error) ||
          !amk_tokenizer_json_get_bool (object, "add_prefix_space", TRUE, &add_prefix_space, source,
                                        field, error))
        return FALSE;
      return amk_tokenizer_add_byte_level_step (self, use_regex, add_prefix_space, error);
    }

  if (strcmp (type, "Digits") == 0)
    {
      gboolean individual;

      if (!amk_tokenizer_json_get_bool (object, "individual_digits", FALSE, &individual, source,
                                        field, error))
        return FALSE;
      /* Rust's char::is_numeric is \p{N} */
      return amk_tokenizer_add_split_step (self, individual ? "\\p{N}" : "\\p{N}+", source, field,
                                           error);
    }

  if (strcmp (type, "Split") == 0)
    {
      g_autofree char *pattern_field = g_strconcat (field, ".pattern", NULL);
      g_autofree char *behavior_field = g_strconcat (field, ".behavior", NULL);
      JsonObject *pattern = amk_tokenizer_json_get_object (object, "pattern", FALSE, source,
                                                           pattern_field, error);
      const char *behavior;
      const char *regex, *literal;
      gboolean invert;

      if (pattern == NULL)
        return FALSE;
      behavior = amk_tokenizer_json_get_string (object, "behavior", FALSE, source, behavior_field,
                                                error);
      if (behavior == NULL)
        return FALSE;
      if (strcmp (behavior, "Isolated") != 0)
        {
          amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                                               source, behavior_field, behavior);
          return FALSE;
        }
      if (!amk_tokenizer_json_get_bool (object, "invert", FALSE, &invert, source, field, error))
        return FALSE;
      if (invert)
        {
          amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                                               source, field, "invert");
          return FALSE;
        }
      regex = amk_tokenizer_json_get_string (pattern, "Regex", TRUE, source, pattern_field, error);
      literal = amk_tokenizer_json_get_string (pattern, "String", TRUE, source, pattern_field,
                                               error);
      if (regex == NULL && literal == NULL)
        {
          amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                         pattern_field, _("has neither “Regex” nor “String”"));
          return FALSE;
        }
      if (regex != NULL)
        return amk_tokenizer_add_split_step (self, regex, source, pattern_field, error);
      else
        {
          g_autofree char *escaped = g_regex_escape_string (literal, -1);

          if (literal[0] == '\0')
            {
              amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                             pattern_field, _("is an empty string"));
              return FALSE;
            }
          return amk_tokenizer_add_split_step (self, escaped, source, pattern_field, error);
        }
    }

  amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER, source,
                                       type_field, type);
  return FALSE;
}

/* TemplateProcessing (its "single" template), ByteLevel (adds nothing), or a Sequence
 * of them. */
gboolean
amk_tokenizer_parse_post_processor (AmkTokenizer  *self,
                                    JsonObject    *object,
                                    const char    *source,
                                    int            depth,
                                    GError       **error)
{
  const char *type = amk_tokenizer_json_get_string (object, "type", FALSE, source,
                                                    "post_processor.type", error);

  if (type == NULL)
    return FALSE;
  if (strcmp (type, "ByteLevel") == 0)
    return TRUE;
  if (strcmp (type, "Sequence") == 0)
    {
      JsonArray *list = amk_tokenizer_json_get_array (object, "processors", FALSE, source,
                                                      "post_processor.processors", error);

      if (list == NULL)
        return FALSE;
      if (depth > 8)
        {
          amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                         "post_processor", _("nests sequences too deeply"));
          return FALSE;
        }
      for (guint i = 0; i < json_array_get_length (list); i++)
        {
          JsonNode *node = json_array_get_element (list, i);

          if (!JSON_NODE_HOLDS_OBJECT (node))
            {
              amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                             "post_processor.processors", _("holds a non-object"));
              return FALSE;
            }
          if (!amk_tokenizer_parse_post_processor (self, json_node_get_object (node), source,
                                                   depth + 1, error))
            return FALSE;
        }
      return TRUE;
    }
  if (strcmp (type, "TemplateProcessing") == 0)
    {
      JsonArray *single = amk_tokenizer_json_get_array (object, "single", FALSE, source,
                                                        "post_processor.single", error);
      JsonObject *specials;
      gboolean seen_sequence = FALSE;

      if (single == NULL)
        return FALSE;
      specials = amk_tokenizer_json_get_object (object, "special_tokens", FALSE, source,
                                                "post_processor.special_tokens", error);
      if (specials == NULL)
        return FALSE;
      g_array_set_size (self->prefix, 0);
      g_array_set_size (self->suffix, 0);
      for (guint i = 0; i < json_array_get_length (single); i++)
        {
          JsonNode *node = json_array_get_element (single, i);
          JsonObject *piece, *special, *entry;
          JsonArray *ids;
          const char *name;

          if (!JSON_NODE_HOLDS_OBJECT (node))
            {
              amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                             "post_processor.single", _("holds a non-object"));
              return FALSE;
            }
          piece = json_node_get_object (node);
          if (json_object_has_member (piece, "Sequence"))
            {
              if (seen_sequence)
                {
                  amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE,
                                                 source, "post_processor.single",
                                                 _("names the sequence twice"));
                  return FALSE;
                }
              seen_sequence = TRUE;
              continue;
            }
          special = amk_tokenizer_json_get_object (piece, "SpecialToken", FALSE, source,
                                                   "post_processor.single.SpecialToken", error);
          if (special == NULL)
            return FALSE;
          name = amk_tokenizer_json_get_string (special, "id", FALSE, source,
                                                "post_processor.single.SpecialToken.id", error);
          if (name == NULL)
            return FALSE;
          entry = amk_tokenizer_json_get_object (specials, name, FALSE, source,
                                                 "post_processor.special_tokens", error);
          if (entry == NULL)
            return FALSE;
          ids = amk_tokenizer_json_get_array (entry, "ids", FALSE, source,
                                              "post_processor.special_tokens.ids", error);
          if (ids == NULL)
            return FALSE;
          for (guint k = 0; k < json_array_get_length (ids); k++)
            {
              gint64 id;
              gint32 id32;

              if (!amk_tokenizer_json_get_int (json_array_get_element (ids, k), &id, source,
                                               "post_processor.special_tokens.ids", error))
                return FALSE;
              /* the vocabulary may have holes: an id below vocab_size can lack a piece */
              if (id < 0 || id >= self->vocab_size || self->id_to_token[id] == NULL)
                {
                  amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_VOCAB, source,
                                                 "post_processor.special_tokens.ids",
                                                 _("holds an id outside the vocabulary"));
                  return FALSE;
                }
              id32 = (gint32) id;
              g_array_append_val (seen_sequence ? self->suffix : self->prefix, id32);
            }
        }
      if (!seen_sequence)
        {
          amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_STRUCTURE, source,
                                         "post_processor.single", _("has no Sequence"));
          return FALSE;
        }
      if (self->prefix->len > 0)
        self->bos_id = g_array_index (self->prefix, gint32, 0);
      if (self->suffix->len > 0)
        self->eos_id = g_array_index (self->suffix, gint32, self->suffix->len - 1);
      return TRUE;
    }
  amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_POST_PROCESSOR,
                                       source,
                                       "post_processor.type", type);
  return FALSE;
}

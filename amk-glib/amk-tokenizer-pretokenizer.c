/* amk-tokenizer-pretokenizer.c: the pre-tokenizer steps of AmkTokenizer, which cut the
 * text between added tokens into words for BPE: Split (a regular expression whose
 * matches and gaps both become pieces) and ByteLevel (an optional prefix space, the
 * optional GPT-2 regex, then bytes spelled as GPT-2's byte characters). Digits is a
 * Split. GRegex stands in for Oniguruma, with \s spelled out as Unicode White_Space.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-tokenizer-private.h"

/* Unicode White_Space (what Oniguruma's and Rust's \s and char::is_whitespace mean). */
#define WHITE_SPACE_CLASS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                          "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* ByteLevel's own pre-tokenizer regex (GPT-2's). */
#define GPT2_PATTERN \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

void
amk_tokenizer_pre_step_free (gpointer data)
{
  PreStep *step = data;

  g_clear_pointer (&step->regex, g_regex_unref);
  g_free (step);
}

/* Rewrites \s and \S (outside character classes) and \s (inside them) as Unicode
 * White_Space, which is what Oniguruma means by them, not PCRE2. */
static char *
translate_pattern (const char *pattern)
{
  GString *out = g_string_new (NULL);
  gboolean in_class = FALSE;

  for (const char *p = pattern; *p != '\0'; p++)
    {
      if (*p == '\\' && p[1] != '\0')
        {
          if (p[1] == 's')
            g_string_append (out, in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]");
          else if (p[1] == 'S' && !in_class)
            g_string_append (out, "[^" WHITE_SPACE_CLASS "]");
          else
            g_string_append_len (out, p, 2);
          p++;
          continue;
        }
      if (*p == '[' && !in_class)
        {
          in_class = TRUE;
          g_string_append_c (out, '[');
          /* a ] or ^] right after the bracket is a literal */
          if (p[1] == '^')
            g_string_append_c (out, *++p);
          if (p[1] == ']')
            g_string_append_c (out, *++p);
          continue;
        }
      if (*p == ']' && in_class)
        in_class = FALSE;
      g_string_append_c (out, *p);
    }
  return g_string_free (out, FALSE);
}

static GRegex *
compile_pattern (const char  *pattern,
                 const char  *source,
                 const char  *field,
                 GError     **error)
{
  g_autofree char *translated = translate_pattern (pattern);
  g_autoptr(GError) local_error = NULL;
  GRegex *regex;

  regex = g_regex_new (translated, G_REGEX_OPTIMIZE, 0, &local_error);
  if (regex == NULL)
    g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                 _("Tokenizer “%s”: field “%s” is not a regular expression GRegex accepts: %s"),
                 source, field, local_error->message);
  return regex;
}

gboolean
amk_tokenizer_add_split_step (AmkTokenizer  *self,
                              const char    *pattern,
                              const char    *source,
                              const char    *field,
                              GError       **error)
{
  GRegex *regex = compile_pattern (pattern, source, field, error);
  PreStep *step;

  if (regex == NULL)
    return FALSE;
  step = g_new0 (PreStep, 1);
  step->kind = STEP_SPLIT;
  step->regex = regex;
  g_ptr_array_add (self->steps, step);
  return TRUE;
}

gboolean
amk_tokenizer_add_byte_level_step (AmkTokenizer  *self,
                                   gboolean       use_regex,
                                   gboolean       add_prefix_space,
                                   GError       **error)
{
  PreStep *step = g_new0 (PreStep, 1);

  step->kind = STEP_BYTE_LEVEL;
  step->add_prefix_space = add_prefix_space;
  if (use_regex)
    step->regex = compile_pattern (GPT2_PATTERN, "(built-in)", "ByteLevel", error);
  g_ptr_array_add (self->steps, step);
  return !use_regex || step->regex != NULL;
}

gboolean
amk_tokenizer_has_byte_level_step (AmkTokenizer *self)
{
  for (guint i = 0; i < self->steps->len; i++)
    if (((PreStep *) g_ptr_array_index (self->steps, i))->kind == STEP_BYTE_LEVEL)
      return TRUE;
  return FALSE;
}

/* Splits each piece at the matches of @regex, keeping matches and gaps. */
static gboolean
split_pieces (GPtrArray  *pieces,
              GRegex     *regex,
              GPtrArray **out_pieces,
              GError    **error)
{
  g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; i < pieces->len; i++)
    {
      const char *piece = g_ptr_array_index (pieces, i);
      gsize len = strlen (piece), last = 0;
      g_autoptr(GMatchInfo) info = NULL;
      g_autoptr(GError) local_error = NULL;

      g_regex_match_full (regex, piece, (gssize) len, 0, 0, &info, &local_error);
      while (local_error == NULL && g_match_info_matches (info))
        {
          int start, end;

          g_match_info_fetch_pos (info, 0, &start, &end);
          if (end > start)
            {
              if ((gsize) start > last)
                g_ptr_array_add (out, g_strndup (piece + last, start - last));
              g_ptr_array_add (out, g_strndup (piece + start, end - start));
              last = end;
            }
          g_match_info_next (info, &local_error);
        }
      if (local_error != NULL)
        {
          g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_PATTERN_FAILED,
                       _("The tokenizer’s pre-tokenizer failed: %s"), local_error->message);
          return FALSE;
        }
      if (len > last)
        g_ptr_array_add (out, g_strndup (piece + last, len - last));
    }
  *out_pieces = g_steal_pointer (&out);
  return TRUE;
}

gboolean
amk_tokenizer_pre_tokenize (AmkTokenizer  *self,
                            const char    *text,
                            gsize          len,
                            GPtrArray    **out_pieces,
                            GError       **error)
{
  g_autoptr(GPtrArray) pieces = g_ptr_array_new_with_free_func (g_free);

  g_ptr_array_add (pieces, g_strndup (text, len));
  for (guint s = 0; s < self->steps->len; s++)
    {
      PreStep *step = g_ptr_array_index (self->steps, s);

      if (step->kind == STEP_BYTE_LEVEL && step->add_prefix_space)
        for (guint i = 0; i < pieces->len; i++)
          {
            char *piece = g_ptr_array_index (pieces, i);

            if (piece[0] != ' ')
              {
                pieces->pdata[i] = g_strconcat (" ", piece, NULL);
                g_free (piece);
              }
          }
      if (step->regex != NULL)
        {
          GPtrArray *split = NULL;

          if (!split_pieces (pieces, step->regex, &split, error))
            return FALSE;
          g_ptr_array_unref (pieces);
          pieces = split;
        }
      if (step->kind == STEP_BYTE_LEVEL)
        for (guint i = 0; i < pieces->len; i++)
          {
            char *piece = g_ptr_array_index (pieces, i);
            GString *mapped = g_string_sized_new (strlen (piece) * 2);

            for (const guint8 *p = (const guint8 *) piece; *p != '\0'; p++)
              g_string_append (mapped, self->byte_to_char[*p]);
            pieces->pdata[i] = g_string_free (mapped, FALSE);
            g_free (piece);
          }
    }
  *out_pieces = g_steal_pointer (&pieces);
  return TRUE;
}

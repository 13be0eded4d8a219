/* amk-tokenizer.c: byte-level BPE tokenizer, token for token what the `tokenizers`
 * package (Hugging Face) computes for the same tokenizer.json.
 *
 * Encoding: the added tokens are cut out of the text first (leftmost-longest, the
 * non-normalized ones before the normalized ones), the rest goes through the
 * pre-tokenizer steps (Split, Digits, ByteLevel, in a Sequence or alone; GRegex stands
 * for Oniguruma, with \s spelled out as Unicode White_Space), each word is merged with
 * the BPE ranks (a heap of candidate pairs over a linked list of symbols, as tokenizers
 * does) and cached.
 *
 * This file holds the GObject, the error domain, encode and the accessors; the other
 * concepts have a file each (see amk-tokenizer-private.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-tokenizer-private.h"

/**
 * AmkTokenizer:
 *
 * A byte-level BPE tokenizer, the kind GPT-2, SmolLM2, Llama 3 and Qwen 2 use.
 *
 * A tokenizer comes from a Hugging Face `tokenizer.json`
 * ([ctor@Amk.Tokenizer.new_from_json_file]) or from the arrays of a GGUF file's
 * `tokenizer.ggml.*` metadata ([ctor@Amk.Tokenizer.new_from_vocab]). For the same
 * tokenizer, [method@Amk.Tokenizer.encode] gives the ids that the `tokenizers` package
 * gives, and [method@Amk.Tokenizer.decode] the text it gives with
 * `skip_special_tokens=False`.
 *
 * Text that spells an added token (`<|im_start|>`) always becomes that token. The
 * tokenizer keeps a cache of the words it merged; it is safe to use from several
 * threads at once.
 */

enum {
  PROP_0,
  PROP_VOCAB_SIZE,
  PROP_BOS_ID,
  PROP_EOS_ID,
  PROP_ADD_BOS,
  PROP_CHAT_TEMPLATE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (AmkTokenizer, amk_tokenizer, G_TYPE_OBJECT)

static void
amk_tokenizer_finalize (GObject *object)
{
  AmkTokenizer *self = AMK_TOKENIZER (object);

  if (self->id_to_token != NULL)
    for (guint i = 0; i < self->vocab_size; i++)
      g_free (self->id_to_token[i]);
  g_free (self->id_to_token);
  g_free (self->special);
  g_free (self->chat_template);
  g_clear_pointer (&self->vocab, g_hash_table_unref);
  g_clear_pointer (&self->merge_table, g_hash_table_unref);
  g_free (self->merges);
  g_clear_pointer (&self->added_by_text, g_hash_table_unref);
  g_clear_pointer (&self->added, g_array_unref);
  g_clear_pointer (&self->steps, g_ptr_array_unref);
  g_clear_pointer (&self->prefix, g_array_unref);
  g_clear_pointer (&self->suffix, g_array_unref);
  g_clear_pointer (&self->cache, g_hash_table_unref);
  g_mutex_clear (&self->cache_lock);

  G_OBJECT_CLASS (amk_tokenizer_parent_class)->finalize (object);
}

static void
amk_tokenizer_get_property (GObject    *object,
                            guint       prop_id,
                            GValue     *value,
                            GParamSpec *pspec)
{
  AmkTokenizer *self = AMK_TOKENIZER (object);

  switch (prop_id)
    {
    case PROP_VOCAB_SIZE:
      g_value_set_uint (value, self->vocab_size);
      break;
    case PROP_BOS_ID:
      g_value_set_int (value, self->bos_id);
      break;
    case PROP_EOS_ID:
      g_value_set_int (value, self->eos_id);
      break;
    case PROP_ADD_BOS:
      g_value_set_boolean (value, self->add_bos);
      break;
    case PROP_CHAT_TEMPLATE:
      g_value_set_string (value, self->chat_template);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_tokenizer_set_property (GObject      *object,
                            guint         prop_id,
                            const GValue *value,
                            GParamSpec   *pspec)
{
  AmkTokenizer *self = AMK_TOKENIZER (object);

  switch (prop_id)
    {
    case PROP_BOS_ID:
      amk_tokenizer_set_bos_id (self, g_value_get_int (value));
      break;
    case PROP_EOS_ID:
      amk_tokenizer_set_eos_id (self, g_value_get_int (value));
      break;
    case PROP_ADD_BOS:
      amk_tokenizer_set_add_bos (self, g_value_get_boolean (value));
      break;
    case PROP_CHAT_TEMPLATE:
      amk_tokenizer_set_chat_template (self, g_value_get_string (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
amk_tokenizer_class_init (AmkTokenizerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = amk_tokenizer_finalize;
  object_class->get_property = amk_tokenizer_get_property;
  object_class->set_property = amk_tokenizer_set_property;

  /**
   * AmkTokenizer:vocab-size:
   *
   * One more than the largest token id, added tokens included.
   */
  properties[PROP_VOCAB_SIZE] =
    g_param_spec_uint ("vocab-size", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkTokenizer:bos-id:
   *
   * The beginning-of-sequence token, or -1. A `tokenizer.json` names it in its
   * `TemplateProcessing` post-processor (the first special token before the text);
   * for GGUF metadata the caller sets it from `tokenizer.ggml.bos_token_id`. It must be
   * -1 or below [property@Amk.Tokenizer:vocab-size] (see
   * [method@Amk.Tokenizer.set_bos_id]).
   */
  properties[PROP_BOS_ID] =
    g_param_spec_int ("bos-id", NULL, NULL, -1, G_MAXINT32, -1,
                      G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkTokenizer:eos-id:
   *
   * The end-of-sequence token, or -1: the last special token a `TemplateProcessing`
   * post-processor puts after the text, or what the caller sets (from
   * `tokenizer.ggml.eos_token_id` or the model's generation config). It must be -1 or
   * below [property@Amk.Tokenizer:vocab-size] (see [method@Amk.Tokenizer.set_eos_id]).
   */
  properties[PROP_EOS_ID] =
    g_param_spec_int ("eos-id", NULL, NULL, -1, G_MAXINT32, -1,
                      G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkTokenizer:add-bos:
   *
   * Whether [method@Amk.Tokenizer.encode] with @add_special puts
   * [property@Amk.Tokenizer:bos-id] first (unless the post-processor already does).
   * False by default; set it from `tokenizer.ggml.add_bos_token`.
   */
  properties[PROP_ADD_BOS] =
    g_param_spec_boolean ("add-bos", NULL, NULL, FALSE,
                          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkTokenizer:chat-template:
   *
   * The model's chat template (Jinja text, as `tokenizer.chat_template` in a GGUF file
   * or `chat_template` in a checkpoint's tokenizer_config.json), or %NULL when the model
   * has none. The library keeps it for callers that format conversations (`amk chat`
   * recognises the common families of templates); it does not run it.
   */
  properties[PROP_CHAT_TEMPLATE] =
    g_param_spec_string ("chat-template", NULL, NULL, NULL,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
amk_tokenizer_init (AmkTokenizer *self)
{
  int n = 0;

  self->unk_id = -1;
  self->bos_id = -1;
  self->eos_id = -1;
  self->added = g_array_new (FALSE, TRUE, sizeof (AddedToken));
  g_array_set_clear_func (self->added, amk_tokenizer_added_token_clear);
  self->added_by_text = g_hash_table_new (g_str_hash, g_str_equal);
  self->steps = g_ptr_array_new_with_free_func (amk_tokenizer_pre_step_free);
  self->prefix = g_array_new (FALSE, FALSE, sizeof (gint32));
  self->suffix = g_array_new (FALSE, FALSE, sizeof (gint32));
  self->cache = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_mutex_init (&self->cache_lock);

  /* bytes_to_unicode(): printable Latin-1 stands for itself, the other bytes for
   * U+0100 onwards, in byte order. */
  for (guint i = 0; i < G_N_ELEMENTS (self->char_to_byte); i++)
    self->char_to_byte[i] = -1;
  for (guint b = 0; b < 256; b++)
    {
      gunichar c;

      if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        c = b;
      else
        c = 256 + n++;
      memset (self->byte_to_char[b], 0, sizeof self->byte_to_char[b]);
      g_unichar_to_utf8 (c, self->byte_to_char[b]);
      self->char_to_byte[c] = (gint16) b;
    }
}

/* ---- errors ------------------------------------------------------------------ */

/**
 * amk_tokenizer_error_quark:
 *
 * Gets the quark of the %AMK_TOKENIZER_ERROR domain.
 *
 * Returns: the error domain of [class@Amk.Tokenizer]
 */
G_DEFINE_QUARK (amk-tokenizer-error-quark, amk_tokenizer_error)

void
amk_tokenizer_set_field_error (GError            **error,
                               AmkTokenizerError   code,
                               const char         *source,
                               const char         *field,
                               const char         *what)
{
  g_set_error (error, AMK_TOKENIZER_ERROR, code,
               _("Tokenizer “%s”: field “%s” %s"), source, field, what);
}

void
amk_tokenizer_set_unsupported_error (GError            **error,
                                     AmkTokenizerError   code,
                                     const char         *source,
                                     const char         *field,
                                     const char         *value)
{
  g_set_error (error, AMK_TOKENIZER_ERROR, code,
               _("Tokenizer “%s”: field “%s” is “%s”, which AmkTokenizer does not support "
                 "(it reads byte-level BPE tokenizers only)"), source, field, value);
}

/* ---- encoding ------------------------------------------------------------------ */

/* The text between added tokens: pre-tokenized, then each word through BPE. */
static gboolean
encode_text (AmkTokenizer  *self,
             const char    *text,
             gsize          len,
             GArray        *out,
             GError       **error)
{
  g_autoptr(GPtrArray) pieces = NULL;

  if (!amk_tokenizer_pre_tokenize (self, text, len, &pieces, error))
    return FALSE;
  for (guint i = 0; i < pieces->len; i++)
    amk_tokenizer_encode_word (self, g_ptr_array_index (pieces, i), out);
  return TRUE;
}

/**
 * amk_tokenizer_encode:
 * @self: a tokenizer
 * @text: UTF-8 text
 * @add_special: whether to add what the model puts around a text: the
 *   post-processor's special tokens and, with [property@Amk.Tokenizer:add-bos], the BOS
 * @n_ids: (out): return location for the number of ids
 * @error: return location for a #GError
 *
 * Cuts @text into tokens. Text that spells an added token becomes that token.
 * Invalid UTF-8 fails with %AMK_TOKENIZER_ERROR_INVALID_TEXT; a pre-tokenizer's
 * regular expression that gives up on the text with
 * %AMK_TOKENIZER_ERROR_PATTERN_FAILED; a tokenizer made without a vocabulary (with
 * g_object_new(), `Amk.Tokenizer()` in a binding, rather than one of its constructors)
 * with %AMK_TOKENIZER_ERROR_INVALID_VOCAB.
 *
 * Returns: (array length=n_ids) (transfer full) (nullable): the token ids, or %NULL
 *   with @error set
 */
gint32 *
amk_tokenizer_encode (AmkTokenizer  *self,
                      const char    *text,
                      gboolean       add_special,
                      gsize         *n_ids,
                      GError       **error)
{
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) segments = g_array_new (FALSE, FALSE, sizeof (Segment));
  g_autoptr(GPtrArray) normalized = g_ptr_array_new_with_free_func (g_free);
  const char *end = NULL;
  gsize len;

  g_return_val_if_fail (AMK_IS_TOKENIZER (self), NULL);
  g_return_val_if_fail (text != NULL, NULL);
  g_return_val_if_fail (n_ids != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  *n_ids = 0;
  if (self->vocab == NULL)
    {
      /* `Amk.Tokenizer()` from a binding: made without a constructor, no vocabulary */
      g_set_error_literal (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                           _("The tokenizer has no vocabulary: make it with "
                             "amk_tokenizer_new_from_json_file(), "
                             "amk_tokenizer_new_from_json_data() or "
                             "amk_tokenizer_new_from_vocab()"));
      return NULL;
    }
  len = strlen (text);
  if (!g_utf8_validate_len (text, len, &end))
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_TEXT,
                   _("The text to tokenize is not valid UTF-8 (at byte %zu)"),
                   (size_t) (end - text));
      return NULL;
    }

  if (add_special)
    {
      if (self->add_bos && self->bos_id >= 0 &&
          (self->prefix->len == 0 || g_array_index (self->prefix, gint32, 0) != self->bos_id))
        g_array_append_val (out, self->bos_id);
      g_array_append_vals (out, self->prefix->data, self->prefix->len);
    }

  {
    Segment all = { text, len, -1 };
    g_array_append_val (segments, all);
  }
  amk_tokenizer_split_added (self, segments, FALSE);
  if (self->nfc)
    {
      /* the normalizer sees the text between the non-normalized added tokens */
      for (guint s = 0; s < segments->len; s++)
        {
          Segment *seg = &g_array_index (segments, Segment, s);
          char *normal;

          if (seg->id >= 0 || seg->len == 0)
            continue;
          normal = g_utf8_normalize (seg->start, (gssize) seg->len, G_NORMALIZE_NFC);
          g_assert (normal != NULL);   /* the text is valid UTF-8 */
          g_ptr_array_add (normalized, normal);
          seg->start = normal;
          seg->len = strlen (normal);
        }
    }
  amk_tokenizer_split_added (self, segments, TRUE);
  for (guint s = 0; s < segments->len; s++)
    {
      Segment seg = g_array_index (segments, Segment, s);

      if (seg.id >= 0)
        g_array_append_val (out, seg.id);
      else if (seg.len > 0 && !encode_text (self, seg.start, seg.len, out, error))
        return NULL;
    }

  if (add_special)
    g_array_append_vals (out, self->suffix->data, self->suffix->len);

  *n_ids = out->len;
  if (out->len == 0)
    return g_new0 (gint32, 1);   /* not NULL: NULL means an error */
  return (gint32 *) g_array_free (g_steal_pointer (&out), FALSE);
}

/* ---- accessors ----------------------------------------------------------------- */

/**
 * amk_tokenizer_get_vocab_size:
 * @self: a tokenizer
 *
 * Gets [property@Amk.Tokenizer:vocab-size].
 *
 * Returns: one more than the largest token id
 */
guint
amk_tokenizer_get_vocab_size (AmkTokenizer *self)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), 0);

  return self->vocab_size;
}

/**
 * amk_tokenizer_get_bos_id:
 * @self: a tokenizer
 *
 * Gets [property@Amk.Tokenizer:bos-id].
 *
 * Returns: the beginning-of-sequence token, or -1
 */
gint32
amk_tokenizer_get_bos_id (AmkTokenizer *self)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), -1);

  return self->bos_id;
}

/**
 * amk_tokenizer_set_bos_id:
 * @self: a tokenizer
 * @bos_id: a token id below [property@Amk.Tokenizer:vocab-size], or -1 for none
 *
 * Sets [property@Amk.Tokenizer:bos-id]. @bos_id must be -1 or below
 * [property@Amk.Tokenizer:vocab-size]: another id is a programmer error (a critical
 * warning, and the id stays as it was), also through the property; check an id that
 * comes from outside (a model's metadata) first.
 */
void
amk_tokenizer_set_bos_id (AmkTokenizer *self,
                          gint32        bos_id)
{
  g_return_if_fail (AMK_IS_TOKENIZER (self));
  g_return_if_fail (bos_id >= -1 && (bos_id < 0 || (guint) bos_id < self->vocab_size));

  if (self->bos_id == bos_id)
    return;
  self->bos_id = bos_id;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_BOS_ID]);
}

/**
 * amk_tokenizer_get_eos_id:
 * @self: a tokenizer
 *
 * Gets [property@Amk.Tokenizer:eos-id].
 *
 * Returns: the end-of-sequence token, or -1
 */
gint32
amk_tokenizer_get_eos_id (AmkTokenizer *self)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), -1);

  return self->eos_id;
}

/**
 * amk_tokenizer_set_eos_id:
 * @self: a tokenizer
 * @eos_id: a token id below [property@Amk.Tokenizer:vocab-size], or -1 for none
 *
 * Sets [property@Amk.Tokenizer:eos-id]. @eos_id must be -1 or below
 * [property@Amk.Tokenizer:vocab-size]: another id is a programmer error (a critical
 * warning, and the id stays as it was), also through the property; check an id that
 * comes from outside (a model's metadata) first.
 */
void
amk_tokenizer_set_eos_id (AmkTokenizer *self,
                          gint32        eos_id)
{
  g_return_if_fail (AMK_IS_TOKENIZER (self));
  g_return_if_fail (eos_id >= -1 && (eos_id < 0 || (guint) eos_id < self->vocab_size));

  if (self->eos_id == eos_id)
    return;
  self->eos_id = eos_id;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_EOS_ID]);
}

/**
 * amk_tokenizer_get_add_bos:
 * @self: a tokenizer
 *
 * Gets [property@Amk.Tokenizer:add-bos].
 *
 * Returns: whether encoding with special tokens puts the BOS first
 */
gboolean
amk_tokenizer_get_add_bos (AmkTokenizer *self)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), FALSE);

  return self->add_bos;
}

/**
 * amk_tokenizer_set_add_bos:
 * @self: a tokenizer
 * @add_bos: whether encoding with special tokens puts the BOS first
 *
 * Sets [property@Amk.Tokenizer:add-bos].
 */
void
amk_tokenizer_set_add_bos (AmkTokenizer *self,
                           gboolean      add_bos)
{
  g_return_if_fail (AMK_IS_TOKENIZER (self));

  add_bos = !!add_bos;
  if (self->add_bos == add_bos)
    return;
  self->add_bos = add_bos;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_ADD_BOS]);
}

/**
 * amk_tokenizer_get_chat_template:
 * @self: a tokenizer
 *
 * Gets [property@Amk.Tokenizer:chat-template].
 *
 * Returns: (nullable): the model's chat template, or %NULL
 */
const char *
amk_tokenizer_get_chat_template (AmkTokenizer *self)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), NULL);

  return self->chat_template;
}

/**
 * amk_tokenizer_set_chat_template:
 * @self: a tokenizer
 * @chat_template: (nullable): the model's chat template, or %NULL for none
 *
 * Sets [property@Amk.Tokenizer:chat-template].
 */
void
amk_tokenizer_set_chat_template (AmkTokenizer *self,
                                 const char   *chat_template)
{
  g_return_if_fail (AMK_IS_TOKENIZER (self));

  if (g_strcmp0 (self->chat_template, chat_template) == 0)
    return;
  g_free (self->chat_template);
  self->chat_template = g_strdup (chat_template);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_CHAT_TEMPLATE]);
}

/**
 * amk_tokenizer_token_to_id:
 * @self: a tokenizer
 * @token: a token as the vocabulary spells it (byte-level characters: "Ġthe" for
 *   " the") or an added token ("<|im_end|>")
 *
 * Looks a token up.
 *
 * Returns: its id, or -1 if there is no such token
 */
gint32
amk_tokenizer_token_to_id (AmkTokenizer *self,
                           const char   *token)
{
  gpointer index;

  g_return_val_if_fail (AMK_IS_TOKENIZER (self), -1);
  g_return_val_if_fail (token != NULL, -1);

  index = g_hash_table_lookup (self->added_by_text, token);
  if (index != NULL)
    return g_array_index (self->added, AddedToken, GPOINTER_TO_UINT (index) - 1).id;
  if (self->vocab == NULL)
    return -1;
  return amk_tokenizer_lookup_vocab (self, token);
}

/**
 * amk_tokenizer_id_to_token:
 * @self: a tokenizer
 * @id: a token id
 *
 * Looks a token up by id.
 *
 * Returns: (transfer none) (nullable): the token as the vocabulary spells it, or
 *   %NULL if no token has @id
 */
const char *
amk_tokenizer_id_to_token (AmkTokenizer *self,
                           gint32        id)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), NULL);

  if (id < 0 || (guint) id >= self->vocab_size)
    return NULL;
  return self->id_to_token[id];
}

/**
 * amk_tokenizer_is_special:
 * @self: a tokenizer
 * @id: a token id
 *
 * Tells whether @id is a special token (an added token marked `special`, or a GGUF
 * control token), the kind `skip_special_tokens` leaves out.
 *
 * Returns: %TRUE for a special token
 */
gboolean
amk_tokenizer_is_special (AmkTokenizer *self,
                          gint32        id)
{
  g_return_val_if_fail (AMK_IS_TOKENIZER (self), FALSE);

  if (id < 0 || (guint) id >= self->vocab_size)
    return FALSE;
  return self->special[id] != 0;
}

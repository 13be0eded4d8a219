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
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include <glib/gi18n-lib.h>
#include <json-glib/json-glib.h>

#include "amk-tokenizer.h"
#include "amk-loader-private.h"

/* Bounds on what a file may claim, so that an untrusted file cannot make us allocate
 * without limit. */
#define MAX_JSON_DEPTH      128
#define MAX_CACHE_WORDS     65536
#define MAX_CACHE_WORD_LEN  256

/* Unicode White_Space (what Oniguruma's and Rust's \s and char::is_whitespace mean). */
#define WHITE_SPACE_CLASS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                          "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* The pre-tokenizer regexes of GPT-2 (ByteLevel's own), Llama 3 and Qwen 2. */
#define GPT2_PATTERN \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_PATTERN \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" \
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
  "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GGUF tokenizer.ggml.token_type values. */
enum {
  GGUF_TOKEN_NORMAL = 1,
  GGUF_TOKEN_UNKNOWN = 2,
  GGUF_TOKEN_CONTROL = 3,
  GGUF_TOKEN_USER_DEFINED = 4,
  GGUF_TOKEN_UNUSED = 5,
  GGUF_TOKEN_BYTE = 6,
};

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

  char         byte_to_char[256][3];   /* GPT-2's bytes_to_unicode, as UTF-8 */
  gint16       char_to_byte[324];      /* the inverse; -1 for other characters */

  GMutex       cache_lock;
  GHashTable  *cache;          /* word -> gint32[1 + n]: n then the ids */
};

enum {
  PROP_0,
  PROP_VOCAB_SIZE,
  PROP_BOS_ID,
  PROP_EOS_ID,
  PROP_ADD_BOS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (AmkTokenizer, amk_tokenizer, G_TYPE_OBJECT)

static void
pre_step_free (gpointer data)
{
  PreStep *step = data;

  g_clear_pointer (&step->regex, g_regex_unref);
  g_free (step);
}

static void
added_token_clear (gpointer data)
{
  AddedToken *token = data;

  g_free (token->content);
}

static void
amk_tokenizer_finalize (GObject *object)
{
  AmkTokenizer *self = AMK_TOKENIZER (object);

  if (self->id_to_token != NULL)
    for (guint i = 0; i < self->vocab_size; i++)
      g_free (self->id_to_token[i]);
  g_free (self->id_to_token);
  g_free (self->special);
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
   * for GGUF metadata the caller sets it from `tokenizer.ggml.bos_token_id`.
   */
  properties[PROP_BOS_ID] =
    g_param_spec_int ("bos-id", NULL, NULL, -1, G_MAXINT32, -1,
                      G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * AmkTokenizer:eos-id:
   *
   * The end-of-sequence token, or -1: the last special token a `TemplateProcessing`
   * post-processor puts after the text, or what the caller sets (from
   * `tokenizer.ggml.eos_token_id` or the model's generation config).
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
  g_array_set_clear_func (self->added, added_token_clear);
  self->added_by_text = g_hash_table_new (g_str_hash, g_str_equal);
  self->steps = g_ptr_array_new_with_free_func (pre_step_free);
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

static void
set_field_error (GError     **error,
                 const char  *source,
                 const char  *field,
                 const char  *what)
{
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
               _("Tokenizer “%s”: field “%s” %s"), source, field, what);
}

static void
set_unsupported_error (GError     **error,
                       const char  *source,
                       const char  *field,
                       const char  *value)
{
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
               _("Tokenizer “%s”: field “%s” is “%s”, which AmkTokenizer does not support "
                 "(it reads byte-level BPE tokenizers only)"), source, field, value);
}

/* ---- building ------------------------------------------------------------------ */

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
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                 _("Tokenizer “%s”: field “%s” is not a regular expression GRegex accepts: %s"),
                 source, field, local_error->message);
  return regex;
}

static gboolean
add_split_step (AmkTokenizer  *self,
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

static gboolean
add_byte_level_step (AmkTokenizer  *self,
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

static gboolean
has_byte_level_step (AmkTokenizer *self)
{
  for (guint i = 0; i < self->steps->len; i++)
    if (((PreStep *) g_ptr_array_index (self->steps, i))->kind == STEP_BYTE_LEVEL)
      return TRUE;
  return FALSE;
}

/* Makes the id table; every id must be below @limit. */
static void
alloc_ids (AmkTokenizer *self,
           guint         vocab_size)
{
  self->vocab_size = vocab_size;
  self->id_to_token = g_new0 (char *, MAX (vocab_size, 1));
  self->special = g_new0 (guint8, MAX (vocab_size, 1));
  self->vocab = g_hash_table_new (g_str_hash, g_str_equal);
}

static gboolean
set_token (AmkTokenizer  *self,
           const char    *token,
           gint64         id,
           const char    *source,
           const char    *field,
           GError       **error)
{
  if (id < 0 || id >= self->vocab_size)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “%s”: token “%s” has id %" PRId64
                     ", outside 0 to %u"), source, field, token, (int64_t) id,
                   self->vocab_size - 1);
      return FALSE;
    }
  if (self->id_to_token[id] != NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “%s”: id %" PRId64 " is given to both “%s” and “%s”"),
                   source, field, (int64_t) id, self->id_to_token[id], token);
      return FALSE;
    }
  if (g_hash_table_contains (self->vocab, token))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “%s”: token “%s” appears twice"),
                   source, field, token);
      return FALSE;
    }
  self->id_to_token[id] = g_strdup (token);
  g_hash_table_insert (self->vocab, self->id_to_token[id], GINT_TO_POINTER ((gint) id + 1));
  return TRUE;
}

static gint32
lookup_vocab (AmkTokenizer *self,
              const char   *token)
{
  gpointer value = g_hash_table_lookup (self->vocab, token);

  return value != NULL ? GPOINTER_TO_INT (value) - 1 : -1;
}

static void
alloc_merges (AmkTokenizer *self,
              gsize         n_merges)
{
  self->merges = g_new0 (Merge, MAX (n_merges, 1));
  self->n_merges = 0;
  self->merge_table = g_hash_table_new (g_int64_hash, g_int64_equal);
}

/* One merge, of rank self->n_merges. A later duplicate replaces the earlier one, as in
 * tokenizers. */
static gboolean
add_merge (AmkTokenizer  *self,
           const char    *left,
           const char    *right,
           gsize          index,
           const char    *source,
           GError       **error)
{
  g_autofree char *joined = g_strconcat (left, right, NULL);
  gint32 a = lookup_vocab (self, left);
  gint32 b = lookup_vocab (self, right);
  gint32 c = lookup_vocab (self, joined);
  Merge *merge;

  if (a < 0 || b < 0 || c < 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “merges”: merge %zu (“%s” “%s”) names a token "
                     "that is not in the vocabulary (“%s”)"),
                   source, index, left, right, a < 0 ? left : b < 0 ? right : joined);
      return FALSE;
    }
  merge = &self->merges[self->n_merges];
  merge->pair = ((guint64) (guint32) a << 32) | (guint32) b;
  merge->rank = (guint32) self->n_merges;
  merge->new_id = c;
  self->n_merges++;
  g_hash_table_insert (self->merge_table, &merge->pair, merge);
  return TRUE;
}

/* Splits "a b" at its first space. */
static gboolean
add_merge_string (AmkTokenizer  *self,
                  const char    *line,
                  gsize          index,
                  const char    *source,
                  GError       **error)
{
  const char *space = strchr (line, ' ');
  g_autofree char *left = NULL;

  if (space == NULL || space == line || space[1] == '\0')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “merges”: merge %zu (“%s”) is not two tokens "
                     "separated by a space"), source, index, line);
      return FALSE;
    }
  left = g_strndup (line, space - line);
  return add_merge (self, left, space + 1, index, source, error);
}

static gboolean
add_added_token (AmkTokenizer  *self,
                 const char    *content,
                 gint64         id,
                 gboolean       special,
                 gboolean       normalized,
                 gboolean       lstrip,
                 gboolean       rstrip,
                 gboolean       single_word,
                 const char    *source,
                 GError       **error)
{
  AddedToken token = { 0 };

  if (content[0] == '\0' || id < 0 || id >= self->vocab_size)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “added_tokens”: token “%s” with id %" PRId64
                     " is empty or its id is outside 0 to %u"),
                   source, content, (int64_t) id, self->vocab_size - 1);
      return FALSE;
    }
  if (g_hash_table_contains (self->added_by_text, content))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “added_tokens”: token “%s” appears twice"),
                   source, content);
      return FALSE;
    }
  if (self->id_to_token[id] == NULL)
    {
      if (!set_token (self, content, id, source, "added_tokens", error))
        return FALSE;
    }
  else if (strcmp (self->id_to_token[id], content) != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “added_tokens”: token “%s” has id %" PRId64
                     ", which the vocabulary gives to “%s”"),
                   source, content, (int64_t) id, self->id_to_token[id]);
      return FALSE;
    }
  token.content = g_strdup (content);
  token.len = strlen (content);
  token.id = (gint32) id;
  token.special = special;
  token.normalized = normalized;
  token.lstrip = lstrip;
  token.rstrip = rstrip;
  token.single_word = single_word;
  g_array_append_val (self->added, token);
  g_hash_table_insert (self->added_by_text,
                       g_array_index (self->added, AddedToken, self->added->len - 1).content,
                       GUINT_TO_POINTER (self->added->len));
  if (special)
    self->special[id] = 1;
  return TRUE;
}

static void
rebuild_added_index (AmkTokenizer *self)
{
  /* the array may have moved while it grew */
  g_hash_table_remove_all (self->added_by_text);
  for (guint i = 0; i < self->added->len; i++)
    g_hash_table_insert (self->added_by_text,
                         g_array_index (self->added, AddedToken, i).content,
                         GUINT_TO_POINTER (i + 1));
}

/* ---- tokenizer.json ------------------------------------------------------------ */

static JsonObject *
get_object (JsonObject  *object,
            const char  *member,
            gboolean     optional,
            const char  *source,
            const char  *field,
            GError     **error)
{
  JsonNode *node = json_object_get_member (object, member);

  if ((node == NULL || JSON_NODE_HOLDS_NULL (node)) && optional)
    return NULL;
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT (node))
    {
      set_field_error (error, source, field, _("is missing or not an object"));
      return NULL;
    }
  return json_node_get_object (node);
}

static JsonArray *
get_array (JsonObject  *object,
           const char  *member,
           gboolean     optional,
           const char  *source,
           const char  *field,
           GError     **error)
{
  JsonNode *node = json_object_get_member (object, member);

  if ((node == NULL || JSON_NODE_HOLDS_NULL (node)) && optional)
    return NULL;
  if (node == NULL || !JSON_NODE_HOLDS_ARRAY (node))
    {
      set_field_error (error, source, field, _("is missing or not an array"));
      return NULL;
    }
  return json_node_get_array (node);
}

/* A string member; NULL with @error set if it is missing (and not optional) or no
 * string. */
static const char *
get_string (JsonObject  *object,
            const char  *member,
            gboolean     optional,
            const char  *source,
            const char  *field,
            GError     **error)
{
  JsonNode *node = json_object_get_member (object, member);

  if ((node == NULL || JSON_NODE_HOLDS_NULL (node)) && optional)
    return NULL;
  if (node == NULL || json_node_get_value_type (node) != G_TYPE_STRING)
    {
      set_field_error (error, source, field, _("is missing or not a string"));
      return NULL;
    }
  return json_node_get_string (node);
}

static gboolean
get_bool (JsonObject  *object,
          const char  *member,
          gboolean     fallback,
          gboolean    *out,
          const char  *source,
          const char  *field,
          GError     **error)
{
  JsonNode *node = json_object_get_member (object, member);

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    {
      *out = fallback;
      return TRUE;
    }
  if (json_node_get_value_type (node) != G_TYPE_BOOLEAN)
    {
      set_field_error (error, source, field, _("is not true or false"));
      return FALSE;
    }
  *out = json_node_get_boolean (node);
  return TRUE;
}

static gboolean
get_int (JsonNode    *node,
         gint64      *out,
         const char  *source,
         const char  *field,
         GError     **error)
{
  if (node == NULL || json_node_get_value_type (node) != G_TYPE_INT64)
    {
      set_field_error (error, source, field, _("is missing or not an integer"));
      return FALSE;
    }
  *out = json_node_get_int (node);
  return TRUE;
}

static gboolean parse_pre_tokenizer (AmkTokenizer *self, JsonObject *object,
                                     const char *source, const char *field, int depth,
                                     GError **error);

static gboolean
parse_pre_tokenizer (AmkTokenizer  *self,
                     JsonObject    *object,
                     const char    *source,
                     const char    *field,
                     int            depth,
                     GError       **error)
{
  g_autofree char *type_field = g_strconcat (field, ".type", NULL);
  const char *type = get_string (object, "type", FALSE, source, type_field, error);

  if (type == NULL)
    return FALSE;

  if (strcmp (type, "Sequence") == 0)
    {
      g_autofree char *list_field = g_strconcat (field, ".pretokenizers", NULL);
      JsonArray *list = get_array (object, "pretokenizers", FALSE, source, list_field, error);

      if (list == NULL)
        return FALSE;
      if (depth > 8)
        {
          set_field_error (error, source, list_field, _("nests sequences too deeply"));
          return FALSE;
        }
      for (guint i = 0; i < json_array_get_length (list); i++)
        {
          JsonNode *node = json_array_get_element (list, i);
          g_autofree char *item_field = g_strdup_printf ("%s[%u]", list_field, i);

          if (!JSON_NODE_HOLDS_OBJECT (node))
            {
              set_field_error (error, source, item_field, _("is not an object"));
              return FALSE;
            }
          if (!parse_pre_tokenizer (self, json_node_get_object (node), source, item_field,
                                    depth + 1, error))
            return FALSE;
        }
      return TRUE;
    }

  if (strcmp (type, "ByteLevel") == 0)
    {
      gboolean use_regex, add_prefix_space;

      if (!get_bool (object, "use_regex", TRUE, &use_regex, source, field, error) ||
          !get_bool (object, "add_prefix_space", TRUE, &add_prefix_space, source, field, error))
        return FALSE;
      return add_byte_level_step (self, use_regex, add_prefix_space, error);
    }

  if (strcmp (type, "Digits") == 0)
    {
      gboolean individual;

      if (!get_bool (object, "individual_digits", FALSE, &individual, source, field, error))
        return FALSE;
      /* Rust's char::is_numeric is \p{N} */
      return add_split_step (self, individual ? "\\p{N}" : "\\p{N}+", source, field, error);
    }

  if (strcmp (type, "Split") == 0)
    {
      g_autofree char *pattern_field = g_strconcat (field, ".pattern", NULL);
      g_autofree char *behavior_field = g_strconcat (field, ".behavior", NULL);
      JsonObject *pattern = get_object (object, "pattern", FALSE, source, pattern_field, error);
      const char *behavior;
      const char *regex, *literal;
      gboolean invert;

      if (pattern == NULL)
        return FALSE;
      behavior = get_string (object, "behavior", FALSE, source, behavior_field, error);
      if (behavior == NULL)
        return FALSE;
      if (strcmp (behavior, "Isolated") != 0)
        {
          set_unsupported_error (error, source, behavior_field, behavior);
          return FALSE;
        }
      if (!get_bool (object, "invert", FALSE, &invert, source, field, error))
        return FALSE;
      if (invert)
        {
          set_unsupported_error (error, source, field, "invert");
          return FALSE;
        }
      regex = get_string (pattern, "Regex", TRUE, source, pattern_field, error);
      literal = get_string (pattern, "String", TRUE, source, pattern_field, error);
      if (regex == NULL && literal == NULL)
        {
          set_field_error (error, source, pattern_field, _("has neither “Regex” nor “String”"));
          return FALSE;
        }
      if (regex != NULL)
        return add_split_step (self, regex, source, pattern_field, error);
      else
        {
          g_autofree char *escaped = g_regex_escape_string (literal, -1);

          if (literal[0] == '\0')
            {
              set_field_error (error, source, pattern_field, _("is an empty string"));
              return FALSE;
            }
          return add_split_step (self, escaped, source, pattern_field, error);
        }
    }

  set_unsupported_error (error, source, type_field, type);
  return FALSE;
}

/* TemplateProcessing (its "single" template), ByteLevel (adds nothing), or a Sequence
 * of them. */
static gboolean
parse_post_processor (AmkTokenizer  *self,
                      JsonObject    *object,
                      const char    *source,
                      int            depth,
                      GError       **error)
{
  const char *type = get_string (object, "type", FALSE, source, "post_processor.type", error);

  if (type == NULL)
    return FALSE;
  if (strcmp (type, "ByteLevel") == 0)
    return TRUE;
  if (strcmp (type, "Sequence") == 0)
    {
      JsonArray *list = get_array (object, "processors", FALSE, source,
                                   "post_processor.processors", error);

      if (list == NULL)
        return FALSE;
      if (depth > 8)
        {
          set_field_error (error, source, "post_processor", _("nests sequences too deeply"));
          return FALSE;
        }
      for (guint i = 0; i < json_array_get_length (list); i++)
        {
          JsonNode *node = json_array_get_element (list, i);

          if (!JSON_NODE_HOLDS_OBJECT (node))
            {
              set_field_error (error, source, "post_processor.processors", _("holds a non-object"));
              return FALSE;
            }
          if (!parse_post_processor (self, json_node_get_object (node), source, depth + 1, error))
            return FALSE;
        }
      return TRUE;
    }
  if (strcmp (type, "TemplateProcessing") == 0)
    {
      JsonArray *single = get_array (object, "single", FALSE, source,
                                     "post_processor.single", error);
      JsonObject *specials;
      gboolean seen_sequence = FALSE;

      if (single == NULL)
        return FALSE;
      specials = get_object (object, "special_tokens", FALSE, source,
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
              set_field_error (error, source, "post_processor.single", _("holds a non-object"));
              return FALSE;
            }
          piece = json_node_get_object (node);
          if (json_object_has_member (piece, "Sequence"))
            {
              if (seen_sequence)
                {
                  set_field_error (error, source, "post_processor.single",
                                   _("names the sequence twice"));
                  return FALSE;
                }
              seen_sequence = TRUE;
              continue;
            }
          special = get_object (piece, "SpecialToken", FALSE, source,
                                "post_processor.single.SpecialToken", error);
          if (special == NULL)
            return FALSE;
          name = get_string (special, "id", FALSE, source,
                             "post_processor.single.SpecialToken.id", error);
          if (name == NULL)
            return FALSE;
          entry = get_object (specials, name, FALSE, source,
                              "post_processor.special_tokens", error);
          if (entry == NULL)
            return FALSE;
          ids = get_array (entry, "ids", FALSE, source,
                           "post_processor.special_tokens.ids", error);
          if (ids == NULL)
            return FALSE;
          for (guint k = 0; k < json_array_get_length (ids); k++)
            {
              gint64 id;
              gint32 id32;

              if (!get_int (json_array_get_element (ids, k), &id, source,
                            "post_processor.special_tokens.ids", error))
                return FALSE;
              if (id < 0 || id >= self->vocab_size)
                {
                  set_field_error (error, source, "post_processor.special_tokens.ids",
                                   _("holds an id outside the vocabulary"));
                  return FALSE;
                }
              id32 = (gint32) id;
              g_array_append_val (seen_sequence ? self->suffix : self->prefix, id32);
            }
        }
      if (!seen_sequence)
        {
          set_field_error (error, source, "post_processor.single", _("has no Sequence"));
          return FALSE;
        }
      if (self->prefix->len > 0)
        self->bos_id = g_array_index (self->prefix, gint32, 0);
      if (self->suffix->len > 0)
        self->eos_id = g_array_index (self->suffix, gint32, self->suffix->len - 1);
      return TRUE;
    }
  set_unsupported_error (error, source, "post_processor.type", type);
  return FALSE;
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
      set_field_error (error, source, "(top level)", _("is not an object"));
      return NULL;
    }
  top = json_node_get_object (root);

  node = json_object_get_member (top, "normalizer");
  if (node != NULL && !JSON_NODE_HOLDS_NULL (node))
    {
      JsonObject *normalizer = get_object (top, "normalizer", FALSE, source, "normalizer", error);
      const char *kind;

      if (normalizer == NULL)
        return NULL;
      kind = get_string (normalizer, "type", FALSE, source, "normalizer.type", error);
      if (kind == NULL)
        return NULL;
      if (strcmp (kind, "NFC") != 0)
        {
          set_unsupported_error (error, source, "normalizer.type", kind);
          return NULL;
        }
      self->nfc = TRUE;
    }

  model = get_object (top, "model", FALSE, source, "model", error);
  if (model == NULL)
    return NULL;
  type = get_string (model, "type", TRUE, source, "model.type", error);
  if (type == NULL && error != NULL && *error != NULL)
    return NULL;
  if (type != NULL && strcmp (type, "BPE") != 0)
    {
      set_unsupported_error (error, source, "model.type", type);
      return NULL;
    }
  if (!get_bool (model, "byte_fallback", FALSE, &flag, source, "model.byte_fallback", error))
    return NULL;
  if (flag)
    {
      set_unsupported_error (error, source, "model.byte_fallback", "true");
      return NULL;
    }
  for (guint i = 0; i < 2; i++)
    {
      const char *name = i == 0 ? "continuing_subword_prefix" : "end_of_word_suffix";
      g_autofree char *field = g_strconcat ("model.", name, NULL);
      const char *value = get_string (model, name, TRUE, source, field, error);

      if (value == NULL && error != NULL && *error != NULL)
        return NULL;
      if (value != NULL && value[0] != '\0')
        {
          set_unsupported_error (error, source, field, value);
          return NULL;
        }
    }
  if (!get_bool (model, "ignore_merges", FALSE, &self->ignore_merges, source,
                 "model.ignore_merges", error))
    return NULL;

  vocab = get_object (model, "vocab", FALSE, source, "model.vocab", error);
  if (vocab == NULL)
    return NULL;
  merges = get_array (model, "merges", FALSE, source, "model.merges", error);
  if (merges == NULL)
    return NULL;
  added = get_array (top, "added_tokens", TRUE, source, "added_tokens", error);
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

      if (!get_int (node, &id, source, "model.vocab", error))
        return NULL;
      max_id = MAX (max_id, id);
    }
  for (guint i = 0; i < n_added; i++)
    {
      gint64 id;

      node = json_array_get_element (added, i);
      if (!JSON_NODE_HOLDS_OBJECT (node))
        {
          set_field_error (error, source, "added_tokens", _("holds a non-object"));
          return NULL;
        }
      if (!get_int (json_object_get_member (json_node_get_object (node), "id"), &id,
                    source, "added_tokens.id", error))
        return NULL;
      max_id = MAX (max_id, id);
    }
  if (max_id < 0 || (guint64) max_id >= (guint64) n_vocab + n_added)
    {
      set_field_error (error, source, "model.vocab",
                       max_id < 0 ? _("is empty") : _("has ids larger than the number of tokens"));
      return NULL;
    }
  alloc_ids (self, (guint) max_id + 1);

  json_object_iter_init (&iter, vocab);
  while (json_object_iter_next (&iter, &member, &node))
    if (!set_token (self, member, json_node_get_int (node), source, "model.vocab", error))
      return NULL;

  unk = get_string (model, "unk_token", TRUE, source, "model.unk_token", error);
  if (unk == NULL && error != NULL && *error != NULL)
    return NULL;

  for (guint i = 0; i < n_added; i++)
    {
      JsonObject *object = json_node_get_object (json_array_get_element (added, i));
      const char *content = get_string (object, "content", FALSE, source,
                                        "added_tokens.content", error);
      gboolean special, normalized, lstrip, rstrip, single_word;

      if (content == NULL ||
          !get_bool (object, "special", FALSE, &special, source, "added_tokens.special", error) ||
          !get_bool (object, "normalized", !special, &normalized, source,
                     "added_tokens.normalized", error) ||
          !get_bool (object, "lstrip", FALSE, &lstrip, source, "added_tokens.lstrip", error) ||
          !get_bool (object, "rstrip", FALSE, &rstrip, source, "added_tokens.rstrip", error) ||
          !get_bool (object, "single_word", FALSE, &single_word, source,
                     "added_tokens.single_word", error))
        return NULL;
      if (!add_added_token (self, content,
                            json_node_get_int (json_object_get_member (object, "id")),
                            special, normalized, lstrip, rstrip, single_word, source, error))
        return NULL;
    }
  rebuild_added_index (self);

  if (unk != NULL)
    {
      self->unk_id = amk_tokenizer_token_to_id (self, unk);
      if (self->unk_id < 0)
        {
          set_field_error (error, source, "model.unk_token", _("names no token"));
          return NULL;
        }
    }

  alloc_merges (self, json_array_get_length (merges));
  for (guint i = 0; i < json_array_get_length (merges); i++)
    {
      node = json_array_get_element (merges, i);
      if (json_node_get_value_type (node) == G_TYPE_STRING)
        {
          if (!add_merge_string (self, json_node_get_string (node), i, source, error))
            return NULL;
        }
      else if (JSON_NODE_HOLDS_ARRAY (node) &&
               json_array_get_length (json_node_get_array (node)) == 2 &&
               json_node_get_value_type (json_array_get_element (json_node_get_array (node), 0)) == G_TYPE_STRING &&
               json_node_get_value_type (json_array_get_element (json_node_get_array (node), 1)) == G_TYPE_STRING)
        {
          JsonArray *pair = json_node_get_array (node);

          if (!add_merge (self, json_array_get_string_element (pair, 0),
                          json_array_get_string_element (pair, 1), i, source, error))
            return NULL;
        }
      else
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       _("Tokenizer “%s”: field “merges”: merge %u is neither “a b” nor [\"a\", \"b\"]"),
                       source, i);
          return NULL;
        }
    }

  pre = get_object (top, "pre_tokenizer", TRUE, source, "pre_tokenizer", error);
  if (pre == NULL && error != NULL && *error != NULL)
    return NULL;
  if (pre != NULL && !parse_pre_tokenizer (self, pre, source, "pre_tokenizer", 0, error))
    return NULL;
  if (!has_byte_level_step (self))
    {
      set_unsupported_error (error, source, "pre_tokenizer", _("(without ByteLevel)"));
      return NULL;
    }

  post = get_object (top, "post_processor", TRUE, source, "post_processor", error);
  if (post == NULL && error != NULL && *error != NULL)
    return NULL;
  if (post != NULL && !parse_post_processor (self, post, source, 0, error))
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
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s” is not UTF-8 text"), source);
      return NULL;
    }
  /* json-glib recurses without a limit: refuse deep nesting before parsing */
  if (amk_json_scan (data, len, MAX_JSON_DEPTH) != AMK_JSON_SCAN_OK)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s” nests JSON deeper than %d levels"), source, MAX_JSON_DEPTH);
      return NULL;
    }
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, data, (gssize) len, &local_error))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s” is not valid JSON: %s"), source, local_error->message);
      return NULL;
    }
  if (json_parser_get_root (parser) == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
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
 * A file that is not such a tokenizer fails with %G_IO_ERROR_INVALID_DATA (a message
 * naming the file and the field) or, for a feature this tokenizer lacks,
 * %G_IO_ERROR_NOT_SUPPORTED.
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

/* ---- GGUF metadata ------------------------------------------------------------- */

/**
 * amk_tokenizer_new_from_vocab:
 * @tokens: (array zero-terminated=1): the tokens by id (`tokenizer.ggml.tokens`)
 * @merges: (array zero-terminated=1): the merges by rank, each "left right"
 *   (`tokenizer.ggml.merges`)
 * @token_types: (array length=n_types) (nullable): the type of each token
 *   (`tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined,
 *   5 unused, 6 byte), or %NULL
 * @n_types: the length of @token_types: 0 or the number of tokens
 * @pre_tokenizer: the pre-tokenizer's name (`tokenizer.ggml.pre`): "gpt2",
 *   "smollm", "starcoder", "refact", "llama-bpe" (also "llama3", "llama-v3"),
 *   or "qwen2"
 * @error: return location for a #GError
 *
 * Makes a byte-level BPE tokenizer (`tokenizer.ggml.model` "gpt2") from the arrays of
 * a GGUF file's metadata. Control tokens (type 3) become special added tokens,
 * user-defined ones (type 4) plain added tokens; both are matched in the text. Set
 * [property@Amk.Tokenizer:bos-id], [property@Amk.Tokenizer:eos-id] and
 * [property@Amk.Tokenizer:add-bos] from the metadata afterwards.
 *
 * Duplicate tokens, merges naming unknown tokens and a mismatched @n_types fail with
 * %G_IO_ERROR_INVALID_DATA; an unknown @pre_tokenizer with %G_IO_ERROR_NOT_SUPPORTED.
 *
 * Returns: (transfer full) (nullable): the tokenizer, or %NULL with @error set
 */
AmkTokenizer *
amk_tokenizer_new_from_vocab (const char *const  *tokens,
                              const char *const  *merges,
                              const gint32       *token_types,
                              gsize               n_types,
                              const char         *pre_tokenizer,
                              GError            **error)
{
  g_autoptr(AmkTokenizer) self = NULL;
  const char *source = "GGUF";
  gsize n_tokens, n_merges;

  g_return_val_if_fail (tokens != NULL, NULL);
  g_return_val_if_fail (merges != NULL, NULL);
  g_return_val_if_fail (token_types != NULL || n_types == 0, NULL);
  g_return_val_if_fail (pre_tokenizer != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  n_tokens = g_strv_length ((char **) tokens);
  n_merges = g_strv_length ((char **) merges);
  if (n_tokens == 0 || n_tokens > G_MAXINT32)
    {
      set_field_error (error, source, "tokenizer.ggml.tokens", _("is empty or too long"));
      return NULL;
    }
  if (n_types != 0 && n_types != n_tokens)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("Tokenizer “%s”: field “%s” has %zu entries for %zu tokens"),
                   source, "tokenizer.ggml.token_type", (size_t) n_types, (size_t) n_tokens);
      return NULL;
    }

  self = g_object_new (AMK_TYPE_TOKENIZER, NULL);

  if (g_str_equal (pre_tokenizer, "gpt2"))
    {
      if (!add_byte_level_step (self, TRUE, FALSE, error))
        return NULL;
    }
  else if (g_str_equal (pre_tokenizer, "smollm") || g_str_equal (pre_tokenizer, "starcoder") ||
           g_str_equal (pre_tokenizer, "refact"))
    {
      if (!add_split_step (self, "\\p{N}", source, "tokenizer.ggml.pre", error) ||
          !add_byte_level_step (self, TRUE, FALSE, error))
        return NULL;
    }
  else if (g_str_equal (pre_tokenizer, "llama-bpe") || g_str_equal (pre_tokenizer, "llama3") ||
           g_str_equal (pre_tokenizer, "llama-v3"))
    {
      if (!add_split_step (self, LLAMA3_PATTERN, source, "tokenizer.ggml.pre", error) ||
          !add_byte_level_step (self, FALSE, FALSE, error))
        return NULL;
      self->ignore_merges = TRUE;
    }
  else if (g_str_equal (pre_tokenizer, "qwen2"))
    {
      if (!add_split_step (self, QWEN2_PATTERN, source, "tokenizer.ggml.pre", error) ||
          !add_byte_level_step (self, FALSE, FALSE, error))
        return NULL;
    }
  else
    {
      set_unsupported_error (error, source, "tokenizer.ggml.pre", pre_tokenizer);
      return NULL;
    }

  alloc_ids (self, (guint) n_tokens);
  for (gsize i = 0; i < n_tokens; i++)
    {
      if (!g_utf8_validate (tokens[i], -1, NULL))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       _("Tokenizer “%s”: field “%s”: token %zu is not UTF-8"),
                       source, "tokenizer.ggml.tokens", (size_t) i);
          return NULL;
        }
      if (!set_token (self, tokens[i], (gint64) i, source, "tokenizer.ggml.tokens", error))
        return NULL;
    }
  for (gsize i = 0; i < n_types; i++)
    {
      if (token_types[i] < GGUF_TOKEN_NORMAL || token_types[i] > GGUF_TOKEN_BYTE)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       _("Tokenizer “%s”: field “%s”: token %zu has the unknown type %d"),
                       source, "tokenizer.ggml.token_type", (size_t) i, (int) token_types[i]);
          return NULL;
        }
      if (token_types[i] == GGUF_TOKEN_UNKNOWN && self->unk_id < 0)
        self->unk_id = (gint32) i;
      if ((token_types[i] == GGUF_TOKEN_CONTROL || token_types[i] == GGUF_TOKEN_USER_DEFINED) &&
          tokens[i][0] != '\0')
        {
          gboolean special = token_types[i] == GGUF_TOKEN_CONTROL;

          if (!add_added_token (self, tokens[i], (gint64) i, special, FALSE, FALSE, FALSE,
                                FALSE, source, error))
            return NULL;
        }
    }
  rebuild_added_index (self);

  alloc_merges (self, n_merges);
  for (gsize i = 0; i < n_merges; i++)
    {
      if (!g_utf8_validate (merges[i], -1, NULL))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       _("Tokenizer “%s”: field “%s”: merge %zu is not UTF-8"),
                       source, "tokenizer.ggml.merges", (size_t) i);
          return NULL;
        }
      if (!add_merge_string (self, merges[i], i, source, error))
        return NULL;
    }
  return g_steal_pointer (&self);
}

/* ---- encoding ------------------------------------------------------------------ */

static gboolean
is_white_space (gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static gboolean
is_word_char (gunichar c)
{
  return g_unichar_isalnum (c);
}

/* Cuts the added tokens of one kind (@normalized) out of the text segments,
 * leftmost-longest, with their lstrip, rstrip and single_word rules. */
static void
split_added (AmkTokenizer *self,
             GArray       *segments,
             gboolean      normalized)
{
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (Segment));
  gboolean any = FALSE;

  for (guint t = 0; t < self->added->len; t++)
    if (g_array_index (self->added, AddedToken, t).normalized == normalized)
      any = TRUE;
  if (!any)
    return;

  for (guint s = 0; s < segments->len; s++)
    {
      Segment seg = g_array_index (segments, Segment, s);
      const char *text = seg.start;
      gsize len = seg.len, pos = 0, emitted = 0;

      if (seg.id >= 0)
        {
          g_array_append_val (out, seg);
          continue;
        }
      while (pos < len)
        {
          const AddedToken *best = NULL;
          gsize start, stop;

          for (guint t = 0; t < self->added->len; t++)
            {
              const AddedToken *tok = &g_array_index (self->added, AddedToken, t);

              if (tok->normalized == normalized && tok->len <= len - pos &&
                  (best == NULL || tok->len > best->len) &&
                  memcmp (text + pos, tok->content, tok->len) == 0)
                best = tok;
            }
          if (best == NULL)
            {
              pos++;
              continue;
            }
          start = pos;
          stop = pos + best->len;
          if (best->single_word)
            {
              gboolean left_ok = start == 0 ||
                !is_word_char (g_utf8_get_char (g_utf8_prev_char (text + start)));
              gboolean right_ok = stop == len || !is_word_char (g_utf8_get_char (text + stop));

              if (!left_ok || !right_ok)
                {
                  pos = stop;
                  continue;
                }
            }
          if (best->lstrip)
            while (start > emitted)
              {
                const char *prev = g_utf8_prev_char (text + start);

                if (!is_white_space (g_utf8_get_char (prev)))
                  break;
                start = prev - text;
              }
          if (best->rstrip)
            while (stop < len && is_white_space (g_utf8_get_char (text + stop)))
              stop = g_utf8_next_char (text + stop) - text;
          if (start > emitted)
            {
              Segment gap = { text + emitted, start - emitted, -1 };
              g_array_append_val (out, gap);
            }
          {
            Segment hit = { text + start, stop - start, best->id };
            g_array_append_val (out, hit);
          }
          emitted = pos = stop;
        }
      if (len > emitted)
        {
          Segment gap = { text + emitted, len - emitted, -1 };
          g_array_append_val (out, gap);
        }
    }
  g_array_set_size (segments, 0);
  g_array_append_vals (segments, out->data, out->len);
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
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       _("The tokenizer’s pre-tokenizer failed: %s"), local_error->message);
          return FALSE;
        }
      if (len > last)
        g_ptr_array_add (out, g_strndup (piece + last, len - last));
    }
  *out_pieces = g_steal_pointer (&out);
  return TRUE;
}

typedef struct {
  guint32 rank;
  guint32 pos;
  gint32  new_id;
} HeapEntry;

static gboolean
heap_less (const HeapEntry *a,
           const HeapEntry *b)
{
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void
heap_push (GArray    *heap,
           HeapEntry  entry)
{
  guint i;

  g_array_append_val (heap, entry);
  i = heap->len - 1;
  while (i > 0)
    {
      guint parent = (i - 1) / 2;
      HeapEntry *h = (HeapEntry *) heap->data;

      if (!heap_less (&h[i], &h[parent]))
        break;
      entry = h[i];
      h[i] = h[parent];
      h[parent] = entry;
      i = parent;
    }
}

static HeapEntry
heap_pop (GArray *heap)
{
  HeapEntry *h = (HeapEntry *) heap->data;
  HeapEntry top = h[0];
  guint n = heap->len - 1, i = 0;

  h[0] = h[n];
  g_array_set_size (heap, n);
  h = (HeapEntry *) heap->data;
  for (;;)
    {
      guint l = 2 * i + 1, r = l + 1, m = i;
      HeapEntry tmp;

      if (l < n && heap_less (&h[l], &h[m]))
        m = l;
      if (r < n && heap_less (&h[r], &h[m]))
        m = r;
      if (m == i)
        break;
      tmp = h[i];
      h[i] = h[m];
      h[m] = tmp;
      i = m;
    }
  return top;
}

static const Merge *
find_merge (AmkTokenizer *self,
            gint32        a,
            gint32        b)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;

  return g_hash_table_lookup (self->merge_table, &key);
}

static void
push_pair (AmkTokenizer *self,
           GArray       *heap,
           const gint32 *ids,
           guint         pos,
           guint         next)
{
  const Merge *merge = find_merge (self, ids[pos], ids[next]);

  if (merge != NULL)
    heap_push (heap, (HeapEntry) { merge->rank, pos, merge->new_id });
}

/* BPE on one word (already byte-level characters); appends the ids to @out. */
static void
bpe_word (AmkTokenizer *self,
          const char   *word,
          GArray       *out)
{
  gsize n_chars = (gsize) g_utf8_strlen (word, -1);
  g_autofree gint32 *ids = g_new (gint32, MAX (n_chars, 1));
  g_autofree gint32 *next = g_new (gint32, MAX (n_chars, 1));
  g_autofree gint32 *prev = g_new (gint32, MAX (n_chars, 1));
  g_autoptr(GArray) heap = g_array_new (FALSE, FALSE, sizeof (HeapEntry));
  gsize n = 0;

  /* one symbol per character; characters outside the vocabulary become unk_token,
   * or vanish without one (as in tokenizers) */
  for (const char *p = word; *p != '\0'; p = g_utf8_next_char (p))
    {
      char buf[8] = { 0 };
      gint32 id;

      memcpy (buf, p, g_utf8_next_char (p) - p);
      id = lookup_vocab (self, buf);
      if (id < 0)
        id = self->unk_id;
      if (id < 0)
        continue;
      ids[n++] = id;
    }
  for (gsize i = 0; i < n; i++)
    {
      prev[i] = (gint32) i - 1;
      next[i] = i + 1 < n ? (gint32) i + 1 : -1;
    }
  for (gsize i = 0; i + 1 < n; i++)
    push_pair (self, heap, ids, (guint) i, (guint) i + 1);

  while (heap->len > 0)
    {
      HeapEntry top = heap_pop (heap);
      const Merge *merge;
      gint32 right;

      if (ids[top.pos] < 0 || next[top.pos] < 0)
        continue;
      right = next[top.pos];
      merge = find_merge (self, ids[top.pos], ids[right]);
      if (merge == NULL || merge->new_id != top.new_id)
        continue;
      ids[top.pos] = top.new_id;
      ids[right] = -1;
      next[top.pos] = next[right];
      if (next[right] >= 0)
        prev[next[right]] = (gint32) top.pos;
      if (prev[top.pos] >= 0)
        push_pair (self, heap, ids, (guint) prev[top.pos], top.pos);
      if (next[top.pos] >= 0)
        push_pair (self, heap, ids, top.pos, (guint) next[top.pos]);
    }
  for (gsize i = 0; i < n; i++)
    if (ids[i] >= 0)
      g_array_append_val (out, ids[i]);
}

static void
encode_word (AmkTokenizer *self,
             const char   *word,
             GArray       *out)
{
  gsize len = strlen (word);
  const gint32 *cached;
  guint start;

  if (self->ignore_merges)
    {
      gint32 id = lookup_vocab (self, word);

      if (id >= 0)
        {
          g_array_append_val (out, id);
          return;
        }
    }
  if (len <= MAX_CACHE_WORD_LEN)
    {
      g_mutex_lock (&self->cache_lock);
      cached = g_hash_table_lookup (self->cache, word);
      if (cached != NULL)
        g_array_append_vals (out, cached + 1, (guint) cached[0]);
      g_mutex_unlock (&self->cache_lock);
      if (cached != NULL)
        return;
    }
  start = out->len;
  bpe_word (self, word, out);
  if (len <= MAX_CACHE_WORD_LEN)
    {
      guint n = out->len - start;
      gint32 *entry = g_new (gint32, n + 1);

      entry[0] = (gint32) n;
      if (n > 0)
        memcpy (entry + 1, &g_array_index (out, gint32, start), n * sizeof (gint32));
      g_mutex_lock (&self->cache_lock);
      if (g_hash_table_size (self->cache) >= MAX_CACHE_WORDS)
        g_hash_table_remove_all (self->cache);
      g_hash_table_replace (self->cache, g_strdup (word), entry);
      g_mutex_unlock (&self->cache_lock);
    }
}

static gboolean
encode_text (AmkTokenizer  *self,
             const char    *text,
             gsize          len,
             GArray        *out,
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
  for (guint i = 0; i < pieces->len; i++)
    encode_word (self, g_ptr_array_index (pieces, i), out);
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
 * Invalid UTF-8 fails with %G_CONVERT_ERROR_ILLEGAL_SEQUENCE.
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
  len = strlen (text);
  if (!g_utf8_validate_len (text, len, &end))
    {
      g_set_error (error, G_CONVERT_ERROR, G_CONVERT_ERROR_ILLEGAL_SEQUENCE,
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
  split_added (self, segments, FALSE);
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
  split_added (self, segments, TRUE);
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

/* ---- decoding ------------------------------------------------------------------ */

/* Appends @bytes as UTF-8, each maximal invalid subpart replaced by U+FFFD (what
 * Rust's String::from_utf8_lossy does). */
static void
append_lossy (GString      *out,
              const guint8 *s,
              gsize         n)
{
  gsize i = 0;

  while (i < n)
    {
      guint8 b = s[i];
      gsize need, k;
      guint8 lo = 0x80, hi = 0xBF;

      if (b < 0x80)
        {
          g_string_append_c (out, (char) b);
          i++;
          continue;
        }
      if (b >= 0xC2 && b <= 0xDF)
        need = 1;
      else if (b >= 0xE0 && b <= 0xEF)
        {
          need = 2;
          if (b == 0xE0)
            lo = 0xA0;
          else if (b == 0xED)
            hi = 0x9F;
        }
      else if (b >= 0xF0 && b <= 0xF4)
        {
          need = 3;
          if (b == 0xF0)
            lo = 0x90;
          else if (b == 0xF4)
            hi = 0x8F;
        }
      else
        {
          g_string_append (out, "\xEF\xBF\xBD");
          i++;
          continue;
        }
      for (k = 1; k <= need; k++)
        {
          guint8 c;

          if (i + k >= n)
            break;
          c = s[i + k];
          if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
            break;
        }
      if (k > need)
        g_string_append_len (out, (const char *) s + i, need + 1);
      else
        g_string_append (out, "\xEF\xBF\xBD");
      i += k > need ? need + 1 : k;
    }
}

/**
 * amk_tokenizer_decode:
 * @self: a tokenizer
 * @ids: (array length=n_ids): token ids
 * @n_ids: the number of @ids
 * @error: return location for a #GError
 *
 * Turns tokens back into text, special tokens included (`decode(ids,
 * skip_special_tokens=False)` in the `tokenizers` package). Bytes that do not form
 * UTF-8 (a sequence cut in the middle of a character) become U+FFFD. An id outside the
 * vocabulary fails with %G_IO_ERROR_INVALID_ARGUMENT.
 *
 * Returns: (transfer full) (nullable): the text, or %NULL with @error set
 */
char *
amk_tokenizer_decode (AmkTokenizer  *self,
                      const gint32  *ids,
                      gsize          n_ids,
                      GError       **error)
{
  g_autoptr(GByteArray) bytes = g_byte_array_new ();
  GString *out;

  g_return_val_if_fail (AMK_IS_TOKENIZER (self), NULL);
  g_return_val_if_fail (ids != NULL || n_ids == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  for (gsize i = 0; i < n_ids; i++)
    {
      const char *token = amk_tokenizer_id_to_token (self, ids[i]);
      gsize start = bytes->len;
      gboolean mapped = TRUE;

      if (token == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       _("Token id %d (at position %zu) is not in the vocabulary of %u tokens"),
                       (int) ids[i], (size_t) i, self->vocab_size);
          return NULL;
        }
      /* the ByteLevel decoder: characters back to bytes, or the token's own bytes
       * where one character has no byte */
      for (const char *p = token; *p != '\0'; p = g_utf8_next_char (p))
        {
          gunichar c = g_utf8_get_char (p);
          guint8 b;

          if (c >= G_N_ELEMENTS (self->char_to_byte) || self->char_to_byte[c] < 0)
            {
              mapped = FALSE;
              break;
            }
          b = (guint8) self->char_to_byte[c];
          g_byte_array_append (bytes, &b, 1);
        }
      if (!mapped)
        {
          g_byte_array_set_size (bytes, start);
          g_byte_array_append (bytes, (const guint8 *) token, strlen (token));
        }
    }
  out = g_string_sized_new (bytes->len + 1);
  append_lossy (out, bytes->data, bytes->len);
  return g_string_free (out, FALSE);
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
 * @bos_id: a token id, or -1 for none
 *
 * Sets [property@Amk.Tokenizer:bos-id].
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
 * @eos_id: a token id, or -1 for none
 *
 * Sets [property@Amk.Tokenizer:eos-id].
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
  return lookup_vocab (self, token);
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

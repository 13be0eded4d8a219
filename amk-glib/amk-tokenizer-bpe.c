/* amk-tokenizer-bpe.c: the BPE model of AmkTokenizer: the vocabulary (token <-> id),
 * the merge table (a pair of ids -> its rank and the id it becomes), and the merging of
 * one pre-tokenized word, as tokenizers does it: a heap of candidate pairs over a linked
 * list of symbols, lowest rank first. Merged words are cached.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "amk-tokenizer-private.h"

/* Bounds on the word cache, so that untrusted text cannot make it grow without limit. */
#define MAX_CACHE_WORDS     65536
#define MAX_CACHE_WORD_LEN  256

/* Makes the id table; every id must be below @vocab_size. */
void
amk_tokenizer_alloc_ids (AmkTokenizer *self,
                         guint         vocab_size)
{
  self->vocab_size = vocab_size;
  self->id_to_token = g_new0 (char *, MAX (vocab_size, 1));
  self->special = g_new0 (guint8, MAX (vocab_size, 1));
  self->vocab = g_hash_table_new (g_str_hash, g_str_equal);
}

gboolean
amk_tokenizer_set_token (AmkTokenizer  *self,
                         const char    *token,
                         gint64         id,
                         const char    *source,
                         const char    *field,
                         GError       **error)
{
  if (id < 0 || id >= self->vocab_size)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “%s”: token “%s” has id %" PRId64
                     ", outside 0 to %u"), source, field, token, (int64_t) id,
                   self->vocab_size - 1);
      return FALSE;
    }
  if (self->id_to_token[id] != NULL)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “%s”: id %" PRId64 " is given to both “%s” and “%s”"),
                   source, field, (int64_t) id, self->id_to_token[id], token);
      return FALSE;
    }
  if (g_hash_table_contains (self->vocab, token))
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “%s”: token “%s” appears twice"),
                   source, field, token);
      return FALSE;
    }
  self->id_to_token[id] = g_strdup (token);
  g_hash_table_insert (self->vocab, self->id_to_token[id], GINT_TO_POINTER ((gint) id + 1));
  return TRUE;
}

gint32
amk_tokenizer_lookup_vocab (AmkTokenizer *self,
                            const char   *token)
{
  gpointer value = g_hash_table_lookup (self->vocab, token);

  return value != NULL ? GPOINTER_TO_INT (value) - 1 : -1;
}

void
amk_tokenizer_alloc_merges (AmkTokenizer *self,
                            gsize         n_merges)
{
  self->merges = g_new0 (Merge, MAX (n_merges, 1));
  self->n_merges = 0;
  self->merge_table = g_hash_table_new (g_int64_hash, g_int64_equal);
}

/* One merge, of rank self->n_merges. A later duplicate replaces the earlier one, as in
 * tokenizers. */
gboolean
amk_tokenizer_add_merge (AmkTokenizer  *self,
                         const char    *left,
                         const char    *right,
                         gsize          index,
                         const char    *source,
                         GError       **error)
{
  g_autofree char *joined = g_strconcat (left, right, NULL);
  gint32 a = amk_tokenizer_lookup_vocab (self, left);
  gint32 b = amk_tokenizer_lookup_vocab (self, right);
  gint32 c = amk_tokenizer_lookup_vocab (self, joined);
  Merge *merge;

  if (a < 0 || b < 0 || c < 0)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES,
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
gboolean
amk_tokenizer_add_merge_string (AmkTokenizer  *self,
                                const char    *line,
                                gsize          index,
                                const char    *source,
                                GError       **error)
{
  const char *space = strchr (line, ' ');
  g_autofree char *left = NULL;

  if (space == NULL || space == line || space[1] == '\0')
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES,
                   _("Tokenizer “%s”: field “merges”: merge %zu (“%s”) is not two tokens "
                     "separated by a space"), source, index, line);
      return FALSE;
    }
  left = g_strndup (line, space - line);
  return amk_tokenizer_add_merge (self, left, space + 1, index, source, error);
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
      id = amk_tokenizer_lookup_vocab (self, buf);
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

void
amk_tokenizer_encode_word (AmkTokenizer *self,
                           const char   *word,
                           GArray       *out)
{
  gsize len = strlen (word);
  const gint32 *cached;
  guint start;

  if (self->ignore_merges)
    {
      gint32 id = amk_tokenizer_lookup_vocab (self, word);

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

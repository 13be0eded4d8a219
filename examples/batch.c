/* batch.c: several prompts generated together (greedy) on the CPU executor, one launch
 * per step for all of them, stepped here one step at a time: a fourth prompt joins
 * between two steps, once the first sequence has finished.
 * Build: cc batch.c $(pkg-config --cflags --libs amk-glib-1.0) -o batch; run: ./batch MODEL.gguf
 * Without a model file (argv[1], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
 * SPDX-License-Identifier: LGPL-2.1-or-later */
#include <amk-glib/amk-glib.h>

static const struct {
  const char *prompt;
  guint       max_tokens;
} prompts[] = {
  { "The capital of France is", 8 },
  { "Once upon a time", 12 },
  { "1, 2, 3,", 6 },
  { "The sun rises in the", 5 },   /* joins later */
};

static void
string_free (gpointer string)
{
  g_string_free (string, TRUE);
}

static void
on_token (AmkBatch   *batch,
          guint       id,
          gint        token_id,
          const char *piece,
          gpointer    user_data)
{
  GHashTable *streamed = user_data;   /* id -> GString of its pieces */
  GString *text = g_hash_table_lookup (streamed, GUINT_TO_POINTER (id));

  if (text == NULL)
    g_hash_table_insert (streamed, GUINT_TO_POINTER (id), (text = g_string_new (NULL)));
  g_string_append (text, piece);
  g_print ("[%u] \"%s\"\n", id, piece);
}

static void
on_finished (AmkBatch        *batch,
             guint            id,
             AmkFinishReason  reason,
             gpointer         user_data)
{
  g_autoptr(GEnumClass) reasons = g_type_class_ref (AMK_TYPE_FINISH_REASON);

  g_print ("[%u] finished: %s\n", id, g_enum_get_value (reasons, reason)->value_nick);
}

int
main (int   argc,
      char *argv[])
{
  const char *path = argc > 1 ? argv[1] : g_getenv ("AMK_TEST_GGUF");
  g_autoptr(GHashTable) streamed = g_hash_table_new_full (NULL, NULL, NULL, string_free);
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(AmkBatch) batch = NULL;
  g_autoptr(GError) error = NULL;
  guint ids[G_N_ELEMENTS (prompts)], n_added = 0, n_tokens = 0;

  if (path == NULL || !g_file_test (path, G_FILE_TEST_IS_REGULAR))
    {
      g_printerr ("usage: batch MODEL.gguf  (or set AMK_TEST_GGUF)\n");
      return 77;
    }
  if ((model = amk_model_new_from_file (path, NULL, &error)) == NULL)
    goto failed;
  batch = amk_batch_new (model, NULL, 4);   /* NULL: a CPU executor; at most 4 sequences */
  g_signal_connect (batch, "token", G_CALLBACK (on_token), streamed);
  g_signal_connect (batch, "finished", G_CALLBACK (on_finished), NULL);
  for (; n_added < 3; n_added++)
    if ((ids[n_added] = amk_batch_add (batch, prompts[n_added].prompt,
                                       prompts[n_added].max_tokens, &error)) == 0)
      goto failed;
  while (amk_batch_get_n_active (batch) > 0)
    {
      if (!amk_batch_step (batch, NULL, &error))   /* one launch: a token for each */
        goto failed;
      if (n_added == 3 && amk_batch_get_n_active (batch) < 3)
        {
          /* the first has finished: the fourth joins, in the slot it left */
          if ((ids[n_added] = amk_batch_add (batch, prompts[n_added].prompt,
                                             prompts[n_added].max_tokens, &error)) == 0)
            goto failed;
          n_added++;
        }
    }

  for (guint i = 0; i < n_added; i++)
    {
      g_autofree char *text = amk_batch_get_text (batch, ids[i], &error);
      g_autoptr(GArray) tokens = amk_batch_get_tokens (batch, ids[i], &error);
      AmkFinishReason reason = amk_batch_get_finish_reason (batch, ids[i], &error);
      GString *pieces = g_hash_table_lookup (streamed, GUINT_TO_POINTER (ids[i]));

      if (error != NULL)
        goto failed;
      g_print ("%u: \"%s\" -> \"%s\"\n", ids[i], prompts[i].prompt, text);
      if (pieces == NULL || g_strcmp0 (pieces->str, text) != 0 || tokens->len == 0 ||
          tokens->len > prompts[i].max_tokens ||
          (reason != AMK_FINISH_REASON_LENGTH && reason != AMK_FINISH_REASON_STOP))
        {
          g_printerr ("sequence %u: %u tokens, finish reason %d, streamed \"%s\"\n", ids[i],
                      tokens->len, reason, pieces != NULL ? pieces->str : "");
          return 1;
        }
      n_tokens += tokens->len;
    }
  g_printerr ("%u tokens in %u launches\n", n_tokens, amk_batch_get_steps (batch));
  return n_added == 4 && amk_batch_get_steps (batch) < n_tokens ? 0 : 1;

failed:
  g_printerr ("%s\n", error->message);
  return 1;
}

/* amk-test-generate.h: greedy generation through AmkGenerator, for the tests that check
 * what a model generates (tests/unit and, through tests/golden/amk-golden.h, the GPU's
 * golden test).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <amk-glib/amk-glib.h>

/* The checkpoint folder tests/data/`name` (tiny-llama, tiny-qwen3). */
static inline char *
test_data_dir (const char *name)
{
  return g_test_build_filename (G_TEST_DIST, "data", name, NULL);
}

/* The SmolLM2 GGUF file that AMK_TEST_GGUF names, or NULL when there is none. */
static inline const char *
test_gguf_path (void)
{
  const char *path = g_getenv ("AMK_TEST_GGUF");

  if (path == NULL || *path == '\0' || !g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return NULL;
  return path;
}

/* Two arrays of token ids are equal. */
static inline void
test_assert_ids_equal (GArray *a, GArray *b)
{
  g_assert_cmpmem (a->data, a->len * sizeof (gint32), b->data, b->len * sizeof (gint32));
}

/* The greedy continuation of `prompt` by a new generator of `model` (loaded first if it
 * is not) on `executor` (NULL: a new CPU executor): the text, or NULL with `error` set.
 * `ids` (nullable) gets the generated ids (g_array_unref), `n_prompt` (nullable) the
 * tokens fed in before generating; both only on success. */
static inline char *
test_generate (AmkModel     *model,
               AmkExecutor  *executor,
               const char   *prompt,
               guint         max_tokens,
               GArray      **ids,
               guint        *n_prompt,
               GError      **error)
{
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, executor);
  char *text = amk_generator_generate (gen, prompt, max_tokens, NULL, error);
  const gint32 *tokens;
  gsize n_tokens;

  if (text == NULL)
    return NULL;
  tokens = amk_generator_get_tokens (gen, &n_tokens);
  if (ids != NULL)
    {
      *ids = g_array_sized_new (FALSE, FALSE, sizeof (gint32), (guint) n_tokens);
      g_array_append_vals (*ids, tokens, (guint) n_tokens);
    }
  if (n_prompt != NULL)
    *n_prompt = amk_generator_get_prompt_tokens (gen);
  return text;
}

/* A model of `path` (a GGUF file or a checkpoint folder) loaded with `n_queues` queues
 * (0: the default), a KV cache of `context` positions and a prefill chunk of
 * `prefill_chunk` rows (0: the default, 1: none). */
static inline AmkModel *
test_load_model_chunked (const char *path,
                         guint       n_queues,
                         guint       context,
                         guint       prefill_chunk)
{
  g_autoptr(GError) error = NULL;
  AmkModel *model = g_initable_new (AMK_TYPE_MODEL, NULL, &error, "path", path,
                                    "n-queues", n_queues, "context-length", context,
                                    "prefill-chunk", prefill_chunk, NULL);

  g_assert_no_error (error);
  g_assert_nonnull (model);
  return model;
}

/* test_load_model_chunked() with the default prefill chunk. */
static inline AmkModel *
test_load_model (const char *path,
                 guint       n_queues,
                 guint       context)
{
  return test_load_model_chunked (path, n_queues, context, 0);
}

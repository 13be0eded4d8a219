/* test-model.c: builds the decode step of a real GGUF model (AMK_TEST_GGUF) and runs
 * greedy generation on the CPU executor. Skipped when the file is not given.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include "amk-model-builder-private.h"

static const char *
model_path (void)
{
  const char *path = g_getenv ("AMK_TEST_GGUF");

  if (path == NULL || *path == '\0' || !g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return NULL;
  return path;
}

static void
test_model_generate (void)
{
  const char *path = model_path ();
  g_autoptr(AmkModelBuild) build = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  g_autoptr(GString) id_list = g_string_new (NULL);
  gsize n_ids = 0;
  guint n_prompt = 0;
  gint64 t0, t1, t2;

  if (path == NULL)
    {
      g_test_skip ("set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)");
      return;
    }

  t0 = g_get_monotonic_time ();
  build = amk_model_build_from_gguf (path, 4, 64, &error);
  g_assert_no_error (error);
  g_assert_nonnull (build);
  t1 = g_get_monotonic_time ();
  g_assert_cmpuint (build->vocab_size, >, 0);

  g_assert_true (amk_model_generate_full (build, NULL, "The capital of France is", 8, out,
                                              &ids, &n_ids, &n_prompt, &error));
  g_assert_no_error (error);
  t2 = g_get_monotonic_time ();
  g_assert_cmpuint (n_ids, ==, 8);
  for (gsize i = 0; i < n_ids; i++)
    {
      g_assert_cmpint (ids[i], >=, 0);
      g_assert_cmpint (ids[i], <, (gint) build->vocab_size);
      g_string_append_printf (id_list, " %d", ids[i]);
    }
  g_test_message ("build %.2f s; %u prompt + %zu new tokens in %.2f s (%.2f steps/s)",
                  (t1 - t0) / 1e6, n_prompt, n_ids, (t2 - t1) / 1e6,
                  (n_prompt + n_ids) / ((t2 - t1) / 1e6));
  g_test_message ("tokens:%s", id_list->str);
  g_test_message ("text: \"The capital of France is%s\"", out->str);
}

static void
test_model_bad_path (void)
{
  g_autoptr(GError) error = NULL;
  AmkModelBuild *build = amk_model_build_from_gguf ("/nonexistent/model.gguf", 1, 8, &error);

  g_assert_null (build);
  g_assert_nonnull (error);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/model/bad-path", test_model_bad_path);
  g_test_add_func ("/model/generate", test_model_generate);
  return g_test_run ();
}

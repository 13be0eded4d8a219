/* test-model.c: loads a real GGUF model (AMK_TEST_GGUF) into its decode step and runs
 * greedy generation on the CPU executor. Skipped when the file is not given.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include "amk-model-loader-private.h"
#include "amk-model-readers-private.h"
#include "amk-test-generate.h"

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
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) ids = NULL;
  g_autoptr(GString) id_list = g_string_new (NULL);
  g_autofree char *text = NULL;
  guint n_prompt = 0;
  gint64 t0, t1, t2;

  if (path == NULL)
    {
      g_test_skip ("set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)");
      return;
    }

  t0 = g_get_monotonic_time ();
  model = test_load_model (path, 4, 64);
  t1 = g_get_monotonic_time ();
  g_assert_cmpuint (amk_model_get_vocab_size (model), >, 0);

  text = test_generate (model, NULL, "The capital of France is", 8, &ids, &n_prompt, &error);
  g_assert_no_error (error);
  g_assert_nonnull (text);
  t2 = g_get_monotonic_time ();
  g_assert_cmpuint (ids->len, ==, 8);
  for (guint i = 0; i < ids->len; i++)
    {
      gint32 id = g_array_index (ids, gint32, i);

      g_assert_cmpint (id, >=, 0);
      g_assert_cmpint (id, <, (gint) amk_model_get_vocab_size (model));
      g_string_append_printf (id_list, " %d", id);
    }
  g_test_message ("load %.2f s; %u prompt + %u new tokens in %.2f s (%.2f steps/s)",
                  (t1 - t0) / 1e6, n_prompt, ids->len, (t2 - t1) / 1e6,
                  (n_prompt + ids->len - 1) / ((t2 - t1) / 1e6));
  g_test_message ("tokens:%s", id_list->str);
  g_test_message ("text: \"The capital of France is%s\"", text);
}

static void
test_model_bad_path (void)
{
  g_autoptr(GError) error = NULL;
  AmkModelBuild *build = amk_model_build_from_path ("/nonexistent/model.gguf", 1, 8, &error);

  g_assert_null (build);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/model/bad-path", test_model_bad_path);
  g_test_add_func ("/amk/model/generate", test_model_generate);
  return g_test_run ();
}

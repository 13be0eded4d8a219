/* test-quantized-golden.c: SmolLM2-135M quantized by `amk quantize` to q8_0 and q4_k_m,
 * its greedy continuations on the CPU executor against those of Hugging Face transformers
 * on the same quantized GGUF (the "cpu" reference of tests/golden/smollm2-q8_0-golden.json
 * and smollm2-q4_k_m-golden.json, see tests/golden/amk-golden.h), "The capital of France
 * is" answered with Paris included.
 *
 * The test quantizes AMK_TEST_GGUF with the built tool (its path is the first argument)
 * into a temporary folder. The goldens hold for those bytes only: when the quantizer's
 * output changes, the test fails with the command that regenerates them. Skipped unless
 * AMK_TEST_GGUF names the Q4_1 file they were quantized from (amk fetch-model):
 *
 *   AMK_TEST_GGUF="$(build/tools/amk fetch-model)" meson test -C build test-quantized-golden
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <glib/gstdio.h>
#include "../golden/amk-golden.h"

static const char *amk_tool;

static const char *mixes[] = { "q8_0", "q4_k_m" };

static void
test_quantized_json (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (mixes); i++)
    {
      g_autofree char *name = g_strdup_printf ("smollm2-%s-golden.json", mixes[i]);
      g_autofree char *json = golden_json_path (name);
      g_autoptr(Golden) g = golden_load (json, "cpu");
      g_autofree char *type = NULL, *from = NULL;
      guint answers = 0;

      golden_quantized_from (json, &type, &from);
      g_assert_cmpstr (type, ==, mixes[i]);
      g_assert_cmpuint (strlen (from), ==, 64);
      g_assert_cmpuint (g->max_new_tokens, ==, 32);
      g_assert_cmpfloat (g->tolerance, >, 0.0);
      g_assert_cmpfloat (g->tolerance, <, 1.0);
      for (guint p = 0; p < g->prompts->len; p++)
        {
          GoldenPrompt *gp = g_ptr_array_index (g->prompts, p);

          g_assert_cmpuint (gp->generated->len, <=, g->max_new_tokens);
          if (gp->answer != NULL)
            {
              g_assert_nonnull (strstr (gp->text, gp->answer));
              answers++;
            }
        }
      /* the factual prompt is among them */
      g_assert_cmpuint (answers, >, 0);
    }
}

static void
run_quantized (gconstpointer data)
{
  const char *mix = data;
  g_autofree char *dir = NULL, *path = NULL;
  g_autoptr(Golden) g = golden_quantized (amk_tool, mix, &dir, &path);
  AmkModel *model;
  guint exact;

  if (g != NULL)
    {
      model = test_load_model (path, 4, 256);
      exact = golden_check (g, model, NULL);
      g_test_message ("%s: %u of %u prompts equal transformers' continuation in full", mix,
                      exact, g->prompts->len);
      g_object_unref (model);
    }
  if (path != NULL)
    g_assert_cmpint (g_unlink (path), ==, 0);
  if (dir != NULL)
    g_assert_cmpint (g_rmdir (dir), ==, 0);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C.UTF-8");
  g_test_init (&argc, &argv, NULL);
  /* meson passes the built tool after the GTest options */
  if (argc < 2)
    {
      g_printerr ("Usage: %s [GTEST-OPTION…] PATH/TO/amk\n", argv[0]);
      return 2;
    }
  amk_tool = argv[1];
  g_test_add_func ("/amk/model/golden/quantized/json", test_quantized_json);
  for (guint i = 0; i < G_N_ELEMENTS (mixes); i++)
    {
      g_autofree char *test = g_strdup_printf ("/amk/model/golden/quantized/%s", mixes[i]);
      g_test_add_data_func (test, mixes[i], run_quantized);
    }
  return g_test_run ();
}

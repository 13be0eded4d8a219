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

/* The json's model.quantized member: the mix and the SHA-256 of the file it was
 * quantized from. */
static void
quantized_from (const char  *json,
                char       **type,
                char       **from_sha256)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *root, *model, *quantized;

  json_parser_load_from_file (parser, json, &error);
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  model = json_object_get_object_member (root, "model");
  g_assert_nonnull (model);
  quantized = json_object_get_object_member (model, "quantized");
  g_assert_nonnull (quantized);
  *type = g_strdup (json_object_get_string_member (quantized, "type"));
  *from_sha256 = g_strdup (json_object_get_string_member (quantized, "from_sha256"));
}

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

      quantized_from (json, &type, &from);
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

/* `amk quantize --type mix` of `in` written to `out`. */
static void
quantize (const char *in,
          const char *out,
          const char *mix)
{
  g_autoptr(GSubprocess) proc = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *output = NULL;

  proc = g_subprocess_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_MERGE,
                           &error, amk_tool, "quantize", "--quiet", in, out, "--type", mix, NULL);
  g_assert_no_error (error);
  g_subprocess_communicate_utf8 (proc, NULL, NULL, &output, NULL, &error);
  g_assert_no_error (error);
  if (!g_subprocess_get_if_exited (proc) || g_subprocess_get_exit_status (proc) != 0)
    g_error ("%s quantize --quiet %s %s --type %s failed:\n%s", amk_tool, in, out, mix, output);
}

static void
run_quantized (gconstpointer data)
{
  const char *mix = data;
  const char *original = golden_model_path ();
  g_autofree char *name = g_strdup_printf ("smollm2-%s-golden.json", mix);
  g_autofree char *json = golden_json_path (name);
  g_autofree char *type = NULL, *from = NULL, *original_sum = NULL;
  g_autofree char *dir = NULL, *path = NULL, *file = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(Golden) g = NULL;
  AmkModel *model;
  guint exact;

  if (original == NULL)
    {
      g_test_skip ("set AMK_TEST_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf (amk fetch-model)");
      return;
    }
  g = golden_load (json, "cpu");
  quantized_from (json, &type, &from);
  original_sum = golden_file_sha256 (original);
  if (g_strcmp0 (original_sum, from) != 0)
    {
      g_test_skip ("AMK_TEST_GGUF is not the file the goldens were quantized from");
      return;
    }

  dir = g_dir_make_tmp ("amk-quantized-golden-XXXXXX", &error);
  g_assert_no_error (error);
  file = g_strdup_printf ("smollm2-%s.gguf", mix);
  path = g_build_filename (dir, file, NULL);
  quantize (original, path, mix);

  /* the goldens are of the quantizer's bytes: any change to them needs new goldens */
  if (golden_same_model (g, path))
    {
      model = test_load_model (path, 4, 256);
      exact = golden_check (g, model, NULL);
      g_test_message ("%s: %u of %u prompts equal transformers' continuation in full", mix,
                      exact, g->prompts->len);
      g_object_unref (model);
    }
  else
    g_test_fail_printf ("amk quantize --type %s no longer writes the file %s was made from: "
                        "if the change is meant, regenerate it (in a venv with torch, "
                        "transformers, gguf, numpy and accelerate) with\n"
                        "  python3 tests/golden/make-golden.py \"$(build/tools/amk "
                        "fetch-model)\" --quantize %s --amk build/tools/amk",
                        mix, json, mix);
  g_assert_cmpint (g_unlink (path), ==, 0);
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

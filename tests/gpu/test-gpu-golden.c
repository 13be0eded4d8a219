/* test-gpu-golden.c: SmolLM2-135M's greedy continuations from the megakernel against
 * those of Hugging Face transformers on the same GGUF (the "gpu" reference of
 * tests/golden/smollm2-golden.json, see tests/golden/amk-golden.h), and of the model
 * quantized by `amk quantize` to q8_0 and q4_k_m with its quantized matrices kept on the
 * device (smollm2-q8_0-golden.json, smollm2-q4_k_m-golden.json); the CPU executor's runs
 * are tests/unit/test-model-golden.c and test-quantized-golden.c.
 * Skips without a CUDA device, and unless AMK_TEST_GGUF names the model file
 * (build/tools/amk fetch-model prints its path):
 *
 *   AMK_TEST_GGUF="$(build/tools/amk fetch-model)" meson test -C build --suite gpu gpu-golden
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <locale.h>
#include <glib/gstdio.h>
#include "gpu-test-common.h"
#include "../golden/amk-golden.h"

/* `queues` 0: one a multiprocessor, as `amk generate` runs it. */
static void
run_golden (guint queues, guint threads)
{
  const char *path = NULL;
  g_autoptr(Golden) g = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *name = NULL;
  guint exact;

  if (!need_gpu ())
    return;
  /* the GPU converts every weight to bf16: the "gpu" reference */
  if ((g = golden_open ("gpu", &path)) == NULL)
    return;

  launcher = amk_launcher_new (0);
  amk_launcher_set_threads_per_block (launcher, threads);
  if (queues == 0)
    {
      g_autoptr(AmkKernelAttributes) attr = amk_launcher_kernel_attributes (launcher, threads, 0,
                                                                            &error);
      g_assert_no_error (error);
      queues = (guint) attr->num_sms;
    }
  name = amk_launcher_get_device_name (launcher, NULL);
  g_test_message ("%s: %u queues of %u threads", name != NULL ? name : "GPU", queues, threads);

  model = test_load_model (path, queues, 256);
  exact = golden_check (g, model, launcher);
  g_test_message ("%u of %u prompts equal transformers' continuation in full", exact,
                  g->prompts->len);
}

static void
test_golden_megakernel (void)
{
  run_golden (0, 512);
}

static void
test_golden_four_queues (void)
{
  run_golden (4, 256);
}

static const char *amk_tool;

/* SmolLM2 quantized by `amk quantize` to `mix`, its quantized matrices kept on the device
 * (keep-quantized), against transformers' continuations of the same quantized file. */
static void
test_golden_quantized (gconstpointer data)
{
  const char *mix = data;
  g_autofree char *dir = NULL, *path = NULL;
  g_autoptr(Golden) g = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(GError) error = NULL;
  guint exact;

  if (!need_gpu () || (g = golden_quantized (amk_tool, mix, &dir, &path)) == NULL)
    goto out;
  launcher = amk_launcher_new (0);
  model = g_initable_new (AMK_TYPE_MODEL, NULL, &error, "path", path, "context-length", 256,
                          "keep-quantized", TRUE, NULL);
  g_assert_no_error (error);
  exact = golden_check (g, model, launcher);
  g_test_message ("%s: %u of %u prompts equal transformers' continuation in full", mix, exact,
                  g->prompts->len);
out:
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
  g_test_add_func ("/amk/gpu/golden/one-queue-per-sm", test_golden_megakernel);
  g_test_add_func ("/amk/gpu/golden/four-queues", test_golden_four_queues);
  g_test_add_data_func ("/amk/gpu/golden/quantized/q8_0", "q8_0", test_golden_quantized);
  g_test_add_data_func ("/amk/gpu/golden/quantized/q4_k_m", "q4_k_m", test_golden_quantized);
  return g_test_run ();
}

/* test-model-golden.c: SmolLM2-135M's greedy continuations on the CPU executor against
 * those of Hugging Face transformers on the same GGUF (the "cpu" reference of
 * tests/golden/smollm2-golden.json, see tests/golden/amk-golden.h). Skipped unless
 * AMK_TEST_GGUF names the model file (build/tools/amk fetch-model prints its path;
 * .ci/run sets it). The same model quantized: test-quantized-golden.c.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include "../golden/amk-golden.h"

static void
test_golden_json (void)
{
  g_autofree char *json = golden_default_json_path ();
  const char *references[] = { "cpu", "gpu" };

  /* the json itself, for each executor's reference: three or more prompts of
   * max_new_tokens each, a sane tolerance */
  for (guint r = 0; r < G_N_ELEMENTS (references); r++)
    {
      g_autoptr(Golden) g = golden_load (json, references[r]);

      g_assert_cmpuint (g->max_new_tokens, ==, 32);
      g_assert_cmpfloat (g->tolerance, >, 0.0);
      g_assert_cmpfloat (g->tolerance, <, 1.0);
      g_assert_cmpint (g->eos_id, >=, 0);
      g_assert_cmpuint (g->prompts->len, >=, 3);
      for (guint i = 0; i < g->prompts->len; i++)
        {
          GoldenPrompt *p = g_ptr_array_index (g->prompts, i);
          g_assert_cmpuint (p->prompt_ids->len, >, 0);
          g_assert_cmpuint (p->generated->len, <=, g->max_new_tokens);
          if (p->answer != NULL)
            g_assert_nonnull (strstr (p->text, p->answer));
        }
    }
}

static void
run_golden_cpu (guint queues)
{
  const char *path = NULL;
  g_autoptr(Golden) g = NULL;
  g_autoptr(AmkModel) model = NULL;
  guint exact;

  /* the CPU executor keeps Q8_0 and K-quant matrices as stored: its own reference */
  if ((g = golden_open ("cpu", &path)) == NULL)
    return;
  model = test_load_model (path, queues, 256);
  exact = golden_check (g, model, NULL);
  g_test_message ("%u queues: %u of %u prompts equal transformers' continuation in full",
                  queues, exact, g->prompts->len);
}

static void
test_golden_cpu (void)
{
  run_golden_cpu (4);
}

/* The H200's layout, one queue per SM: SmolLM2's o and down projections (576 rows) fill
 * only 36 queues with row tiles, so the compiler splits their columns (split-K tiles
 * adding onto the residual stream): the sums take another order. */
static void
test_golden_cpu_split_k (void)
{
  run_golden_cpu (132);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C.UTF-8");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/model/golden/json", test_golden_json);
  g_test_add_func ("/amk/model/golden/cpu", test_golden_cpu);
  g_test_add_func ("/amk/model/golden/cpu-split-k", test_golden_cpu_split_k);
  return g_test_run ();
}

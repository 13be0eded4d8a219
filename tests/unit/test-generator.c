/* test-generator.c: AmkModel and AmkGenerator: properties and errors without a model
 * file, the host sampler, and with a real GGUF (AMK_TEST_GGUF, else skipped) greedy and
 * sampled generation on the CPU executor, stops, cancellation and the async variant.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <glib/gstdio.h>
#include <gio/gio.h>
#include "amk-sampler-private.h"

#define PROMPT "The capital of France is"
#define SKIP_MESSAGE "set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)"

static AmkModel *shared_model;

static const char *
model_path (void)
{
  const char *path = g_getenv ("AMK_TEST_GGUF");

  if (path == NULL || *path == '\0' || !g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return NULL;
  return path;
}

/* The model of AMK_TEST_GGUF, loaded once; NULL (and the test skipped) without one. */
static AmkModel *
get_model (void)
{
  g_autoptr(GError) error = NULL;
  const char *path = model_path ();

  if (path == NULL)
    {
      g_test_skip (SKIP_MESSAGE);
      return NULL;
    }
  if (shared_model == NULL)
    {
      shared_model = amk_model_new_from_file (path, NULL, &error);
      g_assert_no_error (error);
      g_assert_nonnull (shared_model);
    }
  return shared_model;
}

static void
assert_tokens_equal (const gint32 *a, gsize n_a, const gint32 *b, gsize n_b)
{
  g_assert_cmpuint (n_a, ==, n_b);
  for (gsize i = 0; i < n_a; i++)
    g_assert_cmpint (a[i], ==, b[i]);
}

/* ---- without a model file ---------------------------------------------------------- */

static void
test_model_properties_unloaded (void)
{
  g_autoptr(AmkModel) model = g_object_new (AMK_TYPE_MODEL, "path", "/nonexistent/m.gguf",
                                            "context-length", 256, NULL);
  g_autofree char *path = NULL;
  g_autofree char *arch = NULL;
  g_autoptr(AmkTokenizer) tok = NULL;
  gboolean loaded = TRUE;
  guint context = 0, n_queues = 7;
  guint64 weight_bytes = 1;
  AmkDType dtype = AMK_DTYPE_F32;

  g_object_get (model, "path", &path, "loaded", &loaded, "architecture", &arch,
                "context-length", &context, "n-queues", &n_queues, "dtype", &dtype,
                "weight-bytes", &weight_bytes, "tokenizer", &tok, NULL);
  g_assert_cmpstr (path, ==, "/nonexistent/m.gguf");
  g_assert_false (loaded);
  g_assert_null (arch);
  g_assert_cmpuint (context, ==, 256);
  g_assert_cmpuint (n_queues, ==, 0);
  g_assert_cmpint (dtype, ==, AMK_DTYPE_BF16);
  g_assert_cmpuint (weight_bytes, ==, 0);
  g_assert_null (tok);
  g_assert_null (amk_model_get_program (model));
  g_assert_cmpuint (amk_model_get_vocab_size (model), ==, 0);
}

static void
test_model_missing_file (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModel) model = amk_model_new_from_file ("/nonexistent/model.gguf", NULL, &error);

  g_assert_null (model);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
}

static void
test_model_not_gguf (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autofree char *path = NULL;
  int fd = g_file_open_tmp ("amk-test-XXXXXX.gguf", &path, &error);

  g_assert_no_error (error);
  g_assert_true (g_file_set_contents (path, "This is not a model, just some text.\n", -1, &error));
  g_assert_no_error (error);
  close (fd);
  model = amk_model_new_from_file (path, NULL, &error);
  g_assert_null (model);
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT);
  g_unlink (path);
}

static void
test_model_folder (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autofree char *dir = g_dir_make_tmp ("amk-test-XXXXXX", &error);

  g_assert_no_error (error);
  /* a folder is read as a Hugging Face checkpoint: an empty one lacks config.json */
  model = amk_model_new_from_file (dir, NULL, &error);
  g_assert_null (model);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "config.json"));
  g_rmdir (dir);
}

static void
test_model_no_path (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModel) model = g_initable_new (AMK_TYPE_MODEL, NULL, &error, NULL);

  g_assert_null (model);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
}

static void
test_model_cancelled (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(AmkModel) model = NULL;

  g_cancellable_cancel (cancellable);
  model = amk_model_new_from_file ("/nonexistent/model.gguf", cancellable, &error);
  g_assert_null (model);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
}

static void
on_model_loaded (GObject *source, GAsyncResult *result, gpointer user_data)
{
  GAsyncResult **out = user_data;

  *out = g_object_ref (result);
}

static void
test_model_async_missing (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(AmkModel) model = NULL;

  amk_model_new_from_file_async ("/nonexistent/model.gguf", NULL, on_model_loaded, &result);
  while (result == NULL)
    g_main_context_iteration (NULL, TRUE);
  model = amk_model_new_from_file_finish (result, &error);
  g_assert_null (model);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
}

static void
on_notify (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  guint *count = user_data;

  (*count)++;
}

static void
test_generator_properties (void)
{
  g_autoptr(AmkModel) model = g_object_new (AMK_TYPE_MODEL, "path", "/nonexistent/m.gguf", NULL);
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);
  g_autoptr(AmkModel) model_prop = NULL;
  gdouble temperature = -1, top_p = -1;
  guint top_k = 1, max_tokens = 0, notified = 0;
  guint64 seed = 1;
  gsize n_tokens = 1;

  g_assert_true (amk_generator_get_model (gen) == model);
  /* given no executor, the generator makes a CPU executor */
  g_assert_true (AMK_IS_CPU_EXECUTOR (amk_generator_get_executor (gen)));
  g_object_get (gen, "model", &model_prop, "temperature", &temperature, "top-k", &top_k,
                "top-p", &top_p, "seed", &seed, "max-tokens", &max_tokens, NULL);
  g_assert_true (model_prop == model);
  g_assert_cmpfloat (temperature, ==, 0.0);
  g_assert_cmpuint (top_k, ==, 0);
  g_assert_cmpfloat (top_p, ==, 1.0);
  g_assert_cmpuint (seed, ==, 0);
  g_assert_cmpuint (max_tokens, ==, 128);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 0);
  g_assert_cmpuint (amk_generator_get_generated_tokens (gen), ==, 0);
  g_assert_cmpuint (amk_generator_get_prompt_tokens (gen), ==, 0);
  g_assert_cmpfloat (amk_generator_get_prefill_tokens_per_second (gen), ==, 0.0);
  g_assert_cmpfloat (amk_generator_get_tokens_per_second (gen), ==, 0.0);
  amk_generator_get_tokens (gen, &n_tokens);
  g_assert_cmpuint (n_tokens, ==, 0);

  g_signal_connect (gen, "notify", G_CALLBACK (on_notify), &notified);
  amk_generator_set_temperature (gen, 0.7);
  amk_generator_set_temperature (gen, 0.7);   /* no change: no notify */
  amk_generator_set_top_k (gen, 40);
  amk_generator_set_top_p (gen, 0.9);
  amk_generator_set_seed (gen, 1234);
  amk_generator_set_max_tokens (gen, 16);
  g_assert_cmpuint (notified, ==, 5);
  g_assert_cmpfloat (amk_generator_get_temperature (gen), ==, 0.7);
  g_assert_cmpuint (amk_generator_get_top_k (gen), ==, 40);
  g_assert_cmpfloat (amk_generator_get_top_p (gen), ==, 0.9);
  g_assert_cmpuint (amk_generator_get_seed (gen), ==, 1234);
  g_assert_cmpuint (amk_generator_get_max_tokens (gen), ==, 16);
  g_object_set (gen, "temperature", 0.0, "seed", G_GUINT64_CONSTANT (1) << 40, NULL);
  g_assert_cmpuint (amk_generator_get_seed (gen), ==, G_GUINT64_CONSTANT (1) << 40);

  amk_generator_add_stop_token (gen, 2);
  amk_generator_add_stop_string (gen, "\n\n");
  amk_generator_clear_stops (gen);
  amk_generator_reset (gen);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 0);
}

/* Errors that need no model file: the arguments are checked before the model loads. */
static void
test_generator_errors (void)
{
  g_autoptr(AmkModel) model = g_object_new (AMK_TYPE_MODEL, "path", "/nonexistent/m.gguf", NULL);
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  GError *error = NULL;
  char *text;

  text = amk_generator_generate (gen, "", 4, NULL, &error);
  g_assert_null (text);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_EMPTY_PROMPT);
  g_clear_error (&error);

  g_assert_false (amk_generator_prefill (gen, "", NULL, &error));
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_EMPTY_PROMPT);
  g_clear_error (&error);

  amk_generator_set_temperature (gen, -0.5);
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  g_assert_null (text);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_INVALID_TEMPERATURE);
  g_assert_nonnull (strstr (error->message, "-0.5"));
  g_clear_error (&error);

  amk_generator_set_temperature (gen, NAN);
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_INVALID_TEMPERATURE);
  g_clear_error (&error);

  amk_generator_set_temperature (gen, 0.8);
  amk_generator_set_top_p (gen, 1.5);
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_INVALID_TOP_P);
  g_assert_nonnull (strstr (error->message, "1.5"));
  g_clear_error (&error);

  amk_generator_set_top_p (gen, 0.0);
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_INVALID_TOP_P);
  g_clear_error (&error);
  amk_generator_set_top_p (gen, 1.0);

  g_cancellable_cancel (cancellable);
  text = amk_generator_generate (gen, PROMPT, 4, cancellable, &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);

  /* valid arguments: now the model's own error */
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  g_assert_null (text);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_clear_error (&error);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 0);
}

static void
no_model_done (GObject *source, GAsyncResult *result, gpointer data)
{
  GError **error = data;
  char *text = amk_generator_generate_finish (AMK_GENERATOR (source), result, error);

  g_assert_null (text);
}

/* A generator made without a model, as a binding can (Amk.Generator()): no critical,
 * and every run, also an asynchronous one, fails with NO_MODEL. */
static void
test_generator_no_model (void)
{
  g_autoptr(AmkGenerator) gen = g_object_new (AMK_TYPE_GENERATOR, NULL);
  g_autoptr(GMainContext) context = g_main_context_new ();
  GError *error = NULL;

  g_assert_null (amk_generator_get_model (gen));
  g_assert_null (amk_generator_generate (gen, PROMPT, 4, NULL, &error));
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_NO_MODEL);
  g_clear_error (&error);
  g_assert_false (amk_generator_prefill (gen, PROMPT, NULL, &error));
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_NO_MODEL);
  g_clear_error (&error);

  g_main_context_push_thread_default (context);
  amk_generator_generate_async (gen, PROMPT, 4, NULL, no_model_done, &error);
  while (error == NULL)
    g_main_context_iteration (context, TRUE);
  g_main_context_pop_thread_default (context);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_NO_MODEL);
  g_clear_error (&error);
}

/* ---- the sampler --------------------------------------------------------------------- */

static void
test_sampler (void)
{
  const float logits[] = { 0.5f, 2.0f, -1.0f, 1.9f, NAN, -INFINITY, 0.0f, 2.0f };
  const float none[] = { NAN, -INFINITY };
  guint counts[G_N_ELEMENTS (logits)] = { 0 };
  g_autoptr(GRand) r1 = g_rand_new_with_seed (7);
  g_autoptr(GRand) r2 = g_rand_new_with_seed (7);
  gsize n = G_N_ELEMENTS (logits);

  /* ties go to the lower id */
  g_assert_cmpint (amk_sample_argmax (logits, n), ==, 1);
  g_assert_cmpint (amk_sample_argmax (none, 2), ==, -1);
  g_assert_cmpint (amk_sample_token (none, 2, 1.0, 0, 1.0, r1), ==, -1);
  /* top-k 1, a tiny top-p and a tiny temperature are all the argmax */
  g_assert_cmpint (amk_sample_token (logits, n, 1.0, 1, 1.0, r1), ==, 1);
  g_assert_cmpint (amk_sample_token (logits, n, 1.0, 0, 1e-6, r1), ==, 1);
  /* (a tiny temperature still draws between equal logits) */
  g_assert_cmpint (amk_sample_token (logits, 4, 1e-6, 0, 1.0, r1), ==, 1);

  /* the same seed, the same tokens */
  g_rand_set_seed (r1, 99);
  g_rand_set_seed (r2, 99);
  for (guint i = 0; i < 100; i++)
    g_assert_cmpint (amk_sample_token (logits, n, 1.3, 0, 0.95, r1), ==,
                     amk_sample_token (logits, n, 1.3, 0, 0.95, r2));

  /* top-k 3 keeps ids 1, 7, 3; never a non-finite logit; roughly the softmax */
  for (guint i = 0; i < 3000; i++)
    {
      gint32 t = amk_sample_token (logits, n, 1.0, 3, 1.0, r1);

      g_assert_cmpint (t, >=, 0);
      g_assert_cmpint (t, <, (gint32) n);
      counts[t]++;
    }
  g_assert_cmpuint (counts[0] + counts[2] + counts[4] + counts[5] + counts[6], ==, 0);
  g_assert_cmpuint (counts[1], >, 800);
  g_assert_cmpuint (counts[7], >, 800);
  g_assert_cmpuint (counts[3], >, 800);

  /* the nucleus: the weights are e^0.5, e^2, e^-1, e^1.9, -, -, e^0, e^2 (24.5 in all);
   * top-p 0.5 keeps ids 1 and 7 (14.8), top-p 0.7 ids 1, 7 and 3 (21.5) */
  memset (counts, 0, sizeof counts);
  for (guint i = 0; i < 2000; i++)
    counts[amk_sample_token (logits, n, 1.0, 0, 0.5, r1)]++;
  g_assert_cmpuint (counts[1] + counts[7], ==, 2000);
  g_assert_cmpuint (counts[1], >, 800);
  g_assert_cmpuint (counts[7], >, 800);
  memset (counts, 0, sizeof counts);
  for (guint i = 0; i < 3000; i++)
    counts[amk_sample_token (logits, n, 1.0, 0, 0.7, r1)]++;
  g_assert_cmpuint (counts[1] + counts[7] + counts[3], ==, 3000);
  g_assert_cmpuint (counts[3], >, 800);
  /* top-k then top-p: of ids 1, 7 and 3, top-p 0.6 keeps 1 and 7 */
  memset (counts, 0, sizeof counts);
  for (guint i = 0; i < 1000; i++)
    counts[amk_sample_token (logits, n, 1.0, 3, 0.6, r1)]++;
  g_assert_cmpuint (counts[1] + counts[7], ==, 1000);
}

/* ---- with a model file --------------------------------------------------------------- */

static void
test_model_loaded (void)
{
  AmkModel *model = get_model ();
  AmkTokenizer *tok;

  if (model == NULL)
    return;
  g_assert_true (amk_model_get_loaded (model));
  g_assert_cmpstr (amk_model_get_architecture (model), ==, "llama");
  g_assert_cmpuint (amk_model_get_n_layers (model), >, 0);
  g_assert_cmpuint (amk_model_get_hidden_size (model), >, 0);
  g_assert_cmpuint (amk_model_get_vocab_size (model), >, 0);
  g_assert_cmpuint (amk_model_get_context_length (model), >, 0);
  g_assert_cmpuint (amk_model_get_context_length (model), <=, 2048);
  g_assert_cmpuint (amk_model_get_n_queues (model), >, 0);
  /* bf16: two bytes a weight, at least the embedding table */
  g_assert_cmpuint (amk_model_get_weight_bytes (model), >=,
                    2 * (guint64) amk_model_get_vocab_size (model) * amk_model_get_hidden_size (model));
  tok = amk_model_get_tokenizer (model);
  g_assert_true (AMK_IS_TOKENIZER (tok));
  g_assert_cmpuint (amk_tokenizer_get_vocab_size (tok), ==, amk_model_get_vocab_size (model));
  g_assert_true (AMK_IS_PROGRAM (amk_model_get_program (model)));
  g_assert_true (amk_program_get_verified (amk_model_get_program (model)));
  g_test_message ("%s: %u layers, hidden %u, vocab %u, context %u, %u queues, %" G_GUINT64_FORMAT
                  " weight bytes", amk_model_get_path (model), amk_model_get_n_layers (model),
                  amk_model_get_hidden_size (model), amk_model_get_vocab_size (model),
                  amk_model_get_context_length (model), amk_model_get_n_queues (model),
                  amk_model_get_weight_bytes (model));
}

typedef struct {
  GArray  *ids;
  GString *text;
  GThread *thread;
} Collected;

static void
on_token (AmkGenerator *gen, gint token_id, const char *piece, gpointer user_data)
{
  Collected *c = user_data;
  gint32 id = token_id;

  g_assert_true (g_thread_self () == c->thread);
  g_array_append_val (c->ids, id);
  g_string_append (c->text, piece);
}

static void
collected_init (Collected *c)
{
  c->ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  c->text = g_string_new (NULL);
  c->thread = g_thread_self ();
}

static void
collected_clear (Collected *c)
{
  g_array_unref (c->ids);
  g_string_free (c->text, TRUE);
}

/* Greedy decoding by hand, as a reference: every token uploaded, the argmax of the
 * downloaded logits taken on the host (the generator leaves the token on the device,
 * where the step's ARGMAX wrote it). The ids until EOS or max_tokens. */
static GArray *
reference_greedy (AmkModel   *model,
                  const char *prompt,
                  guint       max_tokens,
                  guint      *n_prompt)
{
  AmkProgram *program = amk_model_get_program (model);
  AmkTokenizer *tok = amk_model_get_tokenizer (model);
  const gint tokens = amk_program_find_buffer (program, "tokens");
  const gint pos = amk_program_find_buffer (program, "pos");
  const gint logits = amk_program_find_buffer (program, "logits");
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  GArray *out = g_array_new (FALSE, FALSE, sizeof (gint32));
  gsize n_ids = 0;
  gint32 token = -1;

  g_assert_true (tokens >= 0 && pos >= 0 && logits >= 0);
  ids = amk_tokenizer_encode (tok, prompt, TRUE, &n_ids, &error);
  g_assert_no_error (error);
  ex = amk_cpu_executor_new (program, &error);
  g_assert_no_error (error);
  for (gsize i = 0; out->len < max_tokens; i++)
    {
      g_autoptr(GBytes) in = g_bytes_new (i < n_ids ? &ids[i] : &token, sizeof (gint32));
      g_autoptr(GBytes) at = g_bytes_new (&(gint32) { (gint32) i }, sizeof (gint32));
      g_autoptr(GBytes) scores = NULL;
      const float *v;
      gsize size;

      g_assert_true (amk_cpu_executor_upload (ex, (guint) tokens, in, &error));
      g_assert_true (amk_cpu_executor_upload (ex, (guint) pos, at, &error));
      g_assert_true (amk_cpu_executor_run (ex, &error));
      g_assert_no_error (error);
      if (i + 1 < n_ids)
        continue;
      scores = amk_cpu_executor_download (ex, (guint) logits, &error);
      g_assert_no_error (error);
      v = g_bytes_get_data (scores, &size);
      token = 0;
      for (gsize t = 1; t < size / sizeof (float); t++)
        if (v[t] > v[token])
          token = (gint32) t;
      if (token == amk_tokenizer_get_eos_id (tok))
        break;
      g_array_append_val (out, token);
    }
  *n_prompt = (guint) n_ids;
  return out;
}

/* Greedy: the same tokens as the reference loop above, one ::token per token. */
static void
test_generator_greedy (void)
{
  AmkModel *model = get_model ();
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) reference = NULL;
  g_autofree char *expected_text = NULL;
  g_autofree char *text = NULL;
  const gint32 *tokens, *expected;
  gsize n_expected = 0, n_tokens = 0;
  guint n_prompt = 0, generate_steps;
  gdouble prefill_rate, rate;
  gint64 start, usec;
  Collected c;

  if (model == NULL)
    return;
  reference = reference_greedy (model, PROMPT, 4, &n_prompt);
  expected = (const gint32 *) reference->data;
  n_expected = reference->len;
  expected_text = amk_tokenizer_decode (amk_model_get_tokenizer (model), expected, n_expected,
                                        &error);
  g_assert_no_error (error);

  gen = amk_generator_new (model, NULL);
  collected_init (&c);
  g_signal_connect (gen, "token", G_CALLBACK (on_token), &c);
  start = g_get_monotonic_time ();
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  usec = g_get_monotonic_time () - start;
  g_assert_no_error (error);
  g_assert_nonnull (text);
  tokens = amk_generator_get_tokens (gen, &n_tokens);
  assert_tokens_equal (tokens, n_tokens, expected, n_expected);
  g_assert_cmpstr (text, ==, expected_text);
  assert_tokens_equal ((const gint32 *) c.ids->data, c.ids->len, expected, n_expected);
  g_assert_cmpstr (c.text->str, ==, text);
  g_assert_cmpuint (amk_generator_get_generated_tokens (gen), ==, n_tokens);
  g_assert_cmpuint (amk_generator_get_prompt_tokens (gen), ==, n_prompt);
  /* the last token is generated but not fed yet */
  g_assert_cmpuint (amk_generator_get_position (gen), ==, n_prompt + n_tokens - 1);

  /* the speeds: the prefill's steps (one per prompt token) and the generation's (one
   * per generated token after the first, which the prompt's last step computed) take
   * no more than the whole call together */
  g_assert_cmpuint (n_tokens, ==, 4);
  generate_steps = (guint) n_tokens - 1;
  prefill_rate = amk_generator_get_prefill_tokens_per_second (gen);
  rate = amk_generator_get_tokens_per_second (gen);
  g_assert_cmpfloat (prefill_rate, >, 0.0);
  g_assert_cmpfloat (rate, >, 0.0);
  g_assert_cmpfloat (n_prompt / prefill_rate + generate_steps / rate, <=, usec / 1e6 + 1e-6);
  {
    gdouble prefill_prop = 0, rate_prop = 0;

    g_object_get (gen, "prefill-tokens-per-second", &prefill_prop, "tokens-per-second", &rate_prop,
                  NULL);
    g_assert_cmpfloat (prefill_prop, ==, prefill_rate);
    g_assert_cmpfloat (rate_prop, ==, rate);
  }
  g_test_message ("\"%s%s\": prompt %u tokens at %.2f tokens/s, generation at %.2f tokens/s "
                  "(the call: %.3f s)", PROMPT, text, n_prompt, prefill_rate, rate, usec / 1e6);

  /* one token: no step after the prompt's, no generation speed */
  g_free (amk_generator_generate (gen, " It", 1, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (amk_generator_get_generated_tokens (gen), ==, 1);
  g_assert_cmpfloat (amk_generator_get_prefill_tokens_per_second (gen), >, 0.0);
  g_assert_cmpfloat (amk_generator_get_tokens_per_second (gen), ==, 0.0);
  collected_clear (&c);
}

static GArray *
generate_ids (AmkGenerator *gen, const char *prompt, guint max_tokens)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *text = amk_generator_generate (gen, prompt, max_tokens, NULL, &error);
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  const gint32 *tokens;
  gsize n = 0;

  g_assert_no_error (error);
  g_assert_nonnull (text);
  tokens = amk_generator_get_tokens (gen, &n);
  g_array_append_vals (ids, tokens, (guint) n);
  return ids;
}

/* Sampling: the same seed gives the same tokens; a tiny temperature gives greedy's. */
static void
test_generator_sampling (void)
{
  AmkModel *model = get_model ();
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(GArray) greedy = NULL;
  g_autoptr(GArray) cold = NULL;
  g_autoptr(GArray) first = NULL;
  g_autoptr(GArray) second = NULL;

  if (model == NULL)
    return;
  gen = amk_generator_new (model, NULL);
  greedy = generate_ids (gen, PROMPT, 4);

  amk_generator_reset (gen);
  amk_generator_set_temperature (gen, 1e-4);
  cold = generate_ids (gen, PROMPT, 4);
  assert_tokens_equal ((const gint32 *) cold->data, cold->len,
                       (const gint32 *) greedy->data, greedy->len);

  g_object_set (gen, "temperature", 1.5, "top-k", 50, "top-p", 0.95, "seed", 42, NULL);
  amk_generator_reset (gen);
  first = generate_ids (gen, "Once upon a time", 4);
  amk_generator_reset (gen);
  second = generate_ids (gen, "Once upon a time", 4);
  assert_tokens_equal ((const gint32 *) first->data, first->len,
                       (const gint32 *) second->data, second->len);
}

/* A session: the second call continues where the first ended; a stop token ends a
 * call; a cancelled call changes nothing. */
static void
test_generator_session (void)
{
  AmkModel *model = get_model ();
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(GArray) greedy = NULL;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  g_autofree char *cancelled = NULL;
  guint position;
  gsize n = 0;

  if (model == NULL)
    return;
  gen = amk_generator_new (model, NULL);
  greedy = generate_ids (gen, PROMPT, 2);
  g_assert_cmpuint (greedy->len, ==, 2);

  /* stop at greedy's second token: one token, the stop token fed next time */
  amk_generator_reset (gen);
  amk_generator_add_stop_token (gen, g_array_index (greedy, gint32, 1));
  text = amk_generator_generate (gen, PROMPT, 4, NULL, &error);
  g_assert_no_error (error);
  amk_generator_get_tokens (gen, &n);
  g_assert_cmpuint (n, ==, 1);
  g_assert_cmpint (amk_generator_get_tokens (gen, &n)[0], ==, g_array_index (greedy, gint32, 0));
  position = amk_generator_get_position (gen);

  g_cancellable_cancel (cancellable);
  cancelled = amk_generator_generate (gen, " And", 2, cancellable, &error);
  g_assert_null (cancelled);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, position);

  g_clear_pointer (&text, g_free);
  amk_generator_clear_stops (gen);
  g_assert_true (amk_generator_prefill (gen, " It", NULL, &error));
  g_assert_no_error (error);
  /* the stop token and " It" came in */
  g_assert_cmpuint (amk_generator_get_position (gen), ==, position + 2);
  text = amk_generator_generate (gen, " is", 1, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (amk_generator_get_prompt_tokens (gen), ==, 1);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, position + 3);
}

/* A stop string: the text ends before it; the tokens that spelt it were generated. */
static void
test_generator_stop_string (void)
{
  AmkModel *model = get_model ();
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  Collected c;

  if (model == NULL)
    return;
  gen = amk_generator_new (model, NULL);
  amk_generator_add_stop_string (gen, ".");
  collected_init (&c);
  g_signal_connect (gen, "token", G_CALLBACK (on_token), &c);
  text = amk_generator_generate (gen, PROMPT, 6, NULL, &error);
  g_assert_no_error (error);
  /* greedy: " Paris" "." ... */
  g_assert_cmpstr (text, ==, " Paris");
  g_assert_cmpstr (c.text->str, ==, " Paris.");
  g_assert_cmpuint (amk_generator_get_generated_tokens (gen), ==, 2);
  collected_clear (&c);
}

/* A context of 8 positions: generation stops when it is full, then prompts fail. */
static void
test_generator_context_full (void)
{
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  g_autofree char *more = NULL;
  const char *path = model_path ();
  guint n_prompt;

  if (path == NULL)
    {
      g_test_skip (SKIP_MESSAGE);
      return;
    }
  model = g_initable_new (AMK_TYPE_MODEL, NULL, &error, "path", path, "context-length", 8,
                          "n-queues", 4, NULL);
  g_assert_no_error (error);
  g_assert_cmpuint (amk_model_get_context_length (model), ==, 8);
  g_assert_cmpuint (amk_model_get_n_queues (model), ==, 4);
  gen = amk_generator_new (model, NULL);
  text = amk_generator_generate (gen, PROMPT, 100, NULL, &error);
  g_assert_no_error (error);
  n_prompt = amk_generator_get_prompt_tokens (gen);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 8);
  g_assert_cmpuint (amk_generator_get_generated_tokens (gen), ==, 8 - n_prompt + 1);

  more = amk_generator_generate (gen, " More", 1, NULL, &error);
  g_assert_null (more);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_CONTEXT_FULL);
  g_assert_nonnull (strstr (error->message, "8"));
}

/* A generator on the CPU executor loads a model with its preferred queue count (one
 * per core), even where there is a GPU; an explicit count stays. */
static void
test_generator_cpu_queues (void)
{
  g_autoptr(GError) error = NULL;
  const char *path = model_path ();
  const guint asked[] = { 0, 3 }, expected[] = { g_get_num_processors (), 3 };

  if (path == NULL)
    {
      g_test_skip (SKIP_MESSAGE);
      return;
    }
  for (guint i = 0; i < G_N_ELEMENTS (asked); i++)
    {
      g_autoptr(AmkModel) model = g_object_new (AMK_TYPE_MODEL, "path", path, "context-length", 8,
                                                "n-queues", asked[i], NULL);
      g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);

      g_assert_false (amk_model_get_loaded (model));
      g_assert_true (amk_generator_prefill (gen, "Hi", NULL, &error));
      g_assert_no_error (error);
      g_assert_true (amk_model_get_loaded (model));
      g_assert_cmpuint (amk_model_get_n_queues (model), ==, expected[i]);
    }
}

typedef struct {
  Collected     tokens;
  guint         tokens_at_callback;
  guint         position_at_callback;
  char         *text;
  GError       *error;
  gboolean      done;
} AsyncState;

static void
on_generated (GObject *source, GAsyncResult *result, gpointer user_data)
{
  AsyncState *s = user_data;
  AmkGenerator *gen = AMK_GENERATOR (source);

  s->tokens_at_callback = s->tokens.ids->len;
  s->position_at_callback = amk_generator_get_position (gen);
  s->text = amk_generator_generate_finish (gen, result, &s->error);
  s->done = TRUE;
}

/* generate_async: ::token in this thread's context, all before the callback; a second
 * call meanwhile is BUSY; cancelling before it starts gives CANCELLED. */
static void
test_generator_async (void)
{
  AmkModel *model = get_model ();
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *busy = NULL;
  AsyncState s = { 0 };
  gsize n = 0;

  if (model == NULL)
    return;
  gen = amk_generator_new (model, NULL);
  collected_init (&s.tokens);
  g_signal_connect (gen, "token", G_CALLBACK (on_token), &s.tokens);

  amk_generator_generate_async (gen, PROMPT, 3, NULL, on_generated, &s);
  busy = amk_generator_generate (gen, PROMPT, 3, NULL, &error);
  g_assert_null (busy);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_BUSY);
  while (!s.done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_no_error (s.error);
  g_assert_nonnull (s.text);
  amk_generator_get_tokens (gen, &n);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpuint (s.tokens_at_callback, ==, 3);
  g_assert_cmpuint (s.position_at_callback, ==, amk_generator_get_position (gen));
  g_assert_cmpuint (s.position_at_callback, >, 0);
  g_assert_cmpstr (s.tokens.text->str, ==, s.text);
  g_clear_pointer (&s.text, g_free);

  s.done = FALSE;
  g_cancellable_cancel (cancellable);
  amk_generator_generate_async (gen, " more", 3, cancellable, on_generated, &s);
  while (!s.done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_error (s.error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_assert_null (s.text);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, s.position_at_callback);
  g_clear_error (&s.error);
  collected_clear (&s.tokens);
}

/* An executor that runs on a CPU executor but reads back logits that are not finite:
 * a model whose step went wrong, through the interface the generator takes. */
#define TEST_TYPE_NAN_EXECUTOR (test_nan_executor_get_type ())
G_DECLARE_FINAL_TYPE (TestNanExecutor, test_nan_executor, TEST, NAN_EXECUTOR, GObject)

struct _TestNanExecutor
{
  GObject      parent_instance;
  AmkExecutor *inner;
};

static void test_nan_executor_iface_init (AmkExecutorInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (TestNanExecutor, test_nan_executor, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (AMK_TYPE_EXECUTOR, test_nan_executor_iface_init))

static void
test_nan_executor_finalize (GObject *object)
{
  g_clear_object (&TEST_NAN_EXECUTOR (object)->inner);
  G_OBJECT_CLASS (test_nan_executor_parent_class)->finalize (object);
}

static void
test_nan_executor_class_init (TestNanExecutorClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = test_nan_executor_finalize;
}

static void
test_nan_executor_init (TestNanExecutor *self)
{
  self->inner = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
}

static gboolean
nan_load (AmkExecutor *e, AmkProgram *program, GError **error)
{
  return amk_executor_load (TEST_NAN_EXECUTOR (e)->inner, program, error);
}

static AmkProgram *
nan_get_program (AmkExecutor *e)
{
  return amk_executor_get_program (TEST_NAN_EXECUTOR (e)->inner);
}

static gboolean
nan_upload (AmkExecutor *e, guint buffer, GBytes *data, GError **error)
{
  return amk_executor_upload (TEST_NAN_EXECUTOR (e)->inner, buffer, data, error);
}

static GBytes *
nan_download (AmkExecutor *e, guint buffer, GError **error)
{
  AmkExecutor *inner = TEST_NAN_EXECUTOR (e)->inner;
  AmkProgram *program = amk_executor_get_program (inner);
  GBytes *bytes = amk_executor_download (inner, buffer, error);
  gsize size = 0;
  float *values;

  if (bytes == NULL || buffer != (guint) amk_program_find_buffer (program, "logits"))
    return bytes;
  values = g_bytes_unref_to_data (bytes, &size);
  for (gsize i = 0; i < size / sizeof (float); i++)
    values[i] = NAN;
  return g_bytes_new_take (values, size);
}

static gboolean
nan_run (AmkExecutor *e, GCancellable *cancellable, GError **error)
{
  return amk_executor_run (TEST_NAN_EXECUTOR (e)->inner, cancellable, error);
}

static AmkAbortRecord *
nan_get_last_abort (AmkExecutor *e)
{
  return amk_executor_get_last_abort (TEST_NAN_EXECUTOR (e)->inner);
}

static guint
nan_get_preferred_queues (AmkExecutor *e, GError **error)
{
  return amk_executor_get_preferred_queues (TEST_NAN_EXECUTOR (e)->inner, error);
}

static void
test_nan_executor_iface_init (AmkExecutorInterface *iface)
{
  iface->load = nan_load;
  iface->get_program = nan_get_program;
  iface->upload = nan_upload;
  iface->download = nan_download;
  iface->run = nan_run;
  iface->get_last_abort = nan_get_last_abort;
  iface->get_preferred_queues = nan_get_preferred_queues;
}

/* Sampling from logits that are not finite gives no token: NO_TOKEN, and the session
 * stays where it was. */
static void
test_generator_no_token (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(AmkExecutor) executor = g_object_new (TEST_TYPE_NAN_EXECUTOR, NULL);
  g_autoptr(AmkGenerator) gen = NULL;
  g_autofree char *text = NULL;
  g_autofree char *description = NULL;
  const char *path = model_path ();

  if (path == NULL)
    {
      g_test_skip (SKIP_MESSAGE);
      return;
    }
  /* the interface's default description: the type's name */
  description = amk_executor_get_description (executor);
  g_assert_cmpstr (description, ==, "TestNanExecutor");

  model = g_object_new (AMK_TYPE_MODEL, "path", path, "context-length", 16, NULL);
  gen = amk_generator_new (model, executor);
  g_assert_true (amk_generator_get_executor (gen) == executor);
  amk_generator_set_temperature (gen, 0.8);
  text = amk_generator_generate (gen, PROMPT, 2, NULL, &error);
  g_assert_null (text);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_NO_TOKEN);
  /* the wrapped CPU executor's queue count */
  g_assert_cmpuint (amk_model_get_n_queues (model), ==, g_get_num_processors ());
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 0);
}

int
main (int argc, char **argv)
{
  int ret;

  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/model/properties-unloaded", test_model_properties_unloaded);
  g_test_add_func ("/amk/model/error/missing-file", test_model_missing_file);
  g_test_add_func ("/amk/model/error/not-gguf", test_model_not_gguf);
  g_test_add_func ("/amk/model/error/folder", test_model_folder);
  g_test_add_func ("/amk/model/error/no-path", test_model_no_path);
  g_test_add_func ("/amk/model/error/cancelled", test_model_cancelled);
  g_test_add_func ("/amk/model/error/async-missing-file", test_model_async_missing);
  g_test_add_func ("/amk/generator/properties", test_generator_properties);
  g_test_add_func ("/amk/generator/errors", test_generator_errors);
  g_test_add_func ("/amk/generator/error/no-model", test_generator_no_model);
  g_test_add_func ("/amk/generator/sampler", test_sampler);
  g_test_add_func ("/amk/model/loaded", test_model_loaded);
  g_test_add_func ("/amk/generator/greedy", test_generator_greedy);
  g_test_add_func ("/amk/generator/cpu-queues", test_generator_cpu_queues);
  g_test_add_func ("/amk/generator/sampling", test_generator_sampling);
  g_test_add_func ("/amk/generator/session", test_generator_session);
  g_test_add_func ("/amk/generator/stop-string", test_generator_stop_string);
  g_test_add_func ("/amk/generator/context-full", test_generator_context_full);
  g_test_add_func ("/amk/generator/async", test_generator_async);
  g_test_add_func ("/amk/generator/error/no-token", test_generator_no_token);
  ret = g_test_run ();
  g_clear_object (&shared_model);
  return ret;
}

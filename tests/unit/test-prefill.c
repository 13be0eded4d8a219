/* test-prefill.c: the prefill chunk (amk_model_build_prefill()) and the generator's
 * chunked prefill on the CPU executor.
 *
 * A model loaded with a small prefill chunk (4 or 5 rows, so that a prompt takes
 * several launches and the last one has padding rows) must give the logits of the
 * prompt's last token that the same model gives when every prompt token goes through
 * the decode step (prefill-chunk 1), within PREFILL_TOL, and the same greedy tokens,
 * also when a conversation continues. On the CPU executor the chunk has a head: the
 * prompt's last token goes through it too, and its logits come from the chunk. The tolerance: on the CPU, MATMUL and MATVEC both
 * compute in fp32 and differ only in the order of their sums, but the KV cache is bf16,
 * where a last-bit difference can flip a rounding, and that grows with the layers:
 * measured 4e-6 on the two-layer tiny checkpoints, 7e-4 on SmolLM2-135M's 30 layers.
 * On tests/data/tiny-llama and tiny-qwen3 always, on SmolLM2 (AMK_TEST_GGUF) when given.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include "amk-model-loader-private.h"
#include "amk-test-generate.h"

/* ||a - b|| / ||b||, the logits of the two paths */
#define PREFILL_TOL 5e-3

#define GGUF_PROMPT "The capital of France is Paris, and the capital of Spain is the city of"

/* The logits of the prompt's last token. Through the decode step: a generation of one
 * token runs the decode step of that token last. Through a chunk of `chunk` rows with a
 * head (chunk > 1: the CPU executor's), built here as the model builds it for the CPU
 * executor: the prompt's tokens fed launch by launch as the generator feeds them, the
 * head's row read back. */
static float *
prompt_logits (AmkModel   *model,
               const char *path,
               guint       chunk_rows,
               const char *prompt,
               guint      *n_prompt)
{
  g_autoptr(AmkExecutor) executor = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, executor);
  g_autoptr(GError) error = NULL;
  g_autofree char *text = amk_generator_generate (gen, prompt, 1, NULL, &error);
  g_autoptr(GBytes) bytes = NULL;
  const guint8 *data;
  gint logits;
  gsize size;

  g_assert_no_error (error);
  g_assert_nonnull (text);
  *n_prompt = amk_generator_get_prompt_tokens (gen);
  if (chunk_rows > 1)
    {
      const guint32 keep = (1u << AMK_DTYPE_Q8_0) | (1u << AMK_DTYPE_Q4_K) | (1u << AMK_DTYPE_Q5_K) |
                           (1u << AMK_DTYPE_Q6_K);
      g_autoptr(AmkModelSpec) spec = amk_model_read_spec (path, &error);
      g_autoptr(AmkModelBuild) build = amk_model_build_graph_keeping (spec, 1, 64, keep, &error);
      const AmkModelRows *chunk;
      g_autoptr(AmkExecutor) step = NULL;
      g_autoptr(AmkExecutor) rows = NULL;
      g_autofree gint32 *ids = NULL;
      g_autofree gint32 *pos = g_new (gint32, chunk_rows);
      g_autofree gint32 *head = g_new (gint32, chunk_rows);
      gsize n = 0, last = 0;

      g_assert_no_error (error);
      g_assert_true (amk_model_build_prefill (build, chunk_rows, AMK_DTYPE_F32, TRUE, &error));
      chunk = build->prefill;
      g_assert_cmpint (chunk->head_pos, >=, 0);
      step = AMK_EXECUTOR (amk_cpu_executor_new (build->program, &error));
      g_assert_no_error (error);
      rows = amk_executor_new_sibling (step);
      g_assert_true (amk_executor_load_shared (rows, chunk->program, step, &error));
      g_assert_no_error (error);
      ids = amk_tokenizer_encode (build->tokenizer, prompt, TRUE, &n, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (n, ==, *n_prompt);
      for (gsize fed = 0; fed < n; fed += chunk->rows)
        {
          g_autofree gint32 *row_ids = g_new0 (gint32, chunk->rows);
          g_autoptr(GBytes) b_ids = NULL, b_pos = NULL, b_head = NULL;

          for (gsize r = 0; r < chunk->rows; r++)
            {
              row_ids[r] = fed + r < n ? ids[fed + r] : 0;
              pos[r] = fed + r < n ? (gint32) (fed + r) : -1;
              head[r] = fed + r + 1 == n ? pos[r] : -1;
              if (fed + r + 1 == n)
                last = r;
            }
          b_ids = g_bytes_new (row_ids, chunk->rows * sizeof (gint32));
          b_pos = g_bytes_new (pos, chunk->rows * sizeof (gint32));
          b_head = g_bytes_new (head, chunk->rows * sizeof (gint32));
          g_assert_true (amk_executor_upload (rows, (guint) chunk->tokens, b_ids, &error) &&
                         amk_executor_upload (rows, (guint) chunk->pos, b_pos, &error) &&
                         amk_executor_upload (rows, (guint) chunk->head_pos, b_head, &error) &&
                         amk_executor_run (rows, NULL, &error));
          g_assert_no_error (error);
        }
      bytes = amk_executor_download (rows, (guint) chunk->logits, &error);
      g_assert_no_error (error);
      data = g_bytes_get_data (bytes, &size);
      g_assert_cmpuint (size, ==, chunk->rows * amk_model_get_vocab_size (model) * sizeof (float));
      return g_memdup2 (data + last * amk_model_get_vocab_size (model) * sizeof (float),
                        amk_model_get_vocab_size (model) * sizeof (float));
    }
  logits = amk_program_find_buffer (amk_model_get_program (model), "logits");
  g_assert_cmpint (logits, >=, 0);
  bytes = amk_executor_download (executor, (guint) logits, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (bytes), ==, amk_model_get_vocab_size (model) * sizeof (float));
  data = g_bytes_get_data (bytes, &size);
  return g_memdup2 (data, size);
}

/* The prefill program shares every weight of the decode step, as the same bytes, and
 * its caches. */
static void
assert_shares_weights (const char *path,
                       guint       chunk)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModelSpec) spec = amk_model_read_spec (path, &error);
  g_autoptr(AmkModelBuild) build = NULL;
  guint n_constants = 0;

  g_assert_no_error (error);
  build = amk_model_build_graph (spec, 1, 64, &error);
  g_assert_no_error (error);
  g_assert_true (amk_model_build_prefill (build, chunk, AMK_DTYPE_F32, FALSE, &error));
  g_assert_no_error (error);
  g_assert_nonnull (build->prefill->program);
  g_assert_cmpuint (build->prefill->rows, ==, chunk);
  for (guint b = 0; b < amk_program_get_n_buffers (build->prefill->program); b++)
    {
      const char *name = amk_program_get_buffer_name (build->prefill->program, b);
      gint d = amk_program_find_buffer (build->program, name);
      AmkBufferRole role = amk_program_get_buffer_role (build->prefill->program, b);

      if (role != AMK_BUFFER_ROLE_CONSTANT && role != AMK_BUFFER_ROLE_STATE)
        {
          g_assert_true (g_str_has_prefix (name, "prefill."));
          continue;
        }
      g_assert_cmpint (d, >=, 0);
      g_assert_cmpint (amk_program_get_buffer_role (build->program, (guint) d), ==, role);
      g_assert_cmpuint (amk_program_get_buffer_size (build->program, (guint) d), ==,
                        amk_program_get_buffer_size (build->prefill->program, b));
      if (role == AMK_BUFFER_ROLE_CONSTANT)
        {
          g_autoptr(GBytes) chunk_data = amk_program_get_buffer_data (build->prefill->program, b);
          g_autoptr(GBytes) step_data = amk_program_get_buffer_data (build->program, (guint) d);

          g_assert_true (chunk_data == step_data);
          n_constants++;
        }
    }
  g_assert_cmpuint (n_constants, >, 0);
}

static void
count_launch (AmkGenerator *gen, guint fed, guint total, gpointer user_data)
{
  (*(guint *) user_data)++;
}

/* Chunked prefill against token by token: the last prompt token's logits, and greedy
 * generation, in one call and continued in a second. */
static void
check_prefill (const char *path,
               const char *prompt,
               guint       chunk)
{
  g_autoptr(AmkModel) chunked = test_load_model_chunked (path, 0, 64, chunk);
  g_autoptr(AmkModel) stepped = test_load_model_chunked (path, 0, 64, 1);
  g_autoptr(GError) error = NULL;
  g_autofree float *want = NULL;
  g_autofree float *got = NULL;
  g_autoptr(GArray) want_ids = NULL;
  g_autoptr(GArray) got_ids = NULL;
  g_autoptr(AmkGenerator) gen_chunked = NULL;
  g_autoptr(AmkGenerator) gen_stepped = NULL;
  guint n_want = 0, n_got = 0, n_chunked = 0, n_stepped = 0;
  double err;

  g_assert_cmpuint (amk_model_get_prefill_chunk (chunked), ==, chunk);
  g_assert_cmpuint (amk_model_get_prefill_chunk (stepped), ==, 1);
  assert_shares_weights (path, chunk);
  g_assert_cmpuint (amk_model_get_weight_bytes (chunked), ==, amk_model_get_weight_bytes (stepped));

  want = prompt_logits (stepped, path, 1, prompt, &n_want);
  got = prompt_logits (chunked, path, chunk, prompt, &n_got);
  g_assert_cmpuint (n_got, ==, n_want);
  /* several launches, the last with padding rows */
  g_assert_cmpuint (n_got - 1, >, 2 * chunk);
  g_assert_cmpuint ((n_got - 1) % chunk, !=, 0);
  err = test_rel_error (got, want, amk_model_get_vocab_size (chunked));
  g_test_message ("%s: %u prompt tokens in chunks of %u: logits differ by %.2e (relative, norm-wise)",
                  path, n_got, chunk, err);
  g_assert_cmpfloat (err, <=, PREFILL_TOL);

  g_free (test_generate (stepped, NULL, prompt, 8, &want_ids, NULL, &error));
  g_assert_no_error (error);
  g_free (test_generate (chunked, NULL, prompt, 8, &got_ids, NULL, &error));
  g_assert_no_error (error);
  test_assert_ids_equal (got_ids, want_ids);

  /* a conversation: the second prompt comes after the first call's tokens */
  gen_chunked = amk_generator_new (chunked, NULL);
  gen_stepped = amk_generator_new (stepped, NULL);
  g_signal_connect (gen_chunked, "prefill-progress", G_CALLBACK (count_launch), &n_chunked);
  g_signal_connect (gen_stepped, "prefill-progress", G_CALLBACK (count_launch), &n_stepped);
  for (guint turn = 0; turn < 2; turn++)
    {
      g_autofree char *a = amk_generator_generate (gen_chunked, prompt, 3, NULL, &error);
      g_autofree char *b = NULL;
      const gint32 *ta, *tb;
      gsize na, nb;

      g_assert_no_error (error);
      b = amk_generator_generate (gen_stepped, prompt, 3, NULL, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (a, ==, b);
      ta = amk_generator_get_tokens (gen_chunked, &na);
      tb = amk_generator_get_tokens (gen_stepped, &nb);
      g_assert_cmpmem (ta, na * sizeof (gint32), tb, nb * sizeof (gint32));
      g_assert_cmpuint (amk_generator_get_position (gen_chunked), ==,
                        amk_generator_get_position (gen_stepped));
    }
  /* the prompts went through the chunk, or through the decode step only */
  g_assert_cmpuint (n_chunked, >=, 2 * ((n_got - 1 + chunk - 1) / chunk));
  g_assert_cmpuint (n_stepped, ==, 0);
}

static void
test_tiny_llama (void)
{
  g_autofree char *dir = test_data_dir ("tiny-llama");

  check_prefill (dir, "The capital of France is", 5);
}

static void
test_tiny_qwen3 (void)
{
  g_autofree char *dir = test_data_dir ("tiny-qwen3");

  check_prefill (dir, "The capital of France is", 5);
}

static void
test_smollm2 (void)
{
  const char *path = test_gguf_path ();

  if (path == NULL)
    {
      g_test_skip ("set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)");
      return;
    }
  check_prefill (path, GGUF_PROMPT, 4);
}

static void
upload_i32 (AmkExecutor *ex, gint buffer, const gint32 *values, guint n)
{
  g_autoptr(GBytes) bytes = g_bytes_new (values, n * sizeof (gint32));
  g_autoptr(GError) error = NULL;

  g_assert_true (amk_executor_upload (ex, (guint) buffer, bytes, &error));
  g_assert_no_error (error);
}

static void
run_step (AmkExecutor *ex, const AmkModelBuild *build, gint32 token, gint32 position)
{
  g_autoptr(GError) error = NULL;

  upload_i32 (ex, build->tokens, &token, 1);
  upload_i32 (ex, build->pos, &position, 1);
  g_assert_true (amk_executor_run (ex, NULL, &error));
  g_assert_no_error (error);
}

static float *
download_logits (AmkExecutor *ex, const AmkModelBuild *build)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) bytes = amk_executor_download (ex, (guint) build->logits, &error);

  g_assert_no_error (error);
  return g_memdup2 (g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes));
}

/* The chunk as a GPU builds it, with its MATMULs' inputs in bf16 (RMSNORM into a bf16
 * buffer, SILU_MUL's output in bf16: amk_executor_get_activation_dtype()), run here on
 * the CPU executor: the last prompt token's logits against token by token. The bf16
 * activations add their rounding to the tolerance. */
static void
check_bf16_activations (const char *path, const char *prompt, guint chunk)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModelSpec) spec = amk_model_read_spec (path, &error);
  g_autoptr(AmkModelBuild) build = NULL;
  g_autoptr(AmkExecutor) decode = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
  g_autoptr(AmkExecutor) prefill = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
  g_autoptr(AmkExecutor) stepped = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
  g_autofree gint32 *ids = NULL;
  g_autofree gint32 *rows = g_new0 (gint32, chunk);
  g_autofree gint32 *pos = g_new0 (gint32, chunk);
  g_autofree float *got = NULL;
  g_autofree float *want = NULL;
  gsize n = 0;
  double err;

  g_assert_no_error (error);
  build = amk_model_build_graph (spec, 1, 64, &error);
  g_assert_no_error (error);
  g_assert_true (amk_model_build_prefill (build, chunk, AMK_DTYPE_BF16, FALSE, &error));
  g_assert_no_error (error);
  g_assert_cmpint (amk_program_find_buffer (build->prefill->program, "prefill.xn"), >=, 0);
  ids = amk_tokenizer_encode (build->tokenizer, prompt, TRUE, &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n - 1, >, chunk);

  g_assert_true (amk_executor_load (decode, build->program, &error));
  g_assert_true (amk_executor_load_shared (prefill, build->prefill->program, decode, &error));
  g_assert_true (amk_executor_load (stepped, build->program, &error));
  g_assert_no_error (error);
  for (guint c = 0; c + 1 < n; c += chunk)
    {
      for (guint r = 0; r < chunk; r++)
        {
          rows[r] = c + r + 1 < n ? ids[c + r] : 0;
          pos[r] = c + r + 1 < n ? (gint32) (c + r) : -1;
        }
      upload_i32 (prefill, build->prefill->tokens, rows, chunk);
      upload_i32 (prefill, build->prefill->pos, pos, chunk);
      g_assert_true (amk_executor_run (prefill, NULL, &error));
      g_assert_no_error (error);
    }
  run_step (decode, build, ids[n - 1], (gint32) n - 1);
  for (guint i = 0; i < n; i++)
    run_step (stepped, build, ids[i], (gint32) i);
  got = download_logits (decode, build);
  want = download_logits (stepped, build);
  err = test_rel_error (got, want, build->vocab_size);
  g_test_message ("%s: %zu prompt tokens, chunks of %u with bf16 activations: logits differ by %.2e",
                  path, n, chunk, err);
  g_assert_cmpfloat (err, <=, 2e-2);
}

static void
test_bf16_activations (void)
{
  g_autofree char *llama = test_data_dir ("tiny-llama");
  g_autofree char *qwen3 = test_data_dir ("tiny-qwen3");

  check_bf16_activations (llama, "The capital of France is", 4);
  check_bf16_activations (qwen3, "The capital of France is", 4);
}

/* The chunk: by default the preferred rows of the executor the model is loaded for (the
 * CPU executor's here: no GPU in a test of the CPU path), never more than the context. */
static void
test_chunk_default (void)
{
  g_autofree char *dir = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = g_object_new (AMK_TYPE_MODEL, "path", dir, "context-length", 300, NULL);
  g_autoptr(AmkCpuExecutor) cpu = amk_cpu_executor_new_empty ();
  g_autoptr(AmkGenerator) gen = NULL;
  g_autoptr(AmkModel) small = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_cmpuint (amk_model_get_prefill_chunk (model), ==, 0);
  gen = amk_generator_new (model, AMK_EXECUTOR (cpu));
  g_assert_true (amk_generator_prefill (gen, "Hi", NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (amk_model_get_prefill_chunk (model), ==,
                    amk_executor_get_preferred_rows (AMK_EXECUTOR (cpu)));

  small = test_load_model_chunked (dir, 0, 16, 0);
  g_assert_cmpuint (amk_model_get_prefill_chunk (small), ==, 16);
}

typedef struct {
  GCancellable *cancellable;
  GArray       *fed;
  guint         total;
} Progress;

static void
on_progress (AmkGenerator *gen, guint fed, guint total, gpointer user_data)
{
  Progress *p = user_data;

  g_array_append_val (p->fed, fed);
  p->total = total;
  if (p->cancellable != NULL)
    g_cancellable_cancel (p->cancellable);
}

/* ::prefill-progress after each chunk; cancelling there stops the prefill before the
 * next chunk and leaves the generator as it was, ready for the next call. */
static void
test_cancel (void)
{
  g_autofree char *dir = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = test_load_model_chunked (dir, 0, 64, 4);
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) want = NULL;
  g_autofree char *text = NULL;
  Progress p = { cancellable, g_array_new (FALSE, FALSE, sizeof (guint)), 0 };
  const gint32 *ids;
  gsize n_ids;
  guint n_prompt = 0, position;

  g_free (test_generate (model, NULL, "The capital of France is", 4, &want, &n_prompt, &error));
  g_assert_no_error (error);
  g_signal_connect (gen, "prefill-progress", G_CALLBACK (on_progress), &p);

  text = amk_generator_generate (gen, "The capital of France is", 4, cancellable, &error);
  g_assert_null (text);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  g_assert_cmpuint (p.fed->len, ==, 1);
  g_assert_cmpuint (g_array_index (p.fed, guint, 0), ==, 4);
  g_assert_cmpuint (p.total, ==, n_prompt);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 0);

  /* the next call runs every chunk: 4, 8, ... up to all prompt tokens (the CPU
   * executor's chunk has a head: the last token's logits come from it) */
  p.cancellable = NULL;
  g_array_set_size (p.fed, 0);
  text = amk_generator_generate (gen, "The capital of France is", 4, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (p.fed->len, ==, (n_prompt + 3) / 4);
  g_assert_cmpuint (g_array_index (p.fed, guint, p.fed->len - 1), ==, n_prompt);
  ids = amk_generator_get_tokens (gen, &n_ids);
  g_assert_cmpmem (ids, n_ids * sizeof (gint32), want->data, want->len * sizeof (gint32));
  position = amk_generator_get_position (gen);
  g_assert_cmpuint (position, ==, n_prompt + n_ids - 1);
  g_array_unref (p.fed);
}

/* A prompt longer than the context fails before anything runs. */
static void
test_too_long (void)
{
  g_autofree char *dir = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = test_load_model_chunked (dir, 0, 16, 4);
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  Progress p = { NULL, g_array_new (FALSE, FALSE, sizeof (guint)), 0 };

  g_signal_connect (gen, "prefill-progress", G_CALLBACK (on_progress), &p);
  text = amk_generator_generate (gen, "The capital of France is the city of Paris, on the Seine",
                                 2, NULL, &error);
  g_assert_null (text);
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_CONTEXT_FULL);
  g_assert_nonnull (strstr (error->message, "16"));
  g_assert_cmpuint (p.fed->len, ==, 0);
  g_assert_cmpuint (amk_generator_get_position (gen), ==, 0);
  g_clear_error (&error);

  /* a shorter one still runs */
  text = amk_generator_generate (gen, "The capital", 2, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (text);
  g_array_unref (p.fed);
}

/* The speeds and the time to the first token of a call. */
static void
test_timing (void)
{
  g_autofree char *dir = test_data_dir ("tiny-qwen3");
  g_autoptr(AmkModel) model = test_load_model_chunked (dir, 0, 64, 4);
  g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  gdouble first = -1, prefill_rate;
  gint64 start, usec;
  guint n_prompt;

  g_assert_cmpfloat (amk_generator_get_time_to_first_token (gen), ==, 0.0);
  /* loading happens here, outside the timed call */
  g_assert_true (amk_generator_prefill (gen, "Hello", NULL, &error));
  g_assert_no_error (error);
  amk_generator_reset (gen);
  start = g_get_monotonic_time ();
  text = amk_generator_generate (gen, "The capital of France is", 4, NULL, &error);
  usec = g_get_monotonic_time () - start;
  g_assert_no_error (error);
  g_object_get (gen, "time-to-first-token", &first, NULL);
  g_assert_cmpfloat (first, ==, amk_generator_get_time_to_first_token (gen));
  g_assert_cmpfloat (first, >, 0.0);
  g_assert_cmpfloat (first, <=, usec / 1e6);
  n_prompt = amk_generator_get_prompt_tokens (gen);
  prefill_rate = amk_generator_get_prefill_tokens_per_second (gen);
  g_assert_cmpfloat (prefill_rate, >, 0.0);
  /* the prefill comes before the first token */
  g_assert_cmpfloat (n_prompt / prefill_rate, <=, first + 1e-6);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/prefill/tiny-llama", test_tiny_llama);
  g_test_add_func ("/amk/prefill/tiny-qwen3", test_tiny_qwen3);
  g_test_add_func ("/amk/prefill/smollm2", test_smollm2);
  g_test_add_func ("/amk/prefill/bf16-activations", test_bf16_activations);
  g_test_add_func ("/amk/prefill/chunk-default", test_chunk_default);
  g_test_add_func ("/amk/prefill/cancel", test_cancel);
  g_test_add_func ("/amk/prefill/error/too-long", test_too_long);
  g_test_add_func ("/amk/prefill/timing", test_timing);
  return g_test_run ();
}

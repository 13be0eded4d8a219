/* test-batch.c: AmkBatch on the CPU executor: each sequence's greedy tokens equal those
 * AmkGenerator gives the same prompt alone, with the prompts fed through the batch's
 * prefill chunk or through its step, with sequences joining and leaving between steps,
 * a sequence cancelled; the argmax of each row (amk_program_op_argmax_rows()); every
 * AmkBatchError code. On tests/data/tiny-llama and tiny-qwen3 always, on SmolLM2
 * (AMK_TEST_GGUF) when given.
 *
 * The batch's MATMULs and the generator's MATVECs both compute in fp32 on the CPU and
 * differ only in the order of their sums: the greedy tokens agree unless two logits tie
 * within that rounding, which these prompts do not come near.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include "amk-test-generate.h"

static const char *const PROMPTS[] = {
  "The capital of France is",
  "Once upon a time there was a little robot who wanted to see the sea, so",
  "1, 2, 3,",
};
static const guint MAX_TOKENS[] = { 8, 12, 5 };

/* The greedy tokens of `prompt` alone, from an AmkGenerator on a model of its own. */
static GArray *
alone (const char *path,
       const char *prompt,
       guint       max_tokens)
{
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 0);
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  GArray *ids = NULL;

  text = test_generate (model, NULL, prompt, max_tokens, &ids, NULL, &error);
  g_assert_no_error (error);
  return ids;
}

static GArray *
batch_tokens (AmkBatch *batch, guint id)
{
  g_autoptr(GError) error = NULL;
  GArray *ids = amk_batch_get_tokens (batch, id, &error);

  g_assert_no_error (error);
  return ids;
}

/* Sequence `id` of the batch got exactly the tokens `prompt` gets alone. */
static void
assert_as_alone (AmkBatch *batch, guint id, const char *path, const char *prompt, guint max_tokens)
{
  g_autoptr(GArray) got = batch_tokens (batch, id);
  g_autoptr(GArray) want = alone (path, prompt, max_tokens);

  test_assert_ids_equal (got, want);
}

static guint
batch_tokens_len (AmkBatch *batch, guint id)
{
  g_autoptr(GArray) ids = batch_tokens (batch, id);

  return ids->len;
}

/* What the ::token and ::finished handlers saw. */
typedef struct {
  GString *text[16];
  guint    n_tokens[16];
  guint    n_finished;
} Seen;

static void
on_token (AmkBatch *batch, guint id, gint token, const char *piece, Seen *seen)
{
  g_assert_cmpuint (id, <, G_N_ELEMENTS (seen->text));
  if (seen->text[id] == NULL)
    seen->text[id] = g_string_new (NULL);
  g_string_append (seen->text[id], piece);
  seen->n_tokens[id]++;
}

static void
on_finished (AmkBatch *batch, guint id, AmkFinishReason reason, Seen *seen)
{
  g_assert_cmpint (reason, !=, AMK_FINISH_REASON_NONE);
  seen->n_finished++;
}

static void
seen_clear (Seen *seen)
{
  for (guint i = 0; i < G_N_ELEMENTS (seen->text); i++)
    if (seen->text[i] != NULL)
      g_string_free (seen->text[i], TRUE);
}

/* The three prompts in one batch of `capacity`, the model loaded with a prefill chunk
 * of `chunk` rows (1: the prompts go through the batch step): per sequence, the tokens
 * of the prompt alone, the streamed text is the text, and the reason is LENGTH or STOP. */
static void
check_batch (const char *path,
             guint       capacity,
             guint       chunk)
{
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, chunk);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, capacity);
  g_autoptr(GError) error = NULL;
  Seen seen = { 0 };
  guint ids[G_N_ELEMENTS (PROMPTS)];

  g_signal_connect (batch, "token", G_CALLBACK (on_token), &seen);
  g_signal_connect (batch, "finished", G_CALLBACK (on_finished), &seen);
  for (guint i = 0; i < G_N_ELEMENTS (PROMPTS); i++)
    {
      ids[i] = amk_batch_add (batch, PROMPTS[i], MAX_TOKENS[i], &error);
      g_assert_no_error (error);
      g_assert_cmpuint (ids[i], >, 0);
    }
  g_assert_cmpuint (amk_batch_get_n_active (batch), ==, G_N_ELEMENTS (PROMPTS));
  g_assert_true (amk_batch_run (batch, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (amk_batch_get_n_active (batch), ==, 0);
  g_assert_cmpuint (seen.n_finished, ==, G_N_ELEMENTS (PROMPTS));

  for (guint i = 0; i < G_N_ELEMENTS (PROMPTS); i++)
    {
      g_autoptr(GArray) got = batch_tokens (batch, ids[i]);
      g_autoptr(GArray) want = alone (path, PROMPTS[i], MAX_TOKENS[i]);
      g_autofree char *text = amk_batch_get_text (batch, ids[i], &error);
      AmkFinishReason reason = amk_batch_get_finish_reason (batch, ids[i], &error);

      g_assert_no_error (error);
      g_test_message ("%s, chunk %u, sequence %u: %u tokens “%s”", path, chunk, ids[i], got->len, text);
      test_assert_ids_equal (got, want);
      g_assert_cmpuint (seen.n_tokens[ids[i]], ==, got->len);
      g_assert_true (reason == AMK_FINISH_REASON_LENGTH || reason == AMK_FINISH_REASON_STOP);
      /* the streamed pieces are the text, but for bytes of a character that an
       * end-of-sequence token cut (U+FFFD in the text) */
      if (reason == AMK_FINISH_REASON_LENGTH)
        {
          g_assert_cmpuint (got->len, ==, MAX_TOKENS[i]);
          g_assert_cmpstr (seen.text[ids[i]]->str, ==, text);
        }
      else
        g_assert_true (g_str_has_prefix (text, seen.text[ids[i]] != NULL ? seen.text[ids[i]]->str : ""));
    }
  seen_clear (&seen);
}

static void
test_tiny_llama (void)
{
  g_autofree char *path = test_data_dir ("tiny-llama");

  check_batch (path, 4, 4);
  check_batch (path, 3, 1);
}

static void
test_tiny_qwen3 (void)
{
  g_autofree char *path = test_data_dir ("tiny-qwen3");

  check_batch (path, 4, 5);
  check_batch (path, 3, 1);
}

static void
test_smollm2 (void)
{
  const char *path = test_gguf_path ();

  if (path == NULL)
    {
      g_test_skip ("Set AMK_TEST_GGUF to a SmolLM2 GGUF file (amk fetch-model)");
      return;
    }
  check_batch (path, 4, 0);
}

/* Capacity 2 for three prompts: the third joins, from the ::finished handler, when the
 * first slot frees; each sequence still gets the tokens it gets alone. */
typedef struct {
  const char *prompt;
  guint       id;
} Joiner;

static void
join_on_finished (AmkBatch *batch, guint id, AmkFinishReason reason, Joiner *joiner)
{
  g_autoptr(GError) error = NULL;

  if (joiner->id != 0)
    return;
  joiner->id = amk_batch_add (batch, joiner->prompt, MAX_TOKENS[2], &error);
  g_assert_no_error (error);
}

static void
test_continuous (void)
{
  g_autofree char *path = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 4);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 2);
  g_autoptr(GError) error = NULL;
  Joiner joiner = { PROMPTS[2], 0 };
  guint first, second;

  first = amk_batch_add (batch, PROMPTS[0], 3, &error);
  second = amk_batch_add (batch, PROMPTS[1], MAX_TOKENS[1], &error);
  g_assert_no_error (error);
  g_assert_cmpuint (amk_batch_add (batch, PROMPTS[2], 1, &error), ==, 0);
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_FULL);
  g_clear_error (&error);

  g_signal_connect (batch, "finished", G_CALLBACK (join_on_finished), &joiner);
  g_assert_true (amk_batch_run (batch, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (joiner.id, >, second);
  /* the second ran all along: the joiner took the first's slot while it ran */
  g_assert_cmpuint (amk_batch_get_steps (batch), <, 3 + MAX_TOKENS[1] + MAX_TOKENS[2]);

  assert_as_alone (batch, first, path, PROMPTS[0], 3);
  assert_as_alone (batch, second, path, PROMPTS[1], MAX_TOKENS[1]);
  assert_as_alone (batch, joiner.id, path, PROMPTS[2], MAX_TOKENS[2]);
}

/* A long prompt joins while a sequence runs: it is read a chunk per step, and the
 * running sequence gets a token in each of those steps. */
static void
test_joining_prompt (void)
{
  g_autofree char *path = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 4);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 2);
  g_autoptr(GError) error = NULL;
  guint running, joining;

  running = amk_batch_add (batch, PROMPTS[2], 20, &error);
  g_assert_no_error (error);
  while (batch_tokens_len (batch, running) == 0)
    g_assert_true (amk_batch_step (batch, NULL, &error));
  joining = amk_batch_add (batch, PROMPTS[1], 3, &error);
  g_assert_no_error (error);
  /* the joining prompt has tens of tokens: chunks of 4 take several steps */
  for (guint s = 0; s < 4; s++)
    {
      const guint before = batch_tokens_len (batch, running);

      g_assert_true (amk_batch_step (batch, NULL, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (batch_tokens_len (batch, running), ==, before + 1);
      g_assert_cmpuint (batch_tokens_len (batch, joining), ==, 0);
    }
  g_assert_true (amk_batch_run (batch, NULL, &error));
  g_assert_no_error (error);
  assert_as_alone (batch, running, path, PROMPTS[2], 20);
  assert_as_alone (batch, joining, path, PROMPTS[1], 3);
}

/* Cancelling one sequence midway: it keeps its tokens so far, the others go on exactly
 * as without the cancel. */
static void
test_cancel (void)
{
  g_autofree char *path = test_data_dir ("tiny-qwen3");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 4);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 4);
  g_autoptr(GError) error = NULL;
  /* the others long enough to outlast the cancel */
  const guint n[G_N_ELEMENTS (PROMPTS)] = { 24, MAX_TOKENS[1], 24 };
  guint ids[G_N_ELEMENTS (PROMPTS)];

  for (guint i = 0; i < G_N_ELEMENTS (PROMPTS); i++)
    ids[i] = amk_batch_add (batch, PROMPTS[i], n[i], &error);
  g_assert_no_error (error);
  /* until the second has 3 tokens (its prompt takes several steps first) */
  while (batch_tokens_len (batch, ids[1]) < 3)
    {
      g_assert_true (amk_batch_step (batch, NULL, &error));
      g_assert_no_error (error);
    }
  g_assert_true (amk_batch_cancel (batch, ids[1], &error));
  g_assert_no_error (error);
  g_assert_cmpint (amk_batch_get_finish_reason (batch, ids[1], &error), ==, AMK_FINISH_REASON_CANCELLED);
  g_assert_cmpuint (amk_batch_get_n_active (batch), ==, 2);
  /* again: nothing changes */
  g_assert_true (amk_batch_cancel (batch, ids[1], &error));
  g_assert_true (amk_batch_run (batch, NULL, &error));
  g_assert_no_error (error);

  for (guint i = 0; i < G_N_ELEMENTS (PROMPTS); i++)
    {
      g_autoptr(GArray) got = batch_tokens (batch, ids[i]);
      g_autoptr(GArray) want = alone (path, PROMPTS[i], n[i]);

      if (i == 1)
        {
          g_assert_cmpuint (got->len, ==, 3);
          g_array_set_size (want, 3);
        }
      test_assert_ids_equal (got, want);
    }
  g_assert_true (amk_batch_remove (batch, ids[1], &error));
  g_assert_no_error (error);
  g_assert_null (amk_batch_get_text (batch, ids[1], &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_UNKNOWN_SEQUENCE);
}

/* A context of 48 positions: a sequence ends when it fills it, a prompt longer than it
 * is refused before anything runs. */
static void
test_context (void)
{
  g_autofree char *path = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 48, 4);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 2);
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) got = NULL;
  g_autoptr(AmkTokenizer) tokenizer = NULL;
  g_autofree gint32 *prompt = NULL;
  gsize n_prompt = 0;
  guint id;

  id = amk_batch_add (batch, PROMPTS[1], 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (amk_batch_add (batch, "one two three four five six seven eight nine ten "
                                          "eleven twelve thirteen fourteen fifteen sixteen", 4, &error), ==, 0);
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_CONTEXT_FULL);
  g_clear_error (&error);
  g_assert_true (amk_batch_run (batch, NULL, &error));
  g_assert_no_error (error);

  tokenizer = g_object_ref (amk_model_get_tokenizer (model));
  prompt = amk_tokenizer_encode (tokenizer, PROMPTS[1], TRUE, &n_prompt, &error);
  g_assert_no_error (error);
  got = batch_tokens (batch, id);
  g_assert_cmpint (amk_batch_get_finish_reason (batch, id, &error), ==, AMK_FINISH_REASON_CONTEXT);
  g_assert_cmpuint (n_prompt, <, 48);
  g_assert_cmpuint (n_prompt + got->len, ==, 48 + 1);
}

/* Row r of a [4, 300] matrix, bf16 and f32, holds its maximum where the test put it,
 * with ties (the lowest index wins) and a NaN (it loses). */
static void
test_argmax_rows (void)
{
  for (guint d = 0; d < 2; d++)
    {
      const AmkDType dtype = d == 0 ? AMK_DTYPE_F32 : AMK_DTYPE_BF16;
      const guint rows = 4, n = 300;
      const guint want[4] = { 0, 299, 17, 150 };
      g_autoptr(AmkProgram) p = amk_program_new (3);
      g_autoptr(AmkExecutor) ex = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
      g_autoptr(GError) error = NULL;
      g_autoptr(GBytes) out = NULL;
      g_autofree float *x = g_new (float, rows * n);
      g_autofree guint16 *xb = g_new (guint16, rows * n);
      g_autoptr(GBytes) data = NULL;
      gint64 shape[2] = { rows, n };
      const gint32 *got;
      gint logits, tokens;

      for (guint i = 0; i < rows * n; i++)
        x[i] = (float) ((i * 37) % 101) / 10.0f - 5.0f;
      for (guint r = 0; r < rows; r++)
        x[r * n + want[r]] = 9.0f + r;
      x[2 * n + 40] = 11.0f;          /* a tie after row 2's maximum */
      x[3 * n + 10] = NAN;            /* NaN loses */
      for (guint i = 0; i < rows * n; i++)
        {
          guint32 bits;

          memcpy (&bits, &x[i], 4);
          xb[i] = (guint16) (bits >> 16);
        }
      data = dtype == AMK_DTYPE_F32 ? g_bytes_new (x, rows * n * 4) : g_bytes_new (xb, rows * n * 2);
      logits = amk_program_add_buffer (p, "logits", dtype, shape, 2, AMK_BUFFER_ROLE_INPUT, &error);
      tokens = amk_program_add_buffer (p, "tokens", AMK_DTYPE_I32, shape, 1, AMK_BUFFER_ROLE_OUTPUT, &error);
      g_assert_no_error (error);
      g_assert_cmpint (amk_program_op_argmax_rows (p, tokens, logits, &error), >=, 0);
      g_assert_true (amk_program_compile (p, &error));
      g_assert_true (amk_executor_load (ex, p, &error));
      g_assert_true (amk_executor_upload (ex, (guint) logits, data, &error));
      g_assert_true (amk_executor_run (ex, NULL, &error));
      out = amk_executor_download (ex, (guint) tokens, &error);
      g_assert_no_error (error);
      got = g_bytes_get_data (out, NULL);
      for (guint r = 0; r < rows; r++)
        g_assert_cmpint (got[r], ==, r == 2 ? 17 : (gint) want[r]);
    }
}

static void
test_argmax_rows_errors (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  g_autoptr(GError) error = NULL;
  gint64 shape2[2] = { 4, 8 }, shape1[1] = { 32 }, small[1] = { 3 };
  gint m = amk_program_add_buffer (p, "m", AMK_DTYPE_F32, shape2, 2, AMK_BUFFER_ROLE_INPUT, NULL);
  gint v = amk_program_add_buffer (p, "v", AMK_DTYPE_F32, shape1, 1, AMK_BUFFER_ROLE_INPUT, NULL);
  gint out = amk_program_add_buffer (p, "out", AMK_DTYPE_I32, small, 1, AMK_BUFFER_ROLE_OUTPUT, NULL);

  /* a vector is not rows */
  g_assert_cmpint (amk_program_op_argmax_rows (p, out, v, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  /* 4 rows, 3 outputs */
  g_assert_cmpint (amk_program_op_argmax_rows (p, out, m, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
}

/* Unknown ids, an empty prompt, and an executor that ran another program. */
static void
test_errors (void)
{
  g_autofree char *path = test_data_dir ("tiny-llama");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 4);
  g_autoptr(AmkExecutor) executor = AMK_EXECUTOR (amk_cpu_executor_new_empty ());
  g_autoptr(AmkBatch) batch = amk_batch_new (model, executor, 2);
  g_autoptr(AmkProgram) other = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  guint id;

  g_assert_cmpuint (amk_batch_add (batch, "", 4, &error), ==, 0);
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_EMPTY_PROMPT);
  g_clear_error (&error);
  {
    /* made without a model, as a binding can */
    g_autoptr(AmkBatch) bare = g_object_new (AMK_TYPE_BATCH, NULL);

    g_assert_cmpuint (amk_batch_add (bare, PROMPTS[0], 4, &error), ==, 0);
    g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_NO_MODEL);
    g_clear_error (&error);
  }
  g_assert_false (amk_batch_cancel (batch, 7, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_UNKNOWN_SEQUENCE);
  g_clear_error (&error);
  g_assert_false (amk_batch_remove (batch, 7, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_UNKNOWN_SEQUENCE);
  g_clear_error (&error);
  g_assert_null (amk_batch_get_tokens (batch, 7, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_UNKNOWN_SEQUENCE);
  g_clear_error (&error);
  g_assert_cmpint (amk_batch_get_finish_reason (batch, 7, &error), ==, AMK_FINISH_REASON_NONE);
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_UNKNOWN_SEQUENCE);
  g_clear_error (&error);
  /* with nothing running, a step does nothing */
  g_assert_true (amk_batch_step (batch, NULL, &error));
  g_assert_cmpuint (amk_batch_get_steps (batch), ==, 0);

  id = amk_batch_add (batch, PROMPTS[0], 4, &error);
  g_assert_no_error (error);
  while (batch_tokens_len (batch, id) == 0)
    {
      g_assert_true (amk_batch_step (batch, NULL, &error));
      g_assert_no_error (error);
    }
  g_assert_true (amk_program_compile (other, &error));
  g_assert_true (amk_executor_load (executor, other, &error));
  g_assert_false (amk_batch_step (batch, NULL, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_EXECUTOR_TAKEN);
  g_clear_error (&error);
  /* what the sequence had is still there */
  {
    g_autoptr(GArray) got = batch_tokens (batch, id);

    g_assert_cmpuint (got->len, ==, 1);
  }
}

static void
test_cancelled_step (void)
{
  g_autofree char *path = test_data_dir ("tiny-qwen3");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 4);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 2);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(GError) error = NULL;
  guint id;

  id = amk_batch_add (batch, PROMPTS[1], 4, &error);
  g_assert_no_error (error);
  g_cancellable_cancel (cancellable);
  g_assert_false (amk_batch_step (batch, cancellable, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  /* nothing was lost: the run goes on as if the cancelled step never was */
  g_assert_true (amk_batch_run (batch, NULL, &error));
  g_assert_no_error (error);
  assert_as_alone (batch, id, path, PROMPTS[1], 4);
}

/* Steps in a worker thread: the signals come in the main loop before each callback, and
 * every other call meanwhile is BUSY; the tokens are those of the synchronous steps. */
typedef struct {
  GMainLoop *loop;
  AmkBatch  *batch;
  guint      tokens_seen, tokens_at_callback, busy_errors, calls;
  gboolean   done;
} AsyncRun;

static void
async_on_token (AmkBatch *batch, guint id, gint token, const char *piece, AsyncRun *run)
{
  run->tokens_seen++;
}

static void
second_step_done (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncRun *run = data;
  g_autoptr(GError) error = NULL;

  g_assert_false (amk_batch_step_finish (AMK_BATCH (source), result, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_BUSY);
  run->busy_errors++;
}

static void start_step (AsyncRun *run);

static void
step_done (GObject *source, GAsyncResult *result, gpointer data)
{
  AsyncRun *run = data;
  g_autoptr(GError) error = NULL;

  g_assert_true (amk_batch_step_finish (AMK_BATCH (source), result, &error));
  g_assert_no_error (error);
  run->tokens_at_callback = run->tokens_seen;
  if (amk_batch_get_n_active (run->batch) == 0)
    g_main_loop_quit (run->loop);
  else
    start_step (run);
}

static void
start_step (AsyncRun *run)
{
  g_autoptr(GError) error = NULL;

  amk_batch_step_async (run->batch, NULL, step_done, run);
  run->calls++;
  /* while it runs */
  g_assert_cmpuint (amk_batch_add (run->batch, PROMPTS[0], 2, &error), ==, 0);
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_BUSY);
  g_clear_error (&error);
  g_assert_false (amk_batch_step (run->batch, NULL, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_BUSY);
  g_clear_error (&error);
  g_assert_null (amk_batch_get_text (run->batch, 1, &error));
  g_assert_error (error, AMK_BATCH_ERROR, AMK_BATCH_ERROR_BUSY);
  amk_batch_step_async (run->batch, NULL, second_step_done, run);
}

static void
test_async (void)
{
  g_autofree char *path = test_data_dir ("tiny-qwen3");
  g_autoptr(AmkModel) model = test_load_model_chunked (path, 0, 0, 4);
  g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 4);
  g_autoptr(GMainLoop) loop = g_main_loop_new (NULL, FALSE);
  g_autoptr(GError) error = NULL;
  AsyncRun run = { loop, batch, 0, 0, 0, 0, FALSE };
  guint ids[G_N_ELEMENTS (PROMPTS)], total = 0;

  for (guint i = 0; i < G_N_ELEMENTS (PROMPTS); i++)
    ids[i] = amk_batch_add (batch, PROMPTS[i], MAX_TOKENS[i], &error);
  g_assert_no_error (error);
  g_signal_connect (batch, "token", G_CALLBACK (async_on_token), &run);
  start_step (&run);
  g_main_loop_run (loop);

  for (guint i = 0; i < G_N_ELEMENTS (PROMPTS); i++)
    {
      g_autoptr(GArray) got = batch_tokens (batch, ids[i]);
      g_autoptr(GArray) want = alone (path, PROMPTS[i], MAX_TOKENS[i]);

      test_assert_ids_equal (got, want);
      total += got->len;
    }
  g_assert_cmpuint (run.tokens_seen, ==, total);
  g_assert_cmpuint (run.tokens_at_callback, ==, total);
  g_assert_cmpuint (run.busy_errors, ==, run.calls);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/batch/tiny-llama", test_tiny_llama);
  g_test_add_func ("/amk/batch/tiny-qwen3", test_tiny_qwen3);
  g_test_add_func ("/amk/batch/smollm2", test_smollm2);
  g_test_add_func ("/amk/batch/continuous", test_continuous);
  g_test_add_func ("/amk/batch/joining-prompt", test_joining_prompt);
  g_test_add_func ("/amk/batch/cancel", test_cancel);
  g_test_add_func ("/amk/batch/async", test_async);
  g_test_add_func ("/amk/batch/context", test_context);
  g_test_add_func ("/amk/batch/argmax-rows", test_argmax_rows);
  g_test_add_func ("/amk/batch/error/argmax-rows", test_argmax_rows_errors);
  g_test_add_func ("/amk/batch/error/codes", test_errors);
  g_test_add_func ("/amk/batch/error/cancelled-step", test_cancelled_step);

  return g_test_run ();
}

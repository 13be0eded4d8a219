/* test-gguf-convert.c: a Hugging Face checkpoint's parts in llama.cpp's GGUF conventions
 * (amk-gguf-convert.c), read back with the library's own readers: the tokenizer arrays
 * of three tokenizer.json files make GGUF tokenizers that encode the test corpus as
 * tokenizer.json does; llama's q/k row order is the one amk_model_unpermute_qk() undoes;
 * the Llama 3 RoPE table divides the frequencies as the scaling does.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include <glib/gstdio.h>
#include "amk-dtype-private.h"
#include "amk-gguf-convert-private.h"
#include "amk-gguf-private.h"
#include "amk-gguf-writer-private.h"
#include "amk-model-spec-private.h"

/* The tokenizer.ggml.* keys written for `json` (a file of tests/data), read back as the
 * GGUF model reader reads them: every line of the corpus encodes to the same ids. */
static void
check_tokenizer (const char *json, const char *expected_pre)
{
  g_autofree char *path = g_test_build_filename (G_TEST_DIST, "data", json, NULL);
  g_autofree char *corpus_path = g_test_build_filename (G_TEST_DIST, "data", "tokenizer-corpus.txt", NULL);
  g_autofree char *dir = NULL, *out = NULL, *corpus = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkTokenizer) reference = NULL;
  g_autoptr(AmkTokenizer) back = NULL;
  g_autoptr(AmkGgufWriter) w = amk_gguf_writer_new ();
  g_autoptr(AmkGguf) g = NULL;
  g_autofree gint32 *types = NULL;
  g_auto(GStrv) lines = NULL;
  const char * const *tokens, * const *merges;
  const char *pre = NULL, *model = NULL;
  gsize n_tokens = 0, n_merges = 0, n_types = 0;
  gboolean add_bos = FALSE;
  guint32 bos = 0, eos = 0;

  reference = amk_tokenizer_new_from_json_file (path, &error);
  g_assert_no_error (error);
  amk_tokenizer_set_bos_id (reference, 1);
  amk_tokenizer_set_eos_id (reference, 2);
  g_assert_true (amk_gguf_convert_tokenizer (w, reference, json, &error));
  g_assert_no_error (error);
  dir = g_dir_make_tmp ("amk-gguf-convert-XXXXXX", &error);
  g_assert_no_error (error);
  out = g_build_filename (dir, "tok.gguf", NULL);
  g_assert_true (amk_gguf_writer_begin (w, out, &error) && amk_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
  g = amk_gguf_open (out, &error);
  g_assert_no_error (error);

  g_assert_true (amk_gguf_get_string (g, "tokenizer.ggml.model", &model, NULL, NULL));
  g_assert_cmpstr (model, ==, "gpt2");
  g_assert_true (amk_gguf_get_string (g, "tokenizer.ggml.pre", &pre, NULL, NULL));
  g_assert_cmpstr (pre, ==, expected_pre);
  tokens = amk_gguf_get_string_array (g, "tokenizer.ggml.tokens", &n_tokens, &error);
  merges = amk_gguf_get_string_array (g, "tokenizer.ggml.merges", &n_merges, &error);
  types = amk_gguf_get_i32_array (g, "tokenizer.ggml.token_type", &n_types, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n_tokens, ==, amk_tokenizer_get_vocab_size (reference));
  g_assert_cmpuint (n_types, ==, n_tokens);
  g_assert_true (amk_gguf_get_u32 (g, "tokenizer.ggml.bos_token_id", &bos, NULL));
  g_assert_true (amk_gguf_get_u32 (g, "tokenizer.ggml.eos_token_id", &eos, NULL));
  g_assert_cmpuint (bos, ==, 1);
  g_assert_cmpuint (eos, ==, 2);
  g_assert_true (amk_gguf_get_bool (g, "tokenizer.ggml.add_bos_token", &add_bos, NULL));

  back = amk_tokenizer_new_from_vocab (tokens, merges, types, n_types, pre, &error);
  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (corpus_path, &corpus, NULL, &error));
  lines = g_strsplit (corpus, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_autofree gint32 *a = NULL, *b = NULL;
      gsize n_a = 0, n_b = 0;

      a = amk_tokenizer_encode (reference, lines[i], FALSE, &n_a, &error);
      g_assert_no_error (error);
      b = amk_tokenizer_encode (back, lines[i], FALSE, &n_b, &error);
      g_assert_no_error (error);
      g_assert_cmpmem (a, n_a * sizeof (gint32), b, n_b * sizeof (gint32));
    }
  g_unlink (out);
  g_rmdir (dir);
}

static void
test_tokenizer_smollm2 (void)
{
  check_tokenizer ("smollm2-tokenizer.json", "smollm");
}

static void
test_tokenizer_llama3 (void)
{
  check_tokenizer ("tiny-llama/tokenizer.json", "llama-bpe");
}

static void
test_tokenizer_qwen2 (void)
{
  check_tokenizer ("tiny-qwen3/tokenizer.json", "qwen2");
}

/* Permuted, then unpermuted by the reader's function: the rows come back. */
static void
test_permute (void)
{
  const gsize n_heads = 3, head_dim = 8, n_rows = n_heads * head_dim, n_cols = 5;
  g_autofree float *rows = g_new (float, n_rows * n_cols);
  g_autofree guint16 *bf16 = g_new (guint16, n_rows * n_cols);
  g_autoptr(GError) error = NULL;

  for (gsize i = 0; i < n_rows * n_cols; i++)
    rows[i] = (float) i;
  g_assert_true (amk_gguf_convert_permute_qk (rows, n_rows, n_cols, n_heads, &error));
  g_assert_no_error (error);
  /* row 1 of the first head is Hugging Face's row head_dim / 2 (its second half's first) */
  g_assert_cmpfloat (rows[1 * n_cols], ==, (float) (head_dim / 2 * n_cols));
  for (gsize i = 0; i < n_rows * n_cols; i++)
    bf16[i] = amk_float_to_bf16 (rows[i]);
  g_assert_true (amk_model_unpermute_qk (bf16, n_rows, n_cols, n_heads, &error));
  for (gsize i = 0; i < n_rows * n_cols; i++)
    g_assert_cmpfloat (amk_bf16_to_float (bf16[i]), ==, (float) i);

  g_assert_false (amk_gguf_convert_permute_qk (rows, 9, n_cols, 3, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE);
}

/* Llama 3.1's scaling: the high frequencies undivided, the low ones divided by the
 * factor, the keys set; plain RoPE: no table. Other frequency factors are refused. */
static void
test_rope_freqs (void)
{
  g_autoptr(AmkGgufWriter) w = amk_gguf_writer_new ();
  g_autoptr(GError) error = NULL;
  g_autofree float *table = NULL;
  AmkModelParams hp = { 0 };
  gsize n = 0;

  hp.architecture = "llama";
  hp.source = "test";
  hp.head_dim = 64;
  hp.rope_theta = 500000.0f;
  g_assert_null (amk_gguf_convert_rope_freqs (w, &hp, &n, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 0);

  hp.rope_factor = 8.0f;
  hp.rope_low_freq_factor = 1.0f;
  hp.rope_high_freq_factor = 4.0f;
  hp.rope_original_context = 8192;
  table = amk_gguf_convert_rope_freqs (w, &hp, &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 32);
  g_assert_cmpfloat_with_epsilon (table[0], 1.0, 1e-6);
  g_assert_cmpfloat_with_epsilon (table[31], 8.0, 1e-5);
  g_assert_true (amk_gguf_writer_has_key (w, "llama.rope.scaling.factor"));
  g_assert_true (amk_gguf_writer_has_key (w, "llama.rope.scaling.original_context_length"));

  g_clear_pointer (&table, g_free);
  hp.rope_high_freq_factor = 2.0f;
  g_assert_null (amk_gguf_convert_rope_freqs (w, &hp, &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/gguf-convert/tokenizer/smollm2", test_tokenizer_smollm2);
  g_test_add_func ("/amk/gguf-convert/tokenizer/llama3", test_tokenizer_llama3);
  g_test_add_func ("/amk/gguf-convert/tokenizer/qwen2", test_tokenizer_qwen2);
  g_test_add_func ("/amk/gguf-convert/permute", test_permute);
  g_test_add_func ("/amk/gguf-convert/rope-freqs", test_rope_freqs);
  return g_test_run ();
}

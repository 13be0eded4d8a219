/* test-model-errors.c: the model builder (amk_model_build_from_gguf) and generation on
 * bad input: a tiny llama GGUF written here (8 wide, one layer, 10 tokens), then copies
 * of it that are truncated, corrupt, lack a key or a tensor, hold a tensor of the wrong
 * shape or type, name another architecture, or lie in their counts. Each must fail with
 * a GError that names the file and the key, tensor or field at fault; none may crash.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include <glib/gstdio.h>
#include "amk-gguf-private.h"
#include "amk-model-loader-private.h"
#include "amk-model-readers-private.h"
#include "amk-test-generate.h"

/* ---- a tiny GGUF v3 writer ------------------------------------------------------------ */

static void w_bytes (GByteArray *b, const void *p, gsize n) { g_byte_array_append (b, p, n); }
static void w_u32 (GByteArray *b, guint32 v) { v = GUINT32_TO_LE (v); w_bytes (b, &v, 4); }
static void w_u64 (GByteArray *b, guint64 v) { v = GUINT64_TO_LE (v); w_bytes (b, &v, 8); }
static void w_f32 (GByteArray *b, float f) { guint32 u; memcpy (&u, &f, 4); w_u32 (b, u); }
static void w_str (GByteArray *b, const char *s) { w_u64 (b, strlen (s)); w_bytes (b, s, strlen (s)); }

enum { T_U32 = 4, T_F32 = 6, T_BOOL = 7, T_STRING = 8, T_ARRAY = 9 };

#define HIDDEN 8
#define HEADS 2
#define KV_HEADS 1
#define KV_DIM (HIDDEN / HEADS * KV_HEADS)
#define FFN 16
#define VOCAB 10

/* ids: a 0, b 1, c 2, Ġ 3, ab 4, abc 5, Ġab 6, <s> 7, </s> 8, Ċ 9 */
static const char *tokens[VOCAB] = { "a", "b", "c", "\xc4\xa0", "ab", "abc", "\xc4\xa0" "ab",
                                     "<s>", "</s>", "\xc4\x8a" };
static const char *merges[] = { "a b", "ab c", "\xc4\xa0 ab" };

/* What a test changes in the tiny model; zero / NULL fields keep the valid file. */
typedef struct {
  const char *arch;            /* general.architecture */
  const char *skip_key;        /* a metadata key left out */
  const char *string_key;      /* a u32 key written as a string */
  guint32     block_count;     /* the metadata's values (the tensors stay as they are) */
  guint32     hidden;
  guint32     heads;
  guint32     ffn;
  const char *skip_tensor;     /* a tensor left out */
  const char *short_tensor;    /* a tensor one column short */
  const char *i32_tensor;      /* a tensor of type I32 (no bf16 conversion) */
  guint       embd_rows;       /* rows of token_embd.weight (default VOCAB) */
  gboolean    loud_padding;    /* 2 * VOCAB padding rows, +-10 times the token rows */
  gboolean    add_bos;
  guint32     bos_id;
  guint32     eos_id;
  guint64     offset_shift;    /* added to the last tensor's data offset */
  gboolean    bad_merge;       /* a merge of unknown tokens */
  const float *rope_freqs;     /* a rope_freqs.weight table of n_rope_freqs values */
  guint       n_rope_freqs;
  guint32     rope_context;    /* llama.rope.scaling.original_context_length (0: none) */
  const char *rope_type;       /* llama.rope.scaling.type (NULL: none) */
} Mod;

typedef struct {
  char    name[48];
  guint64 cols, rows;          /* rows 0: a vector */
} Tensor;

static guint
tensor_list (const Mod *m, Tensor *t)
{
  guint n = 0;
  const struct { const char *name; guint64 cols, rows; } layer[] = {
    { "attn_norm", HIDDEN, 0 }, { "attn_q", HIDDEN, HIDDEN }, { "attn_k", HIDDEN, KV_DIM },
    { "attn_v", HIDDEN, KV_DIM }, { "attn_output", HIDDEN, HIDDEN }, { "ffn_norm", HIDDEN, 0 },
    { "ffn_gate", HIDDEN, FFN }, { "ffn_up", HIDDEN, FFN }, { "ffn_down", FFN, HIDDEN },
  };

  g_snprintf (t[n].name, sizeof t[n].name, "token_embd.weight");
  t[n].cols = HIDDEN;
  t[n++].rows = m->loud_padding ? 3 * VOCAB : m->embd_rows != 0 ? m->embd_rows : VOCAB;
  for (guint i = 0; i < G_N_ELEMENTS (layer); i++)
    {
      g_snprintf (t[n].name, sizeof t[n].name, "blk.0.%s.weight", layer[i].name);
      t[n].cols = layer[i].cols;
      t[n++].rows = layer[i].rows;
    }
  g_snprintf (t[n].name, sizeof t[n].name, "output_norm.weight");
  t[n].cols = HIDDEN;
  t[n++].rows = 0;
  if (m->n_rope_freqs > 0)
    {
      g_snprintf (t[n].name, sizeof t[n].name, "rope_freqs.weight");
      t[n].cols = m->n_rope_freqs;
      t[n++].rows = 0;
    }
  return n;
}

static void
kv_u32 (GByteArray *b, guint *n, const Mod *m, const char *key, guint32 value)
{
  if (g_strcmp0 (m->skip_key, key) == 0)
    return;
  w_str (b, key);
  if (g_strcmp0 (m->string_key, key) == 0)
    {
      w_u32 (b, T_STRING);
      w_str (b, "eight");
    }
  else
    {
      w_u32 (b, T_U32);
      w_u32 (b, value);
    }
  (*n)++;
}

static void
kv_strings (GByteArray *b, guint *n, const Mod *m, const char *key, const char **v, guint count)
{
  if (g_strcmp0 (m->skip_key, key) == 0)
    return;
  w_str (b, key);
  w_u32 (b, T_ARRAY);
  w_u32 (b, T_STRING);
  w_u64 (b, count);
  for (guint i = 0; i < count; i++)
    w_str (b, v[i]);
  (*n)++;
}

/* The file's bytes; `sections` (nullable) gets the offsets where the metadata, the
 * tensor infos and the data start. */
static GBytes *
make_model (const Mod *m, gsize sections[3])
{
  GByteArray *meta = g_byte_array_new ();
  GByteArray *b = g_byte_array_new ();
  Tensor t[16];
  guint n_t = tensor_list (m, t), n_written = 0, n_kv = 0;
  guint64 offset = 0;
  const char *bad_merges[] = { "a b", "a zz" };
  GRand *rand = g_rand_new_with_seed (42);
  float embd[VOCAB * HIDDEN];

  /* metadata */
  if (g_strcmp0 (m->skip_key, "general.architecture") != 0)
    {
      w_str (meta, "general.architecture");
      w_u32 (meta, T_STRING);
      w_str (meta, m->arch != NULL ? m->arch : "llama");
      n_kv++;
    }
  kv_u32 (meta, &n_kv, m, "llama.block_count", m->block_count != 0 ? m->block_count : 1);
  kv_u32 (meta, &n_kv, m, "llama.embedding_length", m->hidden != 0 ? m->hidden : HIDDEN);
  kv_u32 (meta, &n_kv, m, "llama.attention.head_count", m->heads != 0 ? m->heads : HEADS);
  kv_u32 (meta, &n_kv, m, "llama.attention.head_count_kv", KV_HEADS);
  kv_u32 (meta, &n_kv, m, "llama.feed_forward_length", m->ffn != 0 ? m->ffn : FFN);
  w_str (meta, "llama.rope.freq_base"); w_u32 (meta, T_F32); w_f32 (meta, 10000.0f); n_kv++;
  w_str (meta, "llama.attention.layer_norm_rms_epsilon"); w_u32 (meta, T_F32);
  w_f32 (meta, 1e-5f); n_kv++;
  if (m->rope_context != 0)
    kv_u32 (meta, &n_kv, m, "llama.rope.scaling.original_context_length", m->rope_context);
  if (m->rope_type != NULL)
    {
      w_str (meta, "llama.rope.scaling.type"); w_u32 (meta, T_STRING); w_str (meta, m->rope_type);
      n_kv++;
    }
  kv_strings (meta, &n_kv, m, "tokenizer.ggml.tokens", tokens, VOCAB);
  if (m->bad_merge)
    kv_strings (meta, &n_kv, m, "tokenizer.ggml.merges", bad_merges, G_N_ELEMENTS (bad_merges));
  else
    kv_strings (meta, &n_kv, m, "tokenizer.ggml.merges", merges, G_N_ELEMENTS (merges));
  kv_u32 (meta, &n_kv, m, "tokenizer.ggml.bos_token_id", m->bos_id != 0 ? m->bos_id : 7);
  kv_u32 (meta, &n_kv, m, "tokenizer.ggml.eos_token_id", m->eos_id != 0 ? m->eos_id : 8);
  w_str (meta, "tokenizer.ggml.add_bos_token"); w_u32 (meta, T_BOOL);
  w_bytes (meta, (guint8[]) { m->add_bos ? 1 : 0 }, 1); n_kv++;

  for (guint i = 0; i < n_t; i++)
    n_written += g_strcmp0 (m->skip_tensor, t[i].name) != 0;

  w_bytes (b, "GGUF", 4);
  w_u32 (b, 3);
  w_u64 (b, n_written);
  w_u64 (b, n_kv);
  if (sections != NULL)
    sections[0] = b->len;
  w_bytes (b, meta->data, meta->len);
  g_byte_array_unref (meta);
  if (sections != NULL)
    sections[1] = b->len;

  /* tensor infos: F32, data consecutive and 32-aligned */
  for (guint i = 0; i < n_t; i++)
    {
      guint64 cols = t[i].cols - (g_strcmp0 (m->short_tensor, t[i].name) == 0 ? 1 : 0);
      gboolean i32 = g_strcmp0 (m->i32_tensor, t[i].name) == 0;
      guint64 elements = cols * MAX (t[i].rows, 1);

      if (g_strcmp0 (m->skip_tensor, t[i].name) == 0)
        continue;
      w_str (b, t[i].name);
      w_u32 (b, t[i].rows > 0 ? 2 : 1);
      w_u64 (b, cols);
      if (t[i].rows > 0)
        w_u64 (b, t[i].rows);
      w_u32 (b, i32 ? AMK_GGML_TYPE_I32 : AMK_GGML_TYPE_F32);
      w_u64 (b, offset + (i + 1 == n_t ? m->offset_shift : 0));
      offset += (elements * 4 + 31) / 32 * 32;
    }
  while (b->len % 32 != 0)
    w_bytes (b, "", 1);
  if (sections != NULL)
    sections[2] = b->len;

  /* data: small random weights, norms near one */
  for (guint i = 0; i < n_t; i++)
    {
      guint64 cols = t[i].cols - (g_strcmp0 (m->short_tensor, t[i].name) == 0 ? 1 : 0);
      guint64 elements = cols * MAX (t[i].rows, 1);

      if (g_strcmp0 (m->skip_tensor, t[i].name) == 0)
        continue;
      for (guint64 e = 0; e < elements; e++)
        if (g_str_equal (t[i].name, "rope_freqs.weight"))
          w_f32 (b, m->rope_freqs[e]);
        else if (m->loud_padding && i == 0 && e >= VOCAB * HIDDEN)
          /* the tied embedding's padding rows, +10 and -10 times the token rows: one
           * of their logits is 10 times the largest magnitude of the tokens' logits */
          w_f32 (b, (e < 2 * VOCAB * HIDDEN ? 10.0f : -10.0f) * embd[e % (VOCAB * HIDDEN)]);
        else if (i == 0 && e < VOCAB * HIDDEN)
          w_f32 (b, embd[e] = (float) g_rand_double_range (rand, -0.5, 0.5));
        else
          w_f32 (b, t[i].rows == 0 ? 1.0f + (float) g_rand_double_range (rand, -0.1, 0.1)
                                    : (float) g_rand_double_range (rand, -0.5, 0.5));
      while (b->len % 32 != 0)
        w_bytes (b, "", 1);
    }
  g_rand_free (rand);
  return g_byte_array_free_to_bytes (b);
}

/* ---- helpers ---------------------------------------------------------------------------- */

typedef struct {
  char *dir;
  char *path;   /* dir/tiny-llama.gguf */
} Fixture;

static void
fixture_setup (Fixture *f, gconstpointer data)
{
  g_autoptr(GError) error = NULL;

  f->dir = g_dir_make_tmp ("amk-model-XXXXXX", &error);
  g_assert_no_error (error);
  f->path = g_build_filename (f->dir, "tiny-llama.gguf", NULL);
}

static void
fixture_teardown (Fixture *f, gconstpointer data)
{
  g_unlink (f->path);
  g_assert_no_errno (g_rmdir (f->dir));
  g_free (f->path);
  g_free (f->dir);
}

static void
write_file (Fixture *f, const void *data, gsize size)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (f->path, data, (gssize) size, &error));
  g_assert_no_error (error);
}

static void
write_model (Fixture *f, const Mod *m)
{
  g_autoptr(GBytes) bytes = make_model (m, NULL);

  write_file (f, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes));
}

static void
assert_has (const GError *error, const char *needle)
{
  if (needle != NULL && strstr (error->message, needle) == NULL)
    g_error ("“%s” does not name “%s”", error->message, needle);
}

/* The build fails with AMK_MODEL_ERROR `code`, naming the file and `needle`. */
static void
expect_build_error (Fixture *f, gint code, const char *needle, const char *needle2)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModelBuild) build = amk_model_build_from_path (f->path, 2, 16, &error);

  g_assert_null (build);
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  g_assert_error (error, AMK_MODEL_ERROR, code);
  assert_has (error, "tiny-llama.gguf");
  assert_has (error, needle);
  assert_has (error, needle2);
}

/* ---- tests -------------------------------------------------------------------------------- */

/* The unchanged tiny model builds and generates (the control for everything below). */
static void
test_valid (Fixture *f, gconstpointer data)
{
  const Mod m = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModelBuild) build = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(GArray) ids = NULL;
  g_autofree char *text = NULL;
  guint n_prompt = 0;

  write_model (f, &m);
  build = amk_model_build_from_path (f->path, 2, 16, &error);
  g_assert_no_error (error);
  g_assert_nonnull (build);
  g_assert_cmpuint (build->vocab_size, ==, VOCAB);
  g_assert_cmpuint (build->n_layers, ==, 1);
  g_assert_cmpuint (build->hidden, ==, HIDDEN);
  g_assert_cmpint (build->bos_id, ==, 7);
  g_assert_cmpint (build->eos_id, ==, 8);
  model = test_load_model (f->path, 2, 16);
  text = test_generate (model, NULL, "abc ab", 4, &ids, &n_prompt, &error);
  g_assert_no_error (error);
  g_assert_nonnull (text);
  g_assert_cmpuint (n_prompt, ==, 2);   /* abc, Ġab: the file says add no BOS */
  g_assert_cmpuint (ids->len, <=, 4);
  for (guint i = 0; i < ids->len; i++)
    {
      g_assert_cmpint (g_array_index (ids, gint32, i), >=, 0);
      g_assert_cmpint (g_array_index (ids, gint32, i), <, VOCAB);
    }
}

static gsize
find (const guint8 *p, gsize size, const char *needle)
{
  gsize n = strlen (needle);

  for (gsize i = 0; i + n <= size; i++)
    if (memcmp (p + i, needle, n) == 0)
      return i;
  g_assert_not_reached ();
  return 0;
}

/* Every prefix of the file fails; where it ends names what it cut. */
static void
test_truncated (Fixture *f, gconstpointer data)
{
  const Mod m = { 0 };
  gsize sections[3], size;
  g_autoptr(GBytes) bytes = make_model (&m, sections);
  const guint8 *p = g_bytes_get_data (bytes, &size);
  /* (the counts in the header must fit the bytes left, so the cuts inside the metadata
   * and the tensor infos are near their ends) */
  const struct { gsize at; const char *needle; } cases[] = {
    { 0, "magic" },
    { 10, "header" },
    { find (p, size, "tokenizer.ggml.eos_token_id") + 5, "metadata key #" },
    { find (p, size, "\xc4\xa0 ab") + 2, "“tokenizer.ggml.merges”" },
    { find (p, size, "output_norm.weight") + 3, "tensor info #" },
    { find (p, size, "output_norm.weight") + strlen ("output_norm.weight") + 6,
      "“output_norm.weight”" },
    { sections[2] - 1, "data section" },
    { sections[2] + 100, "token_embd.weight" },   /* inside the first tensor's data */
    { size - 4, "output_norm.weight" },            /* inside the last */
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_test_message ("cut at %zu of %zu", cases[i].at, size);
      write_file (f, p, cases[i].at);
      expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, cases[i].needle, NULL);
    }
  /* and every other length, a step of 7 bytes apart */
  for (gsize len = 0; len < size; len += 7)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkModelBuild) build = NULL;

      write_file (f, p, len);
      build = amk_model_build_from_path (f->path, 2, 16, &error);
      g_assert_null (build);
      g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT);
      assert_has (error, "tiny-llama.gguf");
    }
}

/* A copy of the valid file with bytes replaced at `at`. */
static void
write_patched (Fixture *f, gsize at, const void *value, gsize n)
{
  const Mod m = { 0 };
  g_autoptr(GBytes) bytes = make_model (&m, NULL);
  gsize size;
  g_autofree guint8 *copy = g_memdup2 (g_bytes_get_data (bytes, &size), g_bytes_get_size (bytes));

  g_assert_cmpuint (at + n, <=, size);
  memcpy (copy + at, value, n);
  write_file (f, copy, size);
}

static void
test_corrupt_header (Fixture *f, gconstpointer data)
{
  guint32 v1 = GUINT32_TO_LE (1), v4 = GUINT32_TO_LE (4);
  guint64 huge = GUINT64_TO_LE (G_MAXUINT64), big = GUINT64_TO_LE (G_GUINT64_CONSTANT (1) << 32);

  write_patched (f, 0, "GGML", 4);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "magic", NULL);
  write_patched (f, 4, &v1, 4);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_VERSION, "version 1", NULL);
  write_patched (f, 4, &v4, 4);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_VERSION, "version 4", NULL);
  write_patched (f, 8, &huge, 8);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "tensor count", NULL);
  write_patched (f, 8, &big, 8);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "tensor count", NULL);
  write_patched (f, 16, &huge, 8);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "metadata count", NULL);
  write_patched (f, 16, &big, 8);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "metadata count", NULL);
  /* the first key's length, and the length of its string value */
  write_patched (f, 24, &huge, 8);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "metadata key #0", NULL);
  write_patched (f, 24 + 8 + strlen ("general.architecture") + 4, &huge, 8);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "general.architecture", NULL);
}

static void
test_tensor_out_of_range (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };

  m.offset_shift = 1 << 20;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "output_norm.weight", "past the end");
  m.offset_shift = G_MAXUINT64 - 4095;   /* near 2^64, aligned, no wrap-around */
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "output_norm.weight", NULL);
  m.offset_shift = 4;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, "output_norm.weight", "aligned");
}

static void
test_unsupported_arch (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };

  m.arch = "gpt2";
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE, "“gpt2”", "llama");
  m.arch = "";
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE, "llama", NULL);
}

static void
test_missing_keys (Fixture *f, gconstpointer data)
{
  const char *required[] = {
    "general.architecture", "llama.block_count", "llama.embedding_length",
    "llama.attention.head_count", "llama.feed_forward_length", "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
  };

  for (guint i = 0; i < G_N_ELEMENTS (required); i++)
    {
      Mod m = { 0 };
      m.skip_key = required[i];
      write_model (f, &m);
      expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, required[i], NULL);
    }
}

static void
test_wrong_key_type (Fixture *f, gconstpointer data)
{
  const char *keys[] = { "llama.block_count", "llama.embedding_length",
                         "llama.attention.head_count_kv", "tokenizer.ggml.bos_token_id" };

  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    {
      Mod m = { 0 };
      m.string_key = keys[i];
      write_model (f, &m);
      expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, keys[i], "string");
    }
}

static void
test_missing_tensors (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };
  Tensor t[16];
  guint n = tensor_list (&m, t);

  for (guint i = 0; i < n; i++)
    {
      m.skip_tensor = t[i].name;
      write_model (f, &m);
      expect_build_error (f, AMK_MODEL_ERROR_MISSING_TENSOR, t[i].name, NULL);
    }
}

static void
test_wrong_shape (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };
  Tensor t[16];
  guint n = tensor_list (&m, t);

  for (guint i = 0; i < n; i++)
    {
      m.short_tensor = t[i].name;
      write_model (f, &m);
      expect_build_error (f, AMK_MODEL_ERROR_TENSOR_SHAPE, t[i].name, "shape");
    }
  /* more rows than tokens build (a padded embedding), fewer do not: a token without a
   * row would stop the EMBED op at run time */
  m.short_tensor = NULL;
  m.embd_rows = VOCAB + 6;
  write_model (f, &m);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(AmkModelBuild) build = amk_model_build_from_path (f->path, 2, 16, &error);

    g_assert_no_error (error);
    g_assert_cmpuint (build->vocab_size, ==, VOCAB + 6);
  }
  m.embd_rows = VOCAB - 3;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "token_embd.weight", "tokenizer.ggml.tokens");
}

static void
test_unsupported_type (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };

  m.i32_tensor = "blk.0.attn_v.weight";
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "blk.0.attn_v.weight", "I32");
  m.i32_tensor = "token_embd.weight";
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "token_embd.weight", "I32");
}

/* Counts in the metadata that the tensors do not back: refused before anything of the
 * claimed size is allocated. */
static void
test_huge_counts (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };

  m.block_count = G_MAXUINT32;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "4294967295 layers", NULL);

  m = (Mod) { 0 };
  m.hidden = 1u << 30;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "hidden size 1073741824", NULL);

  m = (Mod) { 0 };
  m.ffn = G_MAXUINT32;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "MLP size 4294967295", NULL);

  m = (Mod) { 0 };
  m.heads = 3;   /* 8 is not a multiple of 3 */
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "hyperparameters", NULL);

  m = (Mod) { 0 };
  m.heads = G_MAXUINT32;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "hyperparameters", NULL);
}

/* A broken vocabulary fails in the tokenizer and names the field and the token. */
static void
test_bad_tokenizer (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModelBuild) build = NULL;

  m.bad_merge = TRUE;
  write_model (f, &m);
  build = amk_model_build_from_path (f->path, 2, 16, &error);
  g_assert_null (build);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES);
  g_test_message ("%s", error->message);
  /* (the tokenizer names the merge and its source “GGUF”, not yet the file) */
  assert_has (error, "merges");
  assert_has (error, "“zz”");
}

/* A BOS or EOS id outside the vocabulary (once a critical in amk_tokenizer_set_bos_id,
 * and a BOS that EMBED would refuse). */
static void
test_bad_special_ids (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };

  m.add_bos = TRUE;
  m.bos_id = VOCAB;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "tokenizer.ggml.bos_token_id", "10");
  m.bos_id = G_MAXUINT32;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "tokenizer.ggml.bos_token_id", "4294967295");

  m = (Mod) { 0 };
  m.eos_id = 1000;
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "tokenizer.ggml.eos_token_id", "1000");
}

/* A rope_freqs.weight table (Llama 3.x RoPE scaling) that is broken, or matches no
 * scaling amk knows. The heads have 4 elements: 2 frequencies, both high enough that
 * Llama 3.1's scaling leaves them alone (divisors 1). */
static void
test_rope_freqs (Fixture *f, gconstpointer data)
{
  static const float ones[] = { 1.0f, 1.0f, 1.0f };
  static const float nan_value[] = { 1.0f, NAN };
  static const float negative[] = { 1.0f, -2.0f };
  static const float zero[] = { 0.0f, 1.0f };
  static const float other[] = { 1.0f, 2.0f };
  static const struct {
    const float *values;
    guint        n;
    gboolean     i32;
    gint         code;
    const char  *needle;
  } cases[] = {
    { ones, 3, FALSE, AMK_MODEL_ERROR_TENSOR_SHAPE, "3 values, not 2" },
    { ones, 2, TRUE, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "I32" },
    { nan_value, 2, FALSE, AMK_MODEL_ERROR_INVALID_METADATA, "index 1" },
    { negative, 2, FALSE, AMK_MODEL_ERROR_INVALID_METADATA, "-2 at index 1" },
    { zero, 2, FALSE, AMK_MODEL_ERROR_INVALID_METADATA, "0 at index 0" },
    { other, 2, FALSE, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "Llama 3" },
  };
  Mod m = { 0 };

  /* the control: Llama 3.1's table builds */
  m.rope_freqs = ones;
  m.n_rope_freqs = 2;
  write_model (f, &m);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(AmkModelBuild) build = amk_model_build_from_path (f->path, 2, 16, &error);

    g_assert_no_error (error);
    g_assert_nonnull (build);
  }

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      m.rope_freqs = cases[i].values;
      m.n_rope_freqs = cases[i].n;
      m.i32_tensor = cases[i].i32 ? "rope_freqs.weight" : NULL;
      write_model (f, &m);
      expect_build_error (f, cases[i].code, "rope_freqs.weight", cases[i].needle);
    }

  /* the scaling keys are read (and must have their type) where there is a table */
  m.rope_freqs = ones;
  m.n_rope_freqs = 2;
  m.i32_tensor = NULL;
  m.rope_context = 4096;
  m.string_key = "llama.rope.scaling.original_context_length";
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_INVALID_METADATA, "llama.rope.scaling.original_context_length",
                      "string");

  /* without a table: "none" builds, any other declared scaling is refused */
  m = (Mod) { 0 };
  m.rope_type = "none";
  write_model (f, &m);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(AmkModelBuild) build = amk_model_build_from_path (f->path, 2, 16, &error);

    g_assert_no_error (error);
    g_assert_nonnull (build);
  }
  m.rope_type = "yarn";
  write_model (f, &m);
  expect_build_error (f, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "llama.rope.scaling.type", "“yarn”");
}

/* An embedding padded beyond the tokenizer whose padding ids get the largest logits:
 * only the tokenizer's ids are produced, greedy (where the device's argmax picks a
 * padding id) and sampled alike. Once generation failed at the first such id
 * ("Token id 12 not in the vocabulary") and the text so far was lost. */
static void
test_padded_vocab (Fixture *f, gconstpointer data)
{
  Mod m = { 0 };
  g_autoptr(AmkModel) model = NULL;

  m.loud_padding = TRUE;
  write_model (f, &m);
  model = test_load_model (f->path, 2, 16);
  g_assert_cmpuint (amk_model_get_vocab_size (model), ==, 3 * VOCAB);
  for (guint sampled = 0; sampled < 2; sampled++)
    {
      g_autoptr(AmkGenerator) gen = amk_generator_new (model, NULL);
      g_autoptr(GError) error = NULL;
      g_autofree char *text = NULL;
      const gint32 *ids;
      gsize n_ids;

      if (sampled)
        g_object_set (gen, "temperature", 1.0, NULL);
      text = amk_generator_generate (gen, "abc ab", 6, NULL, &error);
      g_assert_no_error (error);
      g_assert_nonnull (text);
      ids = amk_generator_get_tokens (gen, &n_ids);
      g_assert_cmpuint (n_ids, >, 0);
      for (gsize i = 0; i < n_ids; i++)
        {
          g_assert_cmpint (ids[i], >=, 0);
          g_assert_cmpint (ids[i], <, VOCAB);
        }
      if (!sampled)
        {
          /* a batch: the same greedy tokens, none a padding id */
          g_autoptr(AmkBatch) batch = amk_batch_new (model, NULL, 2);
          g_autoptr(GArray) got = NULL;
          guint id = amk_batch_add (batch, "abc ab", 6, &error);

          g_assert_no_error (error);
          g_assert_true (amk_batch_run (batch, NULL, &error));
          g_assert_no_error (error);
          got = amk_batch_get_tokens (batch, id, &error);
          g_assert_no_error (error);
          g_assert_cmpmem (got->data, got->len * sizeof (gint32), ids, n_ids * sizeof (gint32));
        }
    }
}

/* Two threads loading one model at once: one builds it, the other waits and finds it
 * loaded. Without the lock both built it, and the later build replaced (and leaked) the
 * first, so the two saw different programs. */
typedef struct {
  AmkModel   *model;
  GMutex      lock;
  GCond       cond;
  guint       waiting;
  AmkProgram *seen[2];
} LoadRace;

static gpointer
load_in_thread (gpointer data)
{
  LoadRace *race = data;
  g_autoptr(GError) error = NULL;
  guint me;

  /* start both loads together */
  g_mutex_lock (&race->lock);
  me = race->waiting++;
  if (race->waiting == 2)
    g_cond_broadcast (&race->cond);
  while (race->waiting < 2)
    g_cond_wait (&race->cond, &race->lock);
  g_mutex_unlock (&race->lock);

  g_assert_true (g_initable_init (G_INITABLE (race->model), NULL, &error));
  g_assert_no_error (error);
  race->seen[me] = amk_model_get_program (race->model);
  return NULL;
}

static void
test_load_once (Fixture *f, gconstpointer data)
{
  const Mod m = { 0 };

  write_model (f, &m);
  for (guint round = 0; round < 4; round++)
    {
      g_autoptr(AmkModel) model = g_object_new (AMK_TYPE_MODEL, "path", f->path, "n-queues", 2,
                                                "context-length", 16, NULL);
      LoadRace race = { .model = model };
      GThread *threads[2];

      g_mutex_init (&race.lock);
      g_cond_init (&race.cond);
      for (guint t = 0; t < 2; t++)
        threads[t] = g_thread_new ("load", load_in_thread, &race);
      for (guint t = 0; t < 2; t++)
        g_thread_join (threads[t]);
      g_assert_nonnull (race.seen[0]);
      g_assert_true (race.seen[0] == race.seen[1]);
      g_assert_true (race.seen[0] == amk_model_get_program (model));
      g_mutex_clear (&race.lock);
      g_cond_clear (&race.cond);
    }
}

/* Prompts the generator refuses, and one whose continuation fills the context. */
static void
test_prompt_too_long (Fixture *f, gconstpointer data)
{
  const Mod m = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModel) model = NULL;
  g_autoptr(GString) prompt = g_string_new (NULL);
  g_autoptr(GArray) ids = NULL;
  g_autofree char *text = NULL;
  guint n_prompt = 99;

  write_model (f, &m);
  model = test_load_model (f->path, 2, 8);
  for (guint i = 0; i < 9; i++)
    g_string_append (prompt, "abc ");

  /* the prompt alone is longer than the context */
  g_assert_null (test_generate (model, NULL, prompt->str, 1, &ids, &n_prompt, &error));
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_CONTEXT_FULL);
  assert_has (error, "context of 8");
  g_test_message ("%s", error->message);
  g_assert_null (ids);
  g_assert_cmpuint (n_prompt, ==, 99);
  g_clear_error (&error);

  /* the prompt fits, the new tokens do not: generation stops when the context is full
   * (the last token is generated, not fed) */
  text = test_generate (model, NULL, "abc", 100, &ids, &n_prompt, &error);
  g_assert_no_error (error);
  g_assert_nonnull (text);
  g_assert_cmpuint (n_prompt, ==, 1);
  g_assert_cmpuint (ids->len, <=, 8);

  /* an empty prompt */
  g_assert_null (test_generate (model, NULL, "", 1, NULL, NULL, &error));
  g_assert_error (error, AMK_GENERATOR_ERROR, AMK_GENERATOR_ERROR_EMPTY_PROMPT);
  g_clear_error (&error);

  /* invalid UTF-8 */
  g_assert_null (test_generate (model, NULL, "ab\xff", 1, NULL, NULL, &error));
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_TEXT);
}

static void
test_not_a_file (Fixture *f, gconstpointer data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkModelSpec) spec = amk_gguf_model_read (f->dir, &error);

  /* a folder cannot be mapped: an I/O error, not a model one */
  g_assert_null (spec);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_IS_DIRECTORY);
  g_test_message ("%s", error->message);

  write_file (f, "", 0);
  expect_build_error (f, AMK_MODEL_ERROR_CORRUPT, NULL, NULL);
}

/* Each AmkModelError code as AmkModel reports it, the way a user loads a model. */
static void
test_codes (Fixture *f, gconstpointer data)
{
  static const float other[] = { 1.0f, 2.0f };
  guint32 v2 = GUINT32_TO_LE (2);
  struct {
    Mod   m;
    gint  code;
  } cases[] = {
    { { .arch = "gpt2" }, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE },
    { { .rope_type = "yarn" }, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE },
    { { .rope_freqs = other, .n_rope_freqs = 2 }, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE },
    { { .skip_key = "llama.block_count" }, AMK_MODEL_ERROR_INVALID_METADATA },
    { { .skip_tensor = "blk.0.ffn_up.weight" }, AMK_MODEL_ERROR_MISSING_TENSOR },
    { { .short_tensor = "blk.0.ffn_up.weight" }, AMK_MODEL_ERROR_TENSOR_SHAPE },
    { { .i32_tensor = "blk.0.ffn_up.weight" }, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkModel) model = NULL;

      write_model (f, &cases[i].m);
      model = amk_model_new_from_file (f->path, NULL, &error);
      g_assert_null (model);
      g_assert_error (error, AMK_MODEL_ERROR, cases[i].code);
      assert_has (error, "tiny-llama.gguf");
    }
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(AmkModel) model = NULL;

    write_patched (f, 4, &v2, 4);
    model = amk_model_new_from_file (f->path, NULL, &error);
    g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_VERSION);
    g_clear_error (&error);
    write_patched (f, 0, "GGML", 4);
    model = amk_model_new_from_file (f->path, NULL, &error);
    g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT);
  }
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C.UTF-8");
  g_test_init (&argc, &argv, NULL);
#define ADD(path, fn) g_test_add ("/amk/model/errors/" path, Fixture, NULL, fixture_setup, fn, fixture_teardown)
  ADD ("valid", test_valid);
  ADD ("truncated", test_truncated);
  ADD ("corrupt-header", test_corrupt_header);
  ADD ("tensor-out-of-range", test_tensor_out_of_range);
  ADD ("unsupported-arch", test_unsupported_arch);
  ADD ("missing-keys", test_missing_keys);
  ADD ("wrong-key-type", test_wrong_key_type);
  ADD ("missing-tensors", test_missing_tensors);
  ADD ("wrong-shape", test_wrong_shape);
  ADD ("unsupported-type", test_unsupported_type);
  ADD ("huge-counts", test_huge_counts);
  ADD ("bad-tokenizer", test_bad_tokenizer);
  ADD ("bad-special-ids", test_bad_special_ids);
  ADD ("rope-freqs", test_rope_freqs);
  ADD ("prompt-too-long", test_prompt_too_long);
  ADD ("not-a-file", test_not_a_file);
  ADD ("load-once", test_load_once);
  ADD ("padded-vocab", test_padded_vocab);
  ADD ("codes", test_codes);
#undef ADD
  return g_test_run ();
}

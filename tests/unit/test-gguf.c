/* test-gguf.c: the GGUF parser on files written by hand here (a tiny GGUF v3 writer),
 * with expected values computed independently of the library.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include <glib/gstdio.h>
#include "amk-gguf-private.h"

/* ---- a tiny GGUF writer ------------------------------------------------------------ */

static void w_bytes (GByteArray *b, const void *p, gsize n) { g_byte_array_append (b, p, n); }
static void w_u8 (GByteArray *b, guint8 v) { w_bytes (b, &v, 1); }
static void w_u16 (GByteArray *b, guint16 v) { v = GUINT16_TO_LE (v); w_bytes (b, &v, 2); }
static void w_u32 (GByteArray *b, guint32 v) { v = GUINT32_TO_LE (v); w_bytes (b, &v, 4); }
static void w_u64 (GByteArray *b, guint64 v) { v = GUINT64_TO_LE (v); w_bytes (b, &v, 8); }
static void w_f32 (GByteArray *b, float f) { guint32 u; memcpy (&u, &f, 4); w_u32 (b, u); }
static void w_f64 (GByteArray *b, double f) { guint64 u; memcpy (&u, &f, 8); w_u64 (b, u); }
static void w_str (GByteArray *b, const char *s) { w_u64 (b, strlen (s)); w_bytes (b, s, strlen (s)); }

static void
w_header (GByteArray *b, guint32 version, guint64 n_tensors, guint64 n_kv)
{
  w_bytes (b, "GGUF", 4);
  w_u32 (b, version);
  w_u64 (b, n_tensors);
  w_u64 (b, n_kv);
}

static void
w_pad (GByteArray *b, gsize alignment)
{
  while (b->len % alignment != 0)
    w_u8 (b, 0);
}

typedef struct {
  const char *name;
  guint32     type;
  guint       n_dims;
  guint64     dims[4];
  GBytes     *data;
} TT;

/* A file with `n` tensors (data consecutive, each aligned), after `n_kv` pairs written
 * by `kv` (may be NULL). */
static GBytes *
make_file (const TT *t, guint n, guint n_kv, void (*kv) (GByteArray *), gsize alignment)
{
  GByteArray *b = g_byte_array_new ();
  guint64 offset = 0;

  w_header (b, 3, n, n_kv);
  if (kv != NULL)
    kv (b);
  for (guint i = 0; i < n; i++)
    {
      w_str (b, t[i].name);
      w_u32 (b, t[i].n_dims);
      for (guint d = 0; d < t[i].n_dims; d++)
        w_u64 (b, t[i].dims[d]);
      w_u32 (b, t[i].type);
      w_u64 (b, offset);
      offset += g_bytes_get_size (t[i].data);
      offset = (offset + alignment - 1) / alignment * alignment;
    }
  w_pad (b, alignment);
  for (guint i = 0; i < n; i++)
    {
      w_bytes (b, g_bytes_get_data (t[i].data, NULL), g_bytes_get_size (t[i].data));
      if (i + 1 < n)
        w_pad (b, alignment);
    }
  return g_byte_array_free_to_bytes (b);
}

static AmkGguf *
open_bytes (GBytes *bytes, GError **error)
{
  return amk_gguf_open_bytes (bytes, "test.gguf", error);
}

static void
expect_error (GBytes *bytes, gint code, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = open_bytes (bytes, &error);

  g_assert_null (g);
  g_assert_error (error, AMK_MODEL_ERROR, code);
  test_assert_message_has (error, "test.gguf");
  if (needle != NULL)
    test_assert_message_has (error, needle);
}

/* ---- metadata ------------------------------------------------------------------------- */

static void
kv_all_types (GByteArray *b)
{
  w_str (b, "t.u8");  w_u32 (b, 0);  w_u8 (b, 200);
  w_str (b, "t.i8");  w_u32 (b, 1);  w_u8 (b, (guint8) -100);
  w_str (b, "t.u16"); w_u32 (b, 2);  w_u16 (b, 60000);
  w_str (b, "t.i16"); w_u32 (b, 3);  w_u16 (b, (guint16) -30000);
  w_str (b, "t.u32"); w_u32 (b, 4);  w_u32 (b, 4000000000u);
  w_str (b, "t.i32"); w_u32 (b, 5);  w_u32 (b, (guint32) -2000000000);
  w_str (b, "t.f32"); w_u32 (b, 6);  w_f32 (b, 1.5f);
  w_str (b, "t.bool"); w_u32 (b, 7); w_u8 (b, 1);
  w_str (b, "t.str"); w_u32 (b, 8);  w_str (b, "h\xc3\xa9llo");
  w_str (b, "t.u64"); w_u32 (b, 10); w_u64 (b, (G_GUINT64_CONSTANT (1) << 40) + 1);
  w_str (b, "t.i64"); w_u32 (b, 11); w_u64 (b, (guint64) -(G_GINT64_CONSTANT (1) << 40));
  w_str (b, "t.f64"); w_u32 (b, 12); w_f64 (b, 2.25);
  /* arrays */
  w_str (b, "a.u8");  w_u32 (b, 9); w_u32 (b, 0); w_u64 (b, 3); w_u8 (b, 1); w_u8 (b, 2); w_u8 (b, 255);
  w_str (b, "a.i16"); w_u32 (b, 9); w_u32 (b, 3); w_u64 (b, 2); w_u16 (b, (guint16) -5); w_u16 (b, 7);
  w_str (b, "a.i32"); w_u32 (b, 9); w_u32 (b, 5); w_u64 (b, 3);
  w_u32 (b, (guint32) -1); w_u32 (b, 0); w_u32 (b, 2147483647u);
  w_str (b, "a.u32big"); w_u32 (b, 9); w_u32 (b, 4); w_u64 (b, 1); w_u32 (b, 3000000000u);
  w_str (b, "a.i64"); w_u32 (b, 9); w_u32 (b, 11); w_u64 (b, 2); w_u64 (b, (guint64) -3); w_u64 (b, 4);
  w_str (b, "a.f32"); w_u32 (b, 9); w_u32 (b, 6); w_u64 (b, 2); w_f32 (b, -0.5f); w_f32 (b, 3.0f);
  w_str (b, "a.f64"); w_u32 (b, 9); w_u32 (b, 12); w_u64 (b, 1); w_f64 (b, 0.125);
  w_str (b, "a.bool"); w_u32 (b, 9); w_u32 (b, 7); w_u64 (b, 2); w_u8 (b, 0); w_u8 (b, 1);
  w_str (b, "a.str"); w_u32 (b, 9); w_u32 (b, 8); w_u64 (b, 3);
  w_str (b, "a"); w_str (b, "bc"); w_str (b, "");
  w_str (b, "a.empty"); w_u32 (b, 9); w_u32 (b, 5); w_u64 (b, 0);
}
#define N_KV_ALL_TYPES 22

static void
test_metadata_types (void)
{
  g_autoptr(GBytes) bytes = make_file (NULL, 0, N_KV_ALL_TYPES, kv_all_types, 32);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = open_bytes (bytes, &error);
  guint32 u32;
  guint64 u64;
  gint64 i64;
  float f;
  double d;
  gboolean bv;
  const char *s;
  gsize len, n;
  AmkGgufType type, element_type;

  g_assert_no_error (error);
  g_assert_nonnull (g);
  g_assert_cmpuint (amk_gguf_get_version (g), ==, 3);
  g_assert_cmpuint (amk_gguf_get_n_keys (g), ==, N_KV_ALL_TYPES);
  g_assert_cmpstr (amk_gguf_get_key (g, 0), ==, "t.u8");
  g_assert_cmpuint (amk_gguf_get_n_tensors (g), ==, 0);

  g_assert_true (amk_gguf_get_u32 (g, "t.u8", &u32, &error)); g_assert_cmpuint (u32, ==, 200);
  g_assert_true (amk_gguf_get_u32 (g, "t.u16", &u32, &error)); g_assert_cmpuint (u32, ==, 60000);
  g_assert_true (amk_gguf_get_u32 (g, "t.u32", &u32, &error)); g_assert_cmpuint (u32, ==, 4000000000u);
  g_assert_true (amk_gguf_get_u64 (g, "t.u64", &u64, &error));
  g_assert_cmpuint (u64, ==, (G_GUINT64_CONSTANT (1) << 40) + 1);
  g_assert_true (amk_gguf_get_i64 (g, "t.i8", &i64, &error)); g_assert_cmpint (i64, ==, -100);
  g_assert_true (amk_gguf_get_i64 (g, "t.i16", &i64, &error)); g_assert_cmpint (i64, ==, -30000);
  g_assert_true (amk_gguf_get_i64 (g, "t.i32", &i64, &error)); g_assert_cmpint (i64, ==, -2000000000);
  g_assert_true (amk_gguf_get_i64 (g, "t.i64", &i64, &error));
  g_assert_cmpint (i64, ==, -(G_GINT64_CONSTANT (1) << 40));
  g_assert_true (amk_gguf_get_i64 (g, "t.u32", &i64, &error)); g_assert_cmpint (i64, ==, 4000000000);
  g_assert_true (amk_gguf_get_f32 (g, "t.f32", &f, &error)); g_assert_cmpfloat (f, ==, 1.5f);
  g_assert_true (amk_gguf_get_f64 (g, "t.f64", &d, &error)); g_assert_cmpfloat (d, ==, 2.25);
  g_assert_true (amk_gguf_get_f32 (g, "t.f64", &f, &error)); g_assert_cmpfloat (f, ==, 2.25f);
  g_assert_true (amk_gguf_get_bool (g, "t.bool", &bv, &error)); g_assert_true (bv);
  g_assert_true (amk_gguf_get_string (g, "t.str", &s, &len, &error));
  g_assert_cmpstr (s, ==, "h\xc3\xa9llo");
  g_assert_cmpuint (len, ==, 6);
  g_assert_no_error (error);
  g_assert_true (amk_gguf_has_key (g, "t.str"));
  g_assert_false (amk_gguf_has_key (g, "t.nope"));

  g_assert_true (amk_gguf_get_key_type (g, "t.i16", &type, &element_type, &n, &error));
  g_assert_cmpint (type, ==, AMK_GGUF_TYPE_INT16);
  g_assert_cmpuint (n, ==, 1);
  g_assert_true (amk_gguf_get_key_type (g, "a.str", &type, &element_type, &n, &error));
  g_assert_cmpint (type, ==, AMK_GGUF_TYPE_ARRAY);
  g_assert_cmpint (element_type, ==, AMK_GGUF_TYPE_STRING);
  g_assert_cmpuint (n, ==, 3);
  g_assert_true (amk_gguf_get_key_type (g, "a.bool", &type, &element_type, &n, &error));
  g_assert_cmpint (element_type, ==, AMK_GGUF_TYPE_BOOL);
  g_assert_cmpuint (n, ==, 2);

  /* arrays */
  {
    const char * const *strv = amk_gguf_get_string_array (g, "a.str", &n, &error);
    g_autofree gint32 *a_u8 = amk_gguf_get_i32_array (g, "a.u8", &n, &error);
    g_autofree gint32 *a_i16 = NULL, *a_i32 = NULL, *a_i64 = NULL, *a_empty = NULL;
    g_autofree float *a_f32 = NULL, *a_f64 = NULL;

    g_assert_no_error (error);
    g_assert_nonnull (strv);
    g_assert_cmpstr (strv[0], ==, "a");
    g_assert_cmpstr (strv[1], ==, "bc");
    g_assert_cmpstr (strv[2], ==, "");
    g_assert_null (strv[3]);
    g_assert_cmpuint (n, ==, 3);
    g_assert_cmpint (a_u8[0], ==, 1); g_assert_cmpint (a_u8[2], ==, 255);
    a_i16 = amk_gguf_get_i32_array (g, "a.i16", &n, &error);
    g_assert_cmpuint (n, ==, 2); g_assert_cmpint (a_i16[0], ==, -5); g_assert_cmpint (a_i16[1], ==, 7);
    a_i32 = amk_gguf_get_i32_array (g, "a.i32", &n, &error);
    g_assert_cmpuint (n, ==, 3); g_assert_cmpint (a_i32[0], ==, -1); g_assert_cmpint (a_i32[2], ==, G_MAXINT32);
    a_i64 = amk_gguf_get_i32_array (g, "a.i64", &n, &error);
    g_assert_cmpint (a_i64[0], ==, -3); g_assert_cmpint (a_i64[1], ==, 4);
    a_f32 = amk_gguf_get_f32_array (g, "a.f32", &n, &error);
    g_assert_cmpuint (n, ==, 2); g_assert_cmpfloat (a_f32[0], ==, -0.5f); g_assert_cmpfloat (a_f32[1], ==, 3.0f);
    a_f64 = amk_gguf_get_f32_array (g, "a.f64", &n, &error);
    g_assert_cmpuint (n, ==, 1); g_assert_cmpfloat (a_f64[0], ==, 0.125f);
    a_empty = amk_gguf_get_i32_array (g, "a.empty", &n, &error);
    g_assert_nonnull (a_empty);
    g_assert_cmpuint (n, ==, 0);
    g_assert_no_error (error);
  }

  /* missing keys and wrong types name the key */
  g_assert_false (amk_gguf_get_u32 (g, "llama.block_count", &u32, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  test_assert_message_has (error, "llama.block_count");
  g_clear_error (&error);
  g_assert_false (amk_gguf_get_f32 (g, "t.u32", &f, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  test_assert_message_has (error, "t.u32");
  g_clear_error (&error);
  g_assert_false (amk_gguf_get_string (g, "t.bool", &s, NULL, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  test_assert_message_has (error, "t.bool");
  g_clear_error (&error);
  g_assert_false (amk_gguf_get_bool (g, "t.u8", &bv, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  g_clear_error (&error);
  g_assert_false (amk_gguf_get_u32 (g, "t.u64", &u32, &error));   /* out of range */
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  test_assert_message_has (error, "t.u64");
  g_clear_error (&error);
  g_assert_false (amk_gguf_get_u64 (g, "t.i8", &u64, &error));    /* negative */
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  g_clear_error (&error);
  g_assert_false (amk_gguf_get_u32 (g, "a.u8", &u32, &error));    /* an array */
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  test_assert_message_has (error, "array of uint8");
  g_clear_error (&error);
  g_assert_null (amk_gguf_get_string_array (g, "a.i32", &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  test_assert_message_has (error, "a.i32");
  g_clear_error (&error);
  g_assert_null (amk_gguf_get_i32_array (g, "a.u32big", &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  g_clear_error (&error);
  g_assert_null (amk_gguf_get_i32_array (g, "a.str", &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  g_clear_error (&error);
  g_assert_null (amk_gguf_get_f32_array (g, "a.i32", &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  g_clear_error (&error);
  g_assert_null (amk_gguf_get_i32_array (g, "t.i32", &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
  g_clear_error (&error);
  g_assert_null (amk_gguf_get_f32_array (g, "nope", &n, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA);
}

/* ---- tensor types --------------------------------------------------------------------- */

static guint16
rand_f16_finite (double range)
{
  return ref_f32_to_f16 (test_rand_float (range));
}

static GBytes *
f16_bytes (const guint16 *v, gsize n)
{
  GByteArray *b = g_byte_array_new ();
  for (gsize i = 0; i < n; i++)
    w_u16 (b, v[i]);
  return g_byte_array_free_to_bytes (b);
}

static void
check_tensor (const TT *tt, const guint16 *expected)
{
  g_autoptr(GBytes) bytes = make_file (tt, 1, 0, NULL, 32);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = open_bytes (bytes, &error);
  const AmkGgufTensor *t;
  g_autofree guint16 *out = NULL;

  g_assert_no_error (error);
  t = amk_gguf_find_tensor (g, tt->name);
  g_assert_nonnull (t);
  g_assert_true (amk_gguf_get_tensor (g, 0) == t);
  g_assert_null (amk_gguf_find_tensor (g, "nope"));
  g_assert_cmpstr (t->name, ==, tt->name);
  g_assert_cmpint (t->type, ==, tt->type);
  g_assert_cmpuint (t->n_dims, ==, tt->n_dims);
  g_assert_cmpuint (t->n_bytes, ==, g_bytes_get_size (tt->data));
  g_assert_cmpmem (t->data, t->n_bytes, g_bytes_get_data (tt->data, NULL), g_bytes_get_size (tt->data));
  out = g_new (guint16, t->n_elements);
  g_assert_true (amk_gguf_tensor_to_bf16 (t, out, &error));
  g_assert_no_error (error);
  for (gsize i = 0; i < t->n_elements; i++)
    if (out[i] != expected[i])
      g_error ("%s element %zu: 0x%04x, expected 0x%04x", tt->name, i, out[i], expected[i]);
}

static void
test_tensor_f32 (void)
{
  const gsize n = 64;
  GByteArray *b = g_byte_array_new ();
  g_autofree guint16 *expected = g_new (guint16, n);
  TT tt = { "w", AMK_GGML_TYPE_F32, 2, { 16, 4 }, NULL };

  for (gsize i = 0; i < n; i++)
    {
      /* include exact halfway cases for round-to-nearest-even */
      float f = i < 4 ? ldexpf (1.0f + ldexpf ((float) (2 * i + 1), -8), (int) i) : test_rand_float (100.0);
      w_f32 (b, f);
      expected[i] = ref_f32_to_bf16 (f);
    }
  tt.data = g_byte_array_free_to_bytes (b);
  check_tensor (&tt, expected);
  g_bytes_unref (tt.data);
}

static void
test_tensor_f16 (void)
{
  const gsize n = 32;
  guint16 h[32];
  g_autofree guint16 *expected = g_new (guint16, n);
  TT tt = { "w.f16", AMK_GGML_TYPE_F16, 1, { 32 }, NULL };

  for (gsize i = 0; i < n; i++)
    {
      h[i] = i == 0 ? 0x0001 /* subnormal */ : i == 1 ? 0xfbff /* -65504 */ : rand_f16_finite (4.0);
      expected[i] = ref_f32_to_bf16 (ref_f16_to_f32 (h[i]));
    }
  tt.data = f16_bytes (h, n);
  check_tensor (&tt, expected);
  g_bytes_unref (tt.data);
}

static void
test_tensor_bf16 (void)
{
  guint16 v[6] = { 0x3f80, 0xbf80, 0x0000, 0x7f7f, 0x4049, 0x0001 };
  TT tt = { "w.bf16", AMK_GGML_TYPE_BF16, 2, { 3, 2 }, NULL };

  tt.data = f16_bytes (v, 6);
  check_tensor (&tt, v);
  g_bytes_unref (tt.data);
}

static void
test_tensor_q8_0 (void)
{
  GByteArray *b = g_byte_array_new ();
  guint16 expected[64];
  TT tt = { "w.q8", AMK_GGML_TYPE_Q8_0, 2, { 32, 2 }, NULL };

  for (guint blk = 0; blk < 2; blk++)
    {
      guint16 d = rand_f16_finite (0.1);
      double dd = ref_f16_to_f32 (d);

      w_u16 (b, d);
      for (guint j = 0; j < 32; j++)
        {
          gint8 q = j == 0 ? -128 : j == 1 ? 127 : (gint8) g_test_rand_int_range (-128, 128);
          w_u8 (b, (guint8) q);
          expected[blk * 32 + j] = ref_f32_to_bf16 ((float) (q * dd));
        }
    }
  tt.data = g_byte_array_free_to_bytes (b);
  check_tensor (&tt, expected);
  g_bytes_unref (tt.data);
}

static void
test_tensor_q4_0 (void)
{
  GByteArray *b = g_byte_array_new ();
  guint16 expected[96];
  TT tt = { "w.q4_0", AMK_GGML_TYPE_Q4_0, 2, { 32, 3 }, NULL };

  for (guint blk = 0; blk < 3; blk++)
    {
      guint16 d = rand_f16_finite (2.0);
      double dd = ref_f16_to_f32 (d);
      guint8 q[32];

      w_u16 (b, d);
      for (guint j = 0; j < 32; j++)
        q[j] = (guint8) g_test_rand_int_range (0, 16);
      /* byte j: element j in the low nibble, element j + 16 in the high one */
      for (guint j = 0; j < 16; j++)
        w_u8 (b, (guint8) (q[j] | (q[j + 16] << 4)));
      for (guint j = 0; j < 32; j++)
        expected[blk * 32 + j] = ref_f32_to_bf16 ((float) (((int) q[j] - 8) * dd));
    }
  tt.data = g_byte_array_free_to_bytes (b);
  check_tensor (&tt, expected);
  g_bytes_unref (tt.data);
}

static void
test_tensor_q4_1 (void)
{
  GByteArray *b = g_byte_array_new ();
  guint16 expected[64];
  TT tt = { "w.q4_1", AMK_GGML_TYPE_Q4_1, 2, { 64, 1 }, NULL };

  for (guint blk = 0; blk < 2; blk++)
    {
      guint16 d = rand_f16_finite (0.5), m = rand_f16_finite (3.0);
      double dd = ref_f16_to_f32 (d), mm = ref_f16_to_f32 (m);
      guint8 q[32];

      w_u16 (b, d);
      w_u16 (b, m);
      for (guint j = 0; j < 32; j++)
        q[j] = (guint8) g_test_rand_int_range (0, 16);
      for (guint j = 0; j < 16; j++)
        w_u8 (b, (guint8) (q[j] | (q[j + 16] << 4)));
      /* q * d + m is exact in double; one rounding to float, as ggml's float math */
      for (guint j = 0; j < 32; j++)
        expected[blk * 32 + j] = ref_f32_to_bf16 ((float) (q[j] * dd + mm));
    }
  tt.data = g_byte_array_free_to_bytes (b);
  check_tensor (&tt, expected);
  g_bytes_unref (tt.data);
}

/* Every block-quantized type against the format's numpy reference (gguf-py), bit for
 * bit: tests/data/quants.gguf holds random blocks of each type ("q.TYPE") and the
 * reference's values of them in bf16 ("ref.TYPE"; tests/data/make-quant-fixtures.py). */
static void
test_tensor_quants_reference (void)
{
  static const char *types[] = {
    "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
  };
  g_autofree char *path = g_test_build_filename (G_TEST_DIST, "data", "quants.gguf", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = amk_gguf_open (path, &error);

  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    {
      g_autofree char *qname = g_strconcat ("q.", types[i], NULL);
      g_autofree char *rname = g_strconcat ("ref.", types[i], NULL);
      const AmkGgufTensor *q = amk_gguf_find_tensor (g, qname), *ref = amk_gguf_find_tensor (g, rname);
      g_autofree guint16 *got = NULL, *want = NULL;

      g_test_message ("%s", types[i]);
      g_assert_nonnull (q);
      g_assert_nonnull (ref);
      g_assert_cmpstr (amk_ggml_type_name (q->type), ==, types[i]);
      g_assert_cmpuint (q->n_elements, ==, ref->n_elements);
      got = g_new (guint16, q->n_elements);
      want = g_new (guint16, ref->n_elements);
      g_assert_true (amk_gguf_tensor_to_bf16 (q, got, &error));
      g_assert_no_error (error);
      g_assert_true (amk_gguf_tensor_to_bf16 (ref, want, &error));
      for (guint64 e = 0; e < q->n_elements; e++)
        if (got[e] != want[e])
          g_error ("%s element %" G_GUINT64_FORMAT ": 0x%04x, the reference 0x%04x", types[i], e, got[e], want[e]);
    }
}

/* A known-but-not-dequantized type loads, and converting it is an AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE. */
static void
test_tensor_unsupported (void)
{
  g_autoptr(GBytes) data = g_bytes_new_take (g_malloc0 (292), 292);
  TT tt = { "w.q8k", AMK_GGML_TYPE_Q8_K, 1, { 256 }, data };
  g_autoptr(GBytes) bytes = make_file (&tt, 1, 0, NULL, 32);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = open_bytes (bytes, &error);
  const AmkGgufTensor *t;
  guint16 out[256];

  g_assert_no_error (error);
  t = amk_gguf_find_tensor (g, "w.q8k");
  g_assert_nonnull (t);
  g_assert_cmpuint (t->n_bytes, ==, 292);
  g_assert_cmpstr (amk_ggml_type_name (t->type), ==, "Q8_K");
  g_assert_false (amk_gguf_tensor_to_bf16 (t, out, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE);
  test_assert_message_has (error, "w.q8k");
  test_assert_message_has (error, "Q8_K");
}

/* general.alignment moves the data; several tensors land at their own offsets. */
static void
kv_alignment_64 (GByteArray *b)
{
  w_str (b, "general.alignment"); w_u32 (b, 4); w_u32 (b, 64);
}

static void
test_alignment (void)
{
  guint16 a[3] = { 0x3f80, 0x4000, 0x4040 }, c[5] = { 1, 2, 3, 4, 5 };
  TT tt[2] = {
    { "a", AMK_GGML_TYPE_BF16, 1, { 3 }, f16_bytes (a, 3) },
    { "c", AMK_GGML_TYPE_BF16, 1, { 5 }, f16_bytes (c, 5) },
  };
  g_autoptr(GBytes) bytes = make_file (tt, 2, 1, kv_alignment_64, 64);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkGguf) g = open_bytes (bytes, &error);
  const guint8 *base = g_bytes_get_data (bytes, NULL);
  guint16 out[5];

  g_assert_no_error (error);
  g_assert_cmpuint (amk_gguf_get_alignment (g), ==, 64);
  g_assert_cmpuint (amk_gguf_find_tensor (g, "c")->offset, ==, 64);
  g_assert_cmpuint ((amk_gguf_find_tensor (g, "a")->data - base) % 64, ==, 0);
  g_assert_true (amk_gguf_tensor_to_bf16 (amk_gguf_find_tensor (g, "c"), out, &error));
  g_assert_cmpmem (out, sizeof c, c, sizeof c);
  g_assert_true (amk_gguf_tensor_to_bf16 (amk_gguf_find_tensor (g, "a"), out, &error));
  g_assert_cmpmem (out, sizeof a, a, sizeof a);
  g_bytes_unref (tt[0].data);
  g_bytes_unref (tt[1].data);
}

/* ---- corrupt files -------------------------------------------------------------------- */

static void
kv_small (GByteArray *b)
{
  w_str (b, "general.architecture"); w_u32 (b, 8); w_str (b, "llama");
  w_str (b, "llama.block_count"); w_u32 (b, 4); w_u32 (b, 2);
  w_str (b, "tokenizer.ggml.tokens"); w_u32 (b, 9); w_u32 (b, 8); w_u64 (b, 2);
  w_str (b, "<s>"); w_str (b, "x");
  w_str (b, "tokenizer.ggml.scores"); w_u32 (b, 9); w_u32 (b, 6); w_u64 (b, 2);
  w_f32 (b, 0.0f); w_f32 (b, -1.0f);
}

static GBytes *
small_valid_file (void)
{
  guint8 q8[34] = { 0x00, 0x3c };   /* d = 1.0, q = 0 */
  guint16 w[4] = { 0x3f80, 0x4000, 0x4040, 0x4080 };
  TT tt[2] = {
    { "q", AMK_GGML_TYPE_Q8_0, 2, { 32, 1 }, g_bytes_new (q8, sizeof q8) },
    { "w", AMK_GGML_TYPE_BF16, 2, { 2, 2 }, f16_bytes (w, 4) },
  };
  GBytes *bytes = make_file (tt, 2, 4, kv_small, 32);

  g_bytes_unref (tt[0].data);
  g_bytes_unref (tt[1].data);
  return bytes;
}

/* Every proper prefix of a valid file fails with INVALID_DATA, through a file on disk. */
static void
test_truncated (void)
{
  g_autoptr(GBytes) bytes = small_valid_file ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("amk-gguf-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "t.gguf", NULL);
  const char *data;
  gsize size;

  g_assert_no_error (error);
  data = g_bytes_get_data (bytes, &size);
  {
    g_autoptr(AmkGguf) g = open_bytes (bytes, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (amk_gguf_get_n_tensors (g), ==, 2);
  }
  for (gsize len = 0; len < size; len++)
    {
      g_autoptr(AmkGguf) g = NULL;

      g_assert_true (g_file_set_contents (path, data, (gssize) len, &error));
      g = amk_gguf_open (path, &error);
      if (g != NULL)
        g_error ("a prefix of %zu bytes (of %zu) opened", len, size);
      g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT);
      test_assert_message_has (error, "t.gguf");
      g_clear_error (&error);
    }
  g_assert_true (g_file_set_contents (path, data, (gssize) size, &error));
  {
    g_autoptr(AmkGguf) g = amk_gguf_open (path, &error);
    const char *arch;
    g_assert_no_error (error);
    g_assert_true (amk_gguf_get_string (g, "general.architecture", &arch, NULL, &error));
    g_assert_cmpstr (arch, ==, "llama");
  }
  g_assert_no_errno (g_unlink (path));
  g_assert_no_errno (g_rmdir (dir));

  {
    g_autoptr(AmkGguf) g = amk_gguf_open ("/nonexistent/amk/x.gguf", &error);
    g_assert_null (g);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  }
}

/* A copy of the small valid file with one field changed. */
static GBytes *
patched (gsize offset, const void *value, gsize n)
{
  g_autoptr(GBytes) bytes = small_valid_file ();
  gsize size = g_bytes_get_size (bytes);
  guint8 *copy = g_memdup2 (g_bytes_get_data (bytes, NULL), size);

  g_assert_cmpuint (offset + n, <=, size);
  memcpy (copy + offset, value, n);
  return g_bytes_new_take (copy, size);
}

static void
test_bad_header (void)
{
  guint32 v2 = GUINT32_TO_LE (2), v3be = GUINT32_TO_BE (3);
  guint64 huge = GUINT64_TO_LE (G_MAXUINT64), big = GUINT64_TO_LE (G_GUINT64_CONSTANT (1) << 40);
  GBytes *b;

  b = patched (0, "GGUG", 4);   expect_error (b, AMK_MODEL_ERROR_CORRUPT, "magic"); g_bytes_unref (b);
  b = patched (4, &v2, 4);      expect_error (b, AMK_MODEL_ERROR_UNSUPPORTED_VERSION, "version 2"); g_bytes_unref (b);
  b = patched (4, &v3be, 4);    expect_error (b, AMK_MODEL_ERROR_UNSUPPORTED_VERSION, "big-endian"); g_bytes_unref (b);
  b = patched (8, &huge, 8);    expect_error (b, AMK_MODEL_ERROR_CORRUPT, "tensor count"); g_bytes_unref (b);
  b = patched (8, &big, 8);     expect_error (b, AMK_MODEL_ERROR_CORRUPT, "tensor count"); g_bytes_unref (b);
  b = patched (16, &huge, 8);   expect_error (b, AMK_MODEL_ERROR_CORRUPT, "metadata count"); g_bytes_unref (b);
  b = patched (16, &big, 8);    expect_error (b, AMK_MODEL_ERROR_CORRUPT, "metadata count"); g_bytes_unref (b);
  /* the first key's length */
  b = patched (24, &huge, 8);   expect_error (b, AMK_MODEL_ERROR_CORRUPT, NULL); g_bytes_unref (b);
  b = patched (24, &big, 8);    expect_error (b, AMK_MODEL_ERROR_CORRUPT, NULL); g_bytes_unref (b);
}

typedef void (*Writer) (GByteArray *b);

static GBytes *
one_kv (Writer write)
{
  GByteArray *b = g_byte_array_new ();
  w_header (b, 3, 0, 1);
  write (b);
  return g_byte_array_free_to_bytes (b);
}

static void kv_huge_string (GByteArray *b) { w_str (b, "k"); w_u32 (b, 8); w_u64 (b, G_MAXUINT64); w_str (b, "x"); }
static void kv_long_string (GByteArray *b) { w_str (b, "k"); w_u32 (b, 8); w_u64 (b, 1000); w_str (b, "x"); }
static void kv_huge_array (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 0); w_u64 (b, G_GUINT64_CONSTANT (1) << 62); w_u64 (b, 0); }
static void kv_huge_u64_array (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 10); w_u64 (b, G_MAXUINT64 / 4); w_u64 (b, 0); }
static void kv_huge_str_array (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 8); w_u64 (b, G_MAXUINT64 / 8 + 1); w_str (b, "x"); }
static void kv_nested_array (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 9); w_u64 (b, 1); w_u32 (b, 0); w_u64 (b, 0); }
static void kv_bad_array_type (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 13); w_u64 (b, 1); w_u64 (b, 0); }
static void kv_bad_type (GByteArray *b) { w_str (b, "k"); w_u32 (b, 13); w_u64 (b, 0); }
static void kv_bad_bool (GByteArray *b) { w_str (b, "k"); w_u32 (b, 7); w_u8 (b, 2); }
static void kv_bad_bool_array (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 7); w_u64 (b, 2); w_u8 (b, 1); w_u8 (b, 7); }
static void kv_bad_utf8_key (GByteArray *b) { w_str (b, "k\xff"); w_u32 (b, 0); w_u8 (b, 0); }
static void kv_nul_key (GByteArray *b) { w_u64 (b, 3); w_bytes (b, "k\0k", 3); w_u32 (b, 0); w_u8 (b, 0); }
static void kv_nul_string (GByteArray *b) { w_str (b, "general.architecture"); w_u32 (b, 8); w_u64 (b, 10); w_bytes (b, "llama\0gpt2", 10); }
static void kv_nul_str_array (GByteArray *b) { w_str (b, "k"); w_u32 (b, 9); w_u32 (b, 8); w_u64 (b, 2); w_str (b, "a"); w_u64 (b, 3); w_bytes (b, "b\0c", 3); }
static void kv_twice (GByteArray *b) { w_str (b, "k"); w_u32 (b, 0); w_u8 (b, 0); w_str (b, "k"); w_u32 (b, 0); w_u8 (b, 0); }
static void kv_alignment_3 (GByteArray *b) { w_str (b, "general.alignment"); w_u32 (b, 4); w_u32 (b, 3); }
static void kv_alignment_0 (GByteArray *b) { w_str (b, "general.alignment"); w_u32 (b, 4); w_u32 (b, 0); }
static void kv_alignment_u64 (GByteArray *b) { w_str (b, "general.alignment"); w_u32 (b, 10); w_u64 (b, 32); }

static void
test_bad_metadata (void)
{
  static const struct { Writer w; gint code; const char *needle; } cases[] = {
    { kv_huge_string, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_long_string, AMK_MODEL_ERROR_CORRUPT, "past the end" },
    { kv_huge_array, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_huge_u64_array, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_huge_str_array, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_nested_array, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "“k”" },
    { kv_bad_array_type, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_bad_type, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_bad_bool, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_bad_bool_array, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_bad_utf8_key, AMK_MODEL_ERROR_CORRUPT, "UTF-8" },
    { kv_nul_key, AMK_MODEL_ERROR_CORRUPT, "NUL" },
    { kv_nul_string, AMK_MODEL_ERROR_CORRUPT, "“general.architecture”" },
    { kv_nul_str_array, AMK_MODEL_ERROR_CORRUPT, "“k”" },
    { kv_alignment_3, AMK_MODEL_ERROR_CORRUPT, "general.alignment" },
    { kv_alignment_0, AMK_MODEL_ERROR_CORRUPT, "general.alignment" },
    { kv_alignment_u64, AMK_MODEL_ERROR_CORRUPT, "general.alignment" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GBytes) b = one_kv (cases[i].w);
      expect_error (b, cases[i].code, cases[i].needle);
    }
  {
    GByteArray *b = g_byte_array_new ();
    g_autoptr(GBytes) bytes = NULL;
    w_header (b, 3, 0, 2);
    kv_twice (b);
    bytes = g_byte_array_free_to_bytes (b);
    expect_error (bytes, AMK_MODEL_ERROR_CORRUPT, "twice");
  }
}

/* A file with one tensor info written field by field, and `data_size` bytes of data. */
static GBytes *
one_tensor (const char *name, guint32 n_dims, const guint64 *dims, guint32 type, guint64 offset,
            gsize data_size)
{
  GByteArray *b = g_byte_array_new ();

  w_header (b, 3, 1, 0);
  w_str (b, name);
  w_u32 (b, n_dims);
  for (guint d = 0; d < n_dims; d++)
    w_u64 (b, dims[d]);
  w_u32 (b, type);
  w_u64 (b, offset);
  w_pad (b, 32);
  for (gsize i = 0; i < data_size; i++)
    w_u8 (b, (guint8) i);
  return g_byte_array_free_to_bytes (b);
}

static void
test_bad_tensors (void)
{
  const guint64 d8[] = { 8 }, d5[] = { 1, 1, 1, 1, 1 }, dover[] = { G_GUINT64_CONSTANT (1) << 32,
                                                                   G_GUINT64_CONSTANT (1) << 32 };
  const guint64 dneg[] = { G_MAXUINT64 }, d33[] = { 33 }, d32[] = { 32 };
  GBytes *b;

  /* the reference: valid */
  b = one_tensor ("t", 1, d8, AMK_GGML_TYPE_F32, 0, 32);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(AmkGguf) g = open_bytes (b, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (amk_gguf_find_tensor (g, "t")->n_elements, ==, 8);
  }
  g_bytes_unref (b);
  /* a scalar (no dimensions, as gguf-py writes a 0-d array): one element of one dimension */
  b = one_tensor ("t", 0, NULL, AMK_GGML_TYPE_F32, 0, 32);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(AmkGguf) g = open_bytes (b, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (amk_gguf_find_tensor (g, "t")->n_elements, ==, 1);
    g_assert_cmpuint (amk_gguf_find_tensor (g, "t")->n_dims, ==, 1);
  }
  g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, AMK_GGML_TYPE_F32, 0, 31);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "“t”"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, AMK_GGML_TYPE_F32, 32, 63);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "past the end"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, AMK_GGML_TYPE_F32, G_MAXUINT64 - 31, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "past the end"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, AMK_GGML_TYPE_F32, G_GUINT64_CONSTANT (1) << 40, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "past the end"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, AMK_GGML_TYPE_F32, 4, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "aligned"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, 4 /* the removed Q4_2 */, 0, 64);
  expect_error (b, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "unknown type 4"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d8, 1000, 0, 64);
  expect_error (b, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "“t”"); g_bytes_unref (b);
  b = one_tensor ("t", 5, d5, AMK_GGML_TYPE_F32, 0, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "dimensions"); g_bytes_unref (b);
  b = one_tensor ("t", 2, dover, AMK_GGML_TYPE_F32, 0, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "“t”"); g_bytes_unref (b);
  b = one_tensor ("t", 1, dneg, AMK_GGML_TYPE_F32, 0, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "overflow"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d33, AMK_GGML_TYPE_Q8_0, 0, 64);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "blocks"); g_bytes_unref (b);
  b = one_tensor ("t", 1, d32, AMK_GGML_TYPE_Q8_0, 0, 33);
  expect_error (b, AMK_MODEL_ERROR_CORRUPT, "past the end"); g_bytes_unref (b);

  /* two tensors of one name */
  {
    GByteArray *a = g_byte_array_new ();
    g_autoptr(GBytes) bytes = NULL;
    w_header (a, 3, 2, 0);
    for (int i = 0; i < 2; i++)
      {
        w_str (a, "t"); w_u32 (a, 1); w_u64 (a, 8); w_u32 (a, 0); w_u64 (a, 0);
      }
    w_pad (a, 32);
    for (int i = 0; i < 32; i++)
      w_u8 (a, 0);
    bytes = g_byte_array_free_to_bytes (a);
    expect_error (bytes, AMK_MODEL_ERROR_CORRUPT, "twice");
  }
}

/* Random bytes after a valid header never crash the parser. */
static void
test_random_garbage (void)
{
  for (guint i = 0; i < 2000; i++)
    {
      g_autoptr(GBytes) noise = test_random_bytes (g_test_rand_int_range (0, 200));
      GByteArray *b = g_byte_array_new ();
      g_autoptr(GBytes) bytes = NULL;
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkGguf) g = NULL;

      w_header (b, 3, g_test_rand_int_range (0, 3), g_test_rand_int_range (0, 3));
      w_bytes (b, g_bytes_get_data (noise, NULL), g_bytes_get_size (noise));
      bytes = g_byte_array_free_to_bytes (b);
      g = open_bytes (bytes, &error);
      g_assert_true ((g == NULL) != (error == NULL));
      if (error != NULL)
        g_assert_true (error->domain == AMK_MODEL_ERROR);
    }
}

/* ---- the q/k permutation ---------------------------------------------------------------- */

/* llama.cpp's permute: w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2).reshape(w.shape) */
static void
ref_permute (const guint16 *in, guint16 *out, gsize n_rows, gsize n_cols, guint n_heads)
{
  gsize hd = n_rows / n_heads, half = hd / 2;

  for (gsize h = 0; h < n_heads; h++)
    for (gsize i = 0; i < half; i++)
      for (gsize s = 0; s < 2; s++)
        memcpy (out + (h * hd + i * 2 + s) * n_cols, in + (h * hd + s * half + i) * n_cols,
                n_cols * sizeof (guint16));
}

static void
test_unpermute (void)
{
  static const struct { gsize heads, head_dim, cols; } shapes[] = {
    { 1, 2, 1 }, { 4, 8, 3 }, { 9, 64, 5 },   /* SmolLM2-135M q: 9 heads of 64 */
    { 3, 64, 5 },                             /* ...and its k: 3 kv heads */
    { 2, 6, 7 },
  };
  g_autoptr(GError) error = NULL;

  for (guint c = 0; c < G_N_ELEMENTS (shapes); c++)
    {
      gsize rows = shapes[c].heads * shapes[c].head_dim, n = rows * shapes[c].cols;
      g_autofree guint16 *hf = g_new (guint16, n);
      g_autofree guint16 *gguf = g_new (guint16, n);

      for (gsize i = 0; i < n; i++)
        hf[i] = (guint16) g_test_rand_int ();
      ref_permute (hf, gguf, rows, shapes[c].cols, shapes[c].heads);
      g_assert_true (amk_model_unpermute_qk (gguf, rows, shapes[c].cols, shapes[c].heads, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (gguf, n * 2, hf, n * 2);
    }

  /* one head of 4 rows, 1 column: HF [a b c d] is stored as [a c b d] */
  {
    guint16 rows[4] = { 'a', 'c', 'b', 'd' }, expected[4] = { 'a', 'b', 'c', 'd' };
    g_assert_true (amk_model_unpermute_qk (rows, 4, 1, 1, &error));
    g_assert_cmpmem (rows, sizeof rows, expected, sizeof expected);
  }

  {
    guint16 rows[12] = { 0 };
    g_assert_false (amk_model_unpermute_qk (rows, 12, 1, 5, &error));   /* not a multiple */
    g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE);
    g_clear_error (&error);
    g_assert_false (amk_model_unpermute_qk (rows, 12, 1, 4, &error));   /* odd head_dim 3 */
    g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE);
    g_clear_error (&error);
    g_assert_false (amk_model_unpermute_qk (rows, 12, 1, 0, &error));
    g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE);
  }
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/gguf/metadata/types", test_metadata_types);
  g_test_add_func ("/amk/gguf/tensor/f32", test_tensor_f32);
  g_test_add_func ("/amk/gguf/tensor/f16", test_tensor_f16);
  g_test_add_func ("/amk/gguf/tensor/bf16", test_tensor_bf16);
  g_test_add_func ("/amk/gguf/tensor/q8_0", test_tensor_q8_0);
  g_test_add_func ("/amk/gguf/tensor/q4_0", test_tensor_q4_0);
  g_test_add_func ("/amk/gguf/tensor/q4_1", test_tensor_q4_1);
  g_test_add_func ("/amk/gguf/tensor/quants-reference", test_tensor_quants_reference);
  g_test_add_func ("/amk/gguf/tensor/unsupported", test_tensor_unsupported);
  g_test_add_func ("/amk/gguf/tensor/alignment", test_alignment);
  g_test_add_func ("/amk/gguf/corrupt/truncated", test_truncated);
  g_test_add_func ("/amk/gguf/corrupt/header", test_bad_header);
  g_test_add_func ("/amk/gguf/corrupt/metadata", test_bad_metadata);
  g_test_add_func ("/amk/gguf/corrupt/tensors", test_bad_tensors);
  g_test_add_func ("/amk/gguf/corrupt/random", test_random_garbage);
  g_test_add_func ("/amk/gguf/unpermute", test_unpermute);

  return g_test_run ();
}

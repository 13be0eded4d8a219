/* test-safetensors.c: the safetensors parser on files written here, single and sharded,
 * valid and corrupt.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include <glib/gstdio.h>
#include "amk-safetensors-private.h"

/* A file: the 8-byte length, `header` as given, then `data`. */
static GBytes *
make_file (const char *header, const void *data, gsize data_size)
{
  GByteArray *b = g_byte_array_new ();
  guint64 len = GUINT64_TO_LE (strlen (header));

  g_byte_array_append (b, (const guint8 *) &len, 8);
  g_byte_array_append (b, (const guint8 *) header, strlen (header));
  if (data_size > 0)
    g_byte_array_append (b, data, data_size);
  return g_byte_array_free_to_bytes (b);
}

static void
write_bytes (const char *path, GBytes *bytes)
{
  g_autoptr(GError) error = NULL;
  gsize size;
  const char *data = g_bytes_get_data (bytes, &size);

  g_assert_true (g_file_set_contents (path, data != NULL ? data : "", (gssize) size, &error));
  g_assert_no_error (error);
}

/* 4 BF16 + 3 F16 + 2 F32 values */
static guint8 valid_data[8 + 6 + 8];
static guint16 valid_bf16[4] = { 0x3f80, 0xc000, 0x0001, 0x7f7f };
static guint16 valid_f16[3] = { 0x3c00, 0x0001, 0xfbff };     /* 1, the smallest subnormal, -65504 */
static float valid_f32[2] = { 3.14159265f, -1.00390625f };    /* the second one is a tie */

#define VALID_HEADER \
  "{\"__metadata__\": {\"format\": \"pt\"}," \
  " \"w.bf16\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 8]}," \
  " \"w.f16\": {\"dtype\": \"F16\", \"shape\": [3], \"data_offsets\": [8, 14]}," \
  " \"w.f32\": {\"dtype\": \"F32\", \"shape\": [1, 2], \"data_offsets\": [14, 22]}}  "

static GBytes *
valid_file (void)
{
  for (guint i = 0; i < 4; i++)
    {
      guint16 v = GUINT16_TO_LE (valid_bf16[i]);
      memcpy (valid_data + 2 * i, &v, 2);
    }
  for (guint i = 0; i < 3; i++)
    {
      guint16 v = GUINT16_TO_LE (valid_f16[i]);
      memcpy (valid_data + 8 + 2 * i, &v, 2);
    }
  memcpy (valid_data + 14, valid_f32, 8);   /* the tests run little-endian */
  return make_file (VALID_HEADER, valid_data, sizeof valid_data);
}

static void
check_valid (AmkSafetensors *st)
{
  g_autoptr(GError) error = NULL;
  const AmkSafetensorsTensor *t;
  guint16 out[4];

  g_assert_cmpuint (amk_safetensors_get_n_tensors (st), ==, 3);
  g_assert_cmpstr (amk_safetensors_get_metadata (st, "format"), ==, "pt");
  g_assert_null (amk_safetensors_get_metadata (st, "nope"));
  g_assert_null (amk_safetensors_find_tensor (st, "__metadata__"));
  g_assert_null (amk_safetensors_find_tensor (st, "nope"));
  g_assert_cmpstr (amk_safetensors_get_tensor (st, 0)->name, ==, "w.bf16");   /* offset order */
  g_assert_cmpstr (amk_safetensors_get_tensor (st, 2)->name, ==, "w.f32");

  t = amk_safetensors_find_tensor (st, "w.bf16");
  g_assert_nonnull (t);
  g_assert_cmpint (t->dtype, ==, AMK_SAFETENSORS_DTYPE_BF16);
  g_assert_cmpuint (t->n_dims, ==, 2);
  g_assert_cmpuint (t->shape[0], ==, 2);
  g_assert_cmpuint (t->shape[1], ==, 2);
  g_assert_cmpuint (t->n_elements, ==, 4);
  g_assert_cmpuint (t->n_bytes, ==, 8);
  g_assert_true (amk_safetensors_tensor_to_bf16 (t, out, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (out, 8, valid_bf16, 8);

  t = amk_safetensors_find_tensor (st, "w.f16");
  g_assert_cmpint (t->dtype, ==, AMK_SAFETENSORS_DTYPE_F16);
  g_assert_true (amk_safetensors_tensor_to_bf16 (t, out, &error));
  for (guint i = 0; i < 3; i++)
    g_assert_cmphex (out[i], ==, ref_f32_to_bf16 (ref_f16_to_f32 (valid_f16[i])));

  t = amk_safetensors_find_tensor (st, "w.f32");
  g_assert_cmpstr (amk_safetensors_dtype_name (t->dtype), ==, "F32");
  g_assert_true (amk_safetensors_tensor_to_bf16 (t, out, &error));
  for (guint i = 0; i < 2; i++)
    g_assert_cmphex (out[i], ==, ref_f32_to_bf16 (valid_f32[i]));
  g_assert_cmphex (out[1], ==, 0xbf80);   /* -1.00390625 ties to even: -1.0 */
}

static void
test_valid (void)
{
  g_autoptr(GBytes) bytes = valid_file ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("amk-st-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);

  {
    g_autoptr(AmkSafetensors) st = amk_safetensors_open_bytes (bytes, "x", &error);
    g_assert_no_error (error);
    check_valid (st);
  }
  write_bytes (path, bytes);
  {
    g_autoptr(AmkSafetensors) st = amk_safetensors_open (path, &error);   /* the file */
    g_assert_no_error (error);
    check_valid (st);
  }
  {
    g_autoptr(AmkSafetensors) st = amk_safetensors_open (dir, &error);    /* its folder */
    g_assert_no_error (error);
    check_valid (st);
  }
  g_assert_no_errno (g_unlink (path));
  {
    g_autoptr(AmkSafetensors) st = amk_safetensors_open (dir, &error);
    g_assert_null (st);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
    g_clear_error (&error);
  }
  {
    g_autoptr(AmkSafetensors) st = amk_safetensors_open (path, &error);
    g_assert_null (st);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  }
  g_assert_no_errno (g_rmdir (dir));
}

/* Zero-element tensors, scalars, and dtypes that load but do not convert. */
static void
test_shapes_and_dtypes (void)
{
  guint8 data[9] = { 5, 0, 0, 0, 0, 0, 0, 0, 1 };
  g_autoptr(GBytes) bytes = make_file (
    "{\"i\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]},"
    " \"s\": {\"dtype\": \"U8\", \"shape\": [], \"data_offsets\": [8, 9]},"
    " \"z\": {\"dtype\": \"BF16\", \"shape\": [0, 4], \"data_offsets\": [9, 9]},"
    " \"z2\": {\"dtype\": \"F32\", \"shape\": [3, 0], \"data_offsets\": [0, 0]}}", data, sizeof data);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkSafetensors) st = amk_safetensors_open_bytes (bytes, "x", &error);
  const AmkSafetensorsTensor *t;
  guint16 out[1];

  g_assert_no_error (error);
  g_assert_cmpuint (amk_safetensors_get_n_tensors (st), ==, 4);
  t = amk_safetensors_find_tensor (st, "s");
  g_assert_cmpuint (t->n_dims, ==, 0);
  g_assert_cmpuint (t->n_elements, ==, 1);
  t = amk_safetensors_find_tensor (st, "z");
  g_assert_cmpuint (t->n_elements, ==, 0);
  g_assert_true (amk_safetensors_tensor_to_bf16 (t, NULL, &error));
  t = amk_safetensors_find_tensor (st, "i");
  g_assert_false (amk_safetensors_tensor_to_bf16 (t, out, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE);
  test_assert_message_has (error, "“i”");
  test_assert_message_has (error, "I64");
}

static void
expect_error (GBytes *bytes, gint code, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkSafetensors) st = amk_safetensors_open_bytes (bytes, "bad.safetensors", &error);

  if (st != NULL)
    g_error ("a bad file opened (expecting “%s”)", needle != NULL ? needle : "");
  g_assert_error (error, AMK_MODEL_ERROR, code);
  test_assert_message_has (error, "bad.safetensors");
  if (needle != NULL)
    test_assert_message_has (error, needle);
}

static void
expect_header_error (const char *header, gsize data_size, gint code, const char *needle)
{
  g_autofree guint8 *data = g_malloc0 (MAX (data_size, 1));
  g_autoptr(GBytes) bytes = make_file (header, data, data_size);

  expect_error (bytes, code, needle);
}

static void
test_bad_length (void)
{
  g_autoptr(GBytes) valid = valid_file ();
  gsize size;
  const guint8 *data = g_bytes_get_data (valid, &size);
  static const guint64 lengths[] = { 1000, G_MAXUINT64, G_GUINT64_CONSTANT (1) << 40, 101u << 20 };

  for (guint i = 0; i < G_N_ELEMENTS (lengths); i++)
    {
      guint8 *copy = g_memdup2 (data, size);
      guint64 len = GUINT64_TO_LE (lengths[i]);
      g_autoptr(GBytes) bytes = NULL;

      memcpy (copy, &len, 8);
      bytes = g_bytes_new_take (copy, size);
      expect_error (bytes, AMK_MODEL_ERROR_CORRUPT, "header length");
    }
  /* every proper prefix fails */
  for (gsize len = 0; len < size; len++)
    {
      g_autoptr(GBytes) bytes = g_bytes_new (data, len);
      expect_error (bytes, AMK_MODEL_ERROR_CORRUPT, NULL);
    }
}

static void
test_bad_json (void)
{
  const gint inv = AMK_MODEL_ERROR_CORRUPT;
  g_autofree char *deep = NULL;

  expect_header_error ("{\"a\": ", 0, inv, "JSON");
  expect_header_error ("not json", 0, inv, "JSON");
  expect_header_error ("", 0, inv, NULL);
  expect_header_error ("[1, 2]", 0, inv, "object");
  expect_header_error ("\"str\"", 0, inv, "object");
  expect_header_error ("{\"a\": 1}", 0, inv, "“a”");
  expect_header_error ("{\"__metadata__\": [1]}", 0, inv, "__metadata__");
  expect_header_error ("{\"__metadata__\": {\"k\": 1}}", 0, inv, "“k”");
  deep = g_strconcat ("{\"a\": ", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "}", NULL);
  expect_header_error (deep, 0, inv, "nests");
  {
    /* a NUL inside the header */
    GByteArray *b = g_byte_array_new ();
    guint64 len = GUINT64_TO_LE (4);
    g_autoptr(GBytes) bytes = NULL;
    g_byte_array_append (b, (const guint8 *) &len, 8);
    g_byte_array_append (b, (const guint8 *) "{\0}}", 4);
    bytes = g_byte_array_free_to_bytes (b);
    expect_error (bytes, inv, "NUL");
  }
}

static void
test_bad_entries (void)
{
  const gint inv = AMK_MODEL_ERROR_CORRUPT;

  /* dtype */
  expect_header_error ("{\"t\": {\"dtype\": \"Q4\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 2,
                       AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "Q4");
  expect_header_error ("{\"t\": {\"dtype\": \"bf16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
                       AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "“t”");
  expect_header_error ("{\"t\": {\"dtype\": 3, \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, inv, "dtype");
  expect_header_error ("{\"t\": {\"shape\": [2], \"data_offsets\": [0, 4]}}", 4, inv, "dtype");
  /* shape */
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"data_offsets\": [0, 4]}}", 4, inv, "shape");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [-2], \"data_offsets\": [0, 4]}}", 4, inv, "“t”");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2.0], \"data_offsets\": [0, 4]}}", 4, inv, "“t”");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [\"2\"], \"data_offsets\": [0, 4]}}", 4, inv, "“t”");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 2]}}", 2, inv, "dimensions");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 0]}}", 0, inv, "overflow");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 0]}}", 0, inv, "“t”");
  /* data_offsets */
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2]}}", 4, inv, "data_offsets");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0]}}", 4, inv, "data_offsets");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4, 8]}}", 8, inv, "data_offsets");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [-4, 0]}}", 4, inv, "data_offsets");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 3, inv, "outside");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [4, 0]}}", 4, inv, "outside");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 18446744073709551615]}}", 4, inv, "“t”");
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [9223372036854775800, 9223372036854775804]}}", 4, inv, "outside");
  /* inconsistent with the shape */
  expect_header_error ("{\"t\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [0, 4]}}", 8, inv, "need");
  expect_header_error ("{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8, inv, "need");
  /* overlapping */
  expect_header_error ("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
                       " \"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [2, 6]}}", 8, inv, "overlap");
  expect_header_error ("{\"a\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [0, 8]},"
                       " \"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [3, 4]}}", 8, inv, "overlap");
  expect_header_error ("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
                       " \"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8, inv, "overlap");
  /* an empty tensor sorted between two overlapping ones does not hide the overlap */
  expect_header_error ("{\"a\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [0, 8]},"
                       " \"z\": {\"dtype\": \"BF16\", \"shape\": [0], \"data_offsets\": [2, 2]},"
                       " \"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [4, 5]}}", 8, inv, "“b”");
  /* nor does a short tensor: "c" overlaps "a", not its neighbour "b" */
  expect_header_error ("{\"a\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [0, 8]},"
                       " \"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [8, 9]},"
                       " \"c\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [2, 3]}}", 9, inv, "“c”");
}

/* an empty tensor owns no byte: inside another tensor or at its start, it overlaps nothing */
static void
test_empty_tensor_inside (void)
{
  guint8 data[8] = { 0 };
  g_autoptr(GBytes) bytes = make_file (
    "{\"a\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [0, 8]},"
    " \"z\": {\"dtype\": \"BF16\", \"shape\": [0], \"data_offsets\": [4, 4]},"
    " \"y\": {\"dtype\": \"BF16\", \"shape\": [0], \"data_offsets\": [0, 0]}}", data, sizeof data);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkSafetensors) st = amk_safetensors_open_bytes (bytes, "empty.safetensors", &error);

  g_assert_no_error (error);
  g_assert_nonnull (st);
}

/* ---- sharded checkpoints -------------------------------------------------------------- */

static GBytes *
shard (const char *name, guint16 value)
{
  g_autofree char *header = g_strdup_printf (
    "{\"%s\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", name);
  guint16 data[2] = { GUINT16_TO_LE (value), GUINT16_TO_LE (value + 1) };

  return make_file (header, data, sizeof data);
}

static void
write_text (const char *dir, const char *name, const char *text)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (path, text, -1, &error));
}

static void
write_shard (const char *dir, const char *file, const char *tensor, guint16 value)
{
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autoptr(GBytes) bytes = shard (tensor, value);

  write_bytes (path, bytes);
}

static void
remove_all (const char *dir)
{
  const char *names[] = { "model.safetensors.index.json", "model-1.safetensors",
                          "model-2.safetensors", "model.safetensors" };
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_autofree char *path = g_build_filename (dir, names[i], NULL);
      g_remove (path);
    }
  g_assert_no_errno (g_rmdir (dir));
}

static void
expect_dir_error (const char *dir, GQuark domain, gint code, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkSafetensors) st = amk_safetensors_open (dir, &error);

  g_assert_null (st);
  g_assert_error (error, domain, code);
  if (needle != NULL)
    test_assert_message_has (error, needle);
}

#define INDEX_2 \
  "{\"metadata\": {\"total_size\": 8}, \"weight_map\": {" \
  "\"a\": \"model-1.safetensors\", \"b\": \"model-2.safetensors\"}}"

static void
test_sharded (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("amk-st-XXXXXX", &error);

  g_assert_no_error (error);
  write_shard (dir, "model-1.safetensors", "a", 0x3f80);
  write_shard (dir, "model-2.safetensors", "b", 0x4000);
  /* a model.safetensors beside the index is ignored */
  write_shard (dir, "model.safetensors", "c", 0);
  write_text (dir, "model.safetensors.index.json", INDEX_2);
  {
    g_autoptr(AmkSafetensors) st = amk_safetensors_open (dir, &error);
    const AmkSafetensorsTensor *a, *b;
    guint16 out[2];

    g_assert_no_error (error);
    g_assert_cmpuint (amk_safetensors_get_n_tensors (st), ==, 2);
    a = amk_safetensors_find_tensor (st, "a");
    b = amk_safetensors_find_tensor (st, "b");
    g_assert_nonnull (a);
    g_assert_nonnull (b);
    g_assert_null (amk_safetensors_find_tensor (st, "c"));
    test_assert_has (a->file, "model-1.safetensors");
    test_assert_has (b->file, "model-2.safetensors");
    g_assert_true (amk_safetensors_tensor_to_bf16 (b, out, &error));
    g_assert_cmphex (out[0], ==, 0x4000);
    g_assert_cmphex (out[1], ==, 0x4001);
  }

  /* the map names a tensor its shard lacks */
  write_text (dir, "model.safetensors.index.json",
              "{\"weight_map\": {\"a\": \"model-1.safetensors\", \"b\": \"model-1.safetensors\"}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "“b”");
  /* ...or puts it in the wrong shard */
  write_text (dir, "model.safetensors.index.json",
              "{\"weight_map\": {\"a\": \"model-2.safetensors\", \"b\": \"model-1.safetensors\"}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "does not hold");
  /* two shards hold one tensor */
  write_shard (dir, "model-2.safetensors", "a", 0);
  write_text (dir, "model.safetensors.index.json", INDEX_2);
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "twice");
  write_shard (dir, "model-2.safetensors", "b", 0x4000);
  /* a shard outside the folder, a bad map, bad JSON */
  write_text (dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../model-1.safetensors\"}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "“a”");
  write_text (dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "“a”");
  write_text (dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": 3}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "“a”");
  write_text (dir, "model.safetensors.index.json", "{\"weight_map\": {}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "empty");
  write_text (dir, "model.safetensors.index.json", "{\"metadata\": {}}");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "weight_map");
  write_text (dir, "model.safetensors.index.json", "{\"weight_map\": ");
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "JSON");
  /* a missing shard */
  write_text (dir, "model.safetensors.index.json", INDEX_2);
  {
    g_autofree char *path = g_build_filename (dir, "model-2.safetensors", NULL);
    g_assert_no_errno (g_unlink (path));
  }
  expect_dir_error (dir, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "model-2.safetensors");
  /* a corrupt shard */
  {
    g_autofree char *path = g_build_filename (dir, "model-2.safetensors", NULL);
    g_autoptr(GBytes) junk = g_bytes_new_static ("\x10\0\0\0\0\0\0\0{", 9);
    write_bytes (path, junk);
  }
  expect_dir_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "model-2.safetensors");
  remove_all (dir);
}

/* Random bytes after a plausible header length never crash the parser. */
static void
test_random_garbage (void)
{
  for (guint i = 0; i < 2000; i++)
    {
      gsize n = g_test_rand_int_range (0, 120);
      g_autoptr(GBytes) noise = test_random_bytes (n);
      GByteArray *b = g_byte_array_new ();
      guint64 len = GUINT64_TO_LE (g_test_rand_int_range (0, n + 2));
      g_autoptr(GBytes) bytes = NULL;
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkSafetensors) st = NULL;

      g_byte_array_append (b, (const guint8 *) &len, 8);
      g_byte_array_append (b, g_bytes_get_data (noise, NULL), n);
      bytes = g_byte_array_free_to_bytes (b);
      st = amk_safetensors_open_bytes (bytes, "r", &error);
      g_assert_true ((st == NULL) != (error == NULL));
      if (error != NULL)
        g_assert_true (error->domain == AMK_MODEL_ERROR);
    }
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/safetensors/valid", test_valid);
  g_test_add_func ("/amk/safetensors/shapes-and-dtypes", test_shapes_and_dtypes);
  g_test_add_func ("/amk/safetensors/corrupt/length", test_bad_length);
  g_test_add_func ("/amk/safetensors/corrupt/json", test_bad_json);
  g_test_add_func ("/amk/safetensors/corrupt/entries", test_bad_entries);
  g_test_add_func ("/amk/safetensors/empty-tensor-inside", test_empty_tensor_inside);
  g_test_add_func ("/amk/safetensors/corrupt/random", test_random_garbage);
  g_test_add_func ("/amk/safetensors/sharded", test_sharded);

  return g_test_run ();
}

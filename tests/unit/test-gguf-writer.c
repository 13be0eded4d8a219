/* test-gguf-writer.c: GGUF files written with amk-gguf-writer.c and read back with the
 * library's own reader (amk-gguf.c): every metadata type, tensors of several types and
 * alignments, keys copied from one file to another, and the failures: a folder that
 * does not exist, a full disk (a file size limit), a tensor of the wrong size, a writer
 * dropped half way. None may leave PATH or PATH.tmp behind.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <sys/resource.h>
#include "amk-gguf-private.h"
#include "amk-gguf-writer-private.h"

typedef struct {
  char *dir;
  char *path;
} Fixture;

static void
fixture_setup (Fixture *f, gconstpointer data)
{
  g_autoptr(GError) error = NULL;

  f->dir = g_dir_make_tmp ("amk-gguf-writer-XXXXXX", &error);
  g_assert_no_error (error);
  f->path = g_build_filename (f->dir, "out.gguf", NULL);
}

static void
fixture_teardown (Fixture *f, gconstpointer data)
{
  g_autofree char *tmp = g_strconcat (f->path, ".tmp", NULL);

  g_unlink (f->path);
  g_unlink (tmp);
  g_assert_cmpint (g_rmdir (f->dir), ==, 0);   /* nothing else was left in it */
  g_free (f->path);
  g_free (f->dir);
}

static void
assert_nothing_written (Fixture *f)
{
  g_autofree char *tmp = g_strconcat (f->path, ".tmp", NULL);

  g_assert_false (g_file_test (f->path, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (tmp, G_FILE_TEST_EXISTS));
}

/* A writer with one key of every type and three tensors (F32 [3], Q8_0 [32, 2], F16
 * [4, 3]); their data in data[]. */
static AmkGgufWriter *
sample_writer (GBytes **data)
{
  AmkGgufWriter *w = amk_gguf_writer_new ();
  const gint32 i32s[] = { -1, 0, 7, G_MAXINT32 };
  const float f32s[] = { 0.5f, -2.0f };
  const double f64s[] = { 1e300 };
  const guint8 bools[] = { 1, 0, 1 };
  const guint64 u64s[] = { G_MAXUINT64, 5 };
  const char *strings[] = { "a", "", "ÿ" };
  const guint64 dims0[] = { 3 }, dims1[] = { 32, 2 }, dims2[] = { 4, 3 };
  const float t0[3] = { 1.0f, -2.5f, 1e-3f };
  guint8 t1[68];
  guint16 t2[12];

  amk_gguf_writer_set_string (w, "general.architecture", "llama", 5);
  amk_gguf_writer_set_uint (w, "k.u8", AMK_GGUF_TYPE_UINT8, 250);
  amk_gguf_writer_set_int (w, "k.i8", AMK_GGUF_TYPE_INT8, -100);
  amk_gguf_writer_set_uint (w, "k.u16", AMK_GGUF_TYPE_UINT16, 65000);
  amk_gguf_writer_set_int (w, "k.i16", AMK_GGUF_TYPE_INT16, -30000);
  amk_gguf_writer_set_u32 (w, "k.u32", 4000000000u);
  amk_gguf_writer_set_int (w, "k.i32", AMK_GGUF_TYPE_INT32, G_MININT32);
  amk_gguf_writer_set_uint (w, "k.u64", AMK_GGUF_TYPE_UINT64, G_MAXUINT64);
  amk_gguf_writer_set_int (w, "k.i64", AMK_GGUF_TYPE_INT64, G_MININT64);
  amk_gguf_writer_set_f32 (w, "k.f32", 0.1f);
  amk_gguf_writer_set_f64 (w, "k.f64", 0.1);
  amk_gguf_writer_set_bool (w, "k.bool", TRUE);
  amk_gguf_writer_set_string (w, "k.string", "héllo", strlen ("héllo"));
  amk_gguf_writer_set_array (w, "k.a.i32", AMK_GGUF_TYPE_INT32, i32s, G_N_ELEMENTS (i32s));
  amk_gguf_writer_set_array (w, "k.a.f32", AMK_GGUF_TYPE_FLOAT32, f32s, G_N_ELEMENTS (f32s));
  amk_gguf_writer_set_array (w, "k.a.f64", AMK_GGUF_TYPE_FLOAT64, f64s, G_N_ELEMENTS (f64s));
  amk_gguf_writer_set_array (w, "k.a.bool", AMK_GGUF_TYPE_BOOL, bools, G_N_ELEMENTS (bools));
  amk_gguf_writer_set_array (w, "k.a.u64", AMK_GGUF_TYPE_UINT64, u64s, G_N_ELEMENTS (u64s));
  amk_gguf_writer_set_array (w, "k.a.empty", AMK_GGUF_TYPE_UINT8, NULL, 0);
  amk_gguf_writer_set_string_array (w, "k.a.string", strings, G_N_ELEMENTS (strings));

  g_assert_true (amk_gguf_writer_add_tensor (w, "t0", AMK_GGML_TYPE_F32, 1, dims0, NULL));
  g_assert_true (amk_gguf_writer_add_tensor (w, "t1", AMK_GGML_TYPE_Q8_0, 2, dims1, NULL));
  g_assert_true (amk_gguf_writer_add_tensor (w, "t2", AMK_GGML_TYPE_F16, 2, dims2, NULL));
  for (guint i = 0; i < sizeof t1; i++)
    t1[i] = (guint8) (i * 7);
  for (guint i = 0; i < G_N_ELEMENTS (t2); i++)
    t2[i] = GUINT16_TO_LE ((guint16) (0x3c00 + i));
  data[0] = g_bytes_new (t0, sizeof t0);
  data[1] = g_bytes_new (t1, sizeof t1);
  data[2] = g_bytes_new (t2, sizeof t2);
  return w;
}

static void
write_all (AmkGgufWriter *w, const char *path, GBytes **data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (amk_gguf_writer_begin (w, path, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 3; i++)
    {
      g_assert_true (amk_gguf_writer_write_tensor (w, g_bytes_get_data (data[i], NULL),
                                                   g_bytes_get_size (data[i]), &error));
      g_assert_no_error (error);
    }
  g_assert_true (amk_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
}

static void
check_sample (AmkGguf *g, GBytes **data, guint32 alignment)
{
  g_autoptr(GError) error = NULL;
  const char *s = NULL;
  gsize len = 0, n = 0;
  guint64 u = 0;
  gint64 i = 0;
  guint32 u32 = 0;
  double f = 0.0;
  gboolean b = FALSE;
  AmkGgufType type, element_type;
  g_autofree gint32 *i32s = NULL;
  g_autofree float *f32s = NULL;
  const guint8 *raw;
  const char * const *strv;

  g_assert_cmpuint (amk_gguf_get_version (g), ==, 3);
  g_assert_cmpuint (amk_gguf_get_alignment (g), ==, alignment);
  g_assert_cmpstr (amk_gguf_get_key (g, 0), ==, "general.architecture");

#define CHECK_TYPE(key, t) \
  g_assert_true (amk_gguf_get_key_type (g, key, &type, NULL, NULL, &error)); \
  g_assert_no_error (error); \
  g_assert_cmpint (type, ==, t)

  CHECK_TYPE ("k.u8", AMK_GGUF_TYPE_UINT8);
  g_assert_true (amk_gguf_get_u64 (g, "k.u8", &u, NULL)); g_assert_cmpuint (u, ==, 250);
  CHECK_TYPE ("k.i8", AMK_GGUF_TYPE_INT8);
  g_assert_true (amk_gguf_get_i64 (g, "k.i8", &i, NULL)); g_assert_cmpint (i, ==, -100);
  CHECK_TYPE ("k.u16", AMK_GGUF_TYPE_UINT16);
  g_assert_true (amk_gguf_get_u64 (g, "k.u16", &u, NULL)); g_assert_cmpuint (u, ==, 65000);
  CHECK_TYPE ("k.i16", AMK_GGUF_TYPE_INT16);
  g_assert_true (amk_gguf_get_i64 (g, "k.i16", &i, NULL)); g_assert_cmpint (i, ==, -30000);
  CHECK_TYPE ("k.u32", AMK_GGUF_TYPE_UINT32);
  g_assert_true (amk_gguf_get_u32 (g, "k.u32", &u32, NULL)); g_assert_cmpuint (u32, ==, 4000000000u);
  CHECK_TYPE ("k.i32", AMK_GGUF_TYPE_INT32);
  g_assert_true (amk_gguf_get_i64 (g, "k.i32", &i, NULL)); g_assert_cmpint (i, ==, G_MININT32);
  CHECK_TYPE ("k.u64", AMK_GGUF_TYPE_UINT64);
  g_assert_true (amk_gguf_get_u64 (g, "k.u64", &u, NULL)); g_assert_cmpuint (u, ==, G_MAXUINT64);
  CHECK_TYPE ("k.i64", AMK_GGUF_TYPE_INT64);
  g_assert_true (amk_gguf_get_i64 (g, "k.i64", &i, NULL)); g_assert_cmpint (i, ==, G_MININT64);
  CHECK_TYPE ("k.f32", AMK_GGUF_TYPE_FLOAT32);
  g_assert_true (amk_gguf_get_f64 (g, "k.f32", &f, NULL)); g_assert_cmpfloat (f, ==, (double) 0.1f);
  CHECK_TYPE ("k.f64", AMK_GGUF_TYPE_FLOAT64);
  g_assert_true (amk_gguf_get_f64 (g, "k.f64", &f, NULL)); g_assert_cmpfloat (f, ==, 0.1);
  CHECK_TYPE ("k.bool", AMK_GGUF_TYPE_BOOL);
  g_assert_true (amk_gguf_get_bool (g, "k.bool", &b, NULL)); g_assert_true (b);
  g_assert_true (amk_gguf_get_string (g, "k.string", &s, &len, NULL));
  g_assert_cmpstr (s, ==, "héllo");
  g_assert_cmpuint (len, ==, strlen ("héllo"));
#undef CHECK_TYPE

  i32s = amk_gguf_get_i32_array (g, "k.a.i32", &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 4);
  g_assert_cmpint (i32s[0], ==, -1);
  g_assert_cmpint (i32s[3], ==, G_MAXINT32);
  f32s = amk_gguf_get_f32_array (g, "k.a.f32", &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 2);
  g_assert_cmpfloat (f32s[1], ==, -2.0f);
  raw = amk_gguf_get_array_data (g, "k.a.f64", &element_type, &n, &error);
  g_assert_no_error (error);
  g_assert_cmpint (element_type, ==, AMK_GGUF_TYPE_FLOAT64);
  g_assert_cmpuint (n, ==, 1);
  {
    guint64 bits;
    double v;

    memcpy (&bits, raw, 8);
    bits = GUINT64_FROM_LE (bits);
    memcpy (&v, &bits, 8);
    g_assert_cmpfloat (v, ==, 1e300);
  }
  raw = amk_gguf_get_array_data (g, "k.a.bool", &element_type, &n, &error);
  g_assert_no_error (error);
  g_assert_cmpint (element_type, ==, AMK_GGUF_TYPE_BOOL);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpmem (raw, 3, "\1\0\1", 3);
  raw = amk_gguf_get_array_data (g, "k.a.u64", &element_type, &n, &error);
  g_assert_no_error (error);
  g_assert_cmpint (element_type, ==, AMK_GGUF_TYPE_UINT64);
  g_assert_cmpuint (n, ==, 2);
  raw = amk_gguf_get_array_data (g, "k.a.empty", &element_type, &n, &error);
  g_assert_no_error (error);
  g_assert_nonnull (raw);
  g_assert_cmpuint (n, ==, 0);
  strv = amk_gguf_get_string_array (g, "k.a.string", &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpstr (strv[0], ==, "a");
  g_assert_cmpstr (strv[1], ==, "");
  g_assert_cmpstr (strv[2], ==, "ÿ");

  g_assert_cmpuint (amk_gguf_get_n_tensors (g), ==, 3);
  for (guint t = 0; t < 3; t++)
    {
      const AmkGgufTensor *tensor = amk_gguf_get_tensor (g, t);

      g_assert_cmpuint (tensor->offset % alignment, ==, 0);
      g_assert_cmpmem (tensor->data, tensor->n_bytes, g_bytes_get_data (data[t], NULL),
                       g_bytes_get_size (data[t]));
    }
  g_assert_cmpstr (amk_gguf_get_tensor (g, 1)->name, ==, "t1");
  g_assert_cmpint (amk_gguf_get_tensor (g, 1)->type, ==, AMK_GGML_TYPE_Q8_0);
  g_assert_cmpuint (amk_gguf_get_tensor (g, 1)->n_dims, ==, 2);
  g_assert_cmpuint (amk_gguf_get_tensor (g, 1)->dims[0], ==, 32);
  g_assert_cmpuint (amk_gguf_get_tensor (g, 1)->dims[1], ==, 2);
  g_assert_cmpuint (amk_gguf_get_tensor (g, 2)->dims[0], ==, 4);
  g_assert_cmpuint (amk_gguf_get_tensor (g, 2)->dims[1], ==, 3);
}

static void
free_data (GBytes **data)
{
  for (guint i = 0; i < 3; i++)
    g_bytes_unref (data[i]);
}

/* Every metadata type and three tensors, at the default alignment and at 64. */
static void
test_round_trip (Fixture *f, gconstpointer user_data)
{
  const guint32 alignments[] = { 32, 64 };

  for (guint a = 0; a < G_N_ELEMENTS (alignments); a++)
    {
      g_autoptr(AmkGgufWriter) w = NULL;
      g_autoptr(AmkGguf) g = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree char *tmp = g_strconcat (f->path, ".tmp", NULL);
      GBytes *data[3];

      w = sample_writer (data);
      if (alignments[a] != 32)
        amk_gguf_writer_set_alignment (w, alignments[a]);
      write_all (w, f->path, data);
      g_assert_false (g_file_test (tmp, G_FILE_TEST_EXISTS));
      g = amk_gguf_open (f->path, &error);
      g_assert_no_error (error);
      check_sample (g, data, alignments[a]);
      free_data (data);
    }
}

/* Every key of a file copied into a second one reads back the same; a key set again
 * keeps its place. */
static void
test_copy_keys (Fixture *f, gconstpointer user_data)
{
  g_autoptr(AmkGgufWriter) w = NULL;
  g_autoptr(AmkGgufWriter) w2 = NULL;
  g_autoptr(AmkGguf) g = NULL;
  g_autoptr(AmkGguf) g2 = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *path2 = g_build_filename (f->dir, "copy.gguf", NULL);
  GBytes *data[3], *data2[3];
  const char *s = NULL;

  w = sample_writer (data);
  amk_gguf_writer_set_alignment (w, 128);
  write_all (w, f->path, data);
  g = amk_gguf_open (f->path, &error);
  g_assert_no_error (error);

  w2 = sample_writer (data2);
  for (guint i = 0; i < amk_gguf_get_n_keys (g); i++)
    {
      g_assert_true (amk_gguf_writer_copy_key (w2, g, amk_gguf_get_key (g, i), &error));
      g_assert_no_error (error);
    }
  amk_gguf_writer_set_string (w2, "general.architecture", "qwen3", 5);
  write_all (w2, path2, data2);
  g2 = amk_gguf_open (path2, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (amk_gguf_get_n_keys (g2), ==, amk_gguf_get_n_keys (g));
  g_assert_cmpstr (amk_gguf_get_key (g2, 0), ==, "general.architecture");
  g_assert_true (amk_gguf_get_string (g2, "general.architecture", &s, NULL, NULL));
  g_assert_cmpstr (s, ==, "qwen3");
  amk_gguf_free (g_steal_pointer (&g));
  check_sample (g2, data2, 128);
  g_unlink (path2);
  free_data (data);
  free_data (data2);
}

/* A folder that does not exist: G_IO_ERROR_NOT_FOUND, nothing written. */
static void
test_no_folder (Fixture *f, gconstpointer user_data)
{
  g_autoptr(AmkGgufWriter) w = amk_gguf_writer_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *path = g_build_filename (f->dir, "missing", "out.gguf", NULL);

  g_assert_false (amk_gguf_writer_begin (w, path, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "out.gguf"));
}

/* Bad tensors: rows not whole blocks, a name twice, bytes of the wrong size (which
 * abandons the file). */
static void
test_bad_tensors (Fixture *f, gconstpointer user_data)
{
  g_autoptr(AmkGgufWriter) w = amk_gguf_writer_new ();
  g_autoptr(GError) error = NULL;
  const guint64 rows_of_40[] = { 40, 2 }, rows_of_64[] = { 64, 1 };
  guint8 bytes[68] = { 0 };

  g_assert_false (amk_gguf_writer_add_tensor (w, "a", AMK_GGML_TYPE_Q8_0, 2, rows_of_40, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE);
  g_clear_error (&error);
  g_assert_true (amk_gguf_writer_add_tensor (w, "a", AMK_GGML_TYPE_Q8_0, 2, rows_of_64, &error));
  g_assert_false (amk_gguf_writer_add_tensor (w, "a", AMK_GGML_TYPE_F32, 2, rows_of_64, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT);
  g_clear_error (&error);
  g_assert_cmpuint (amk_gguf_writer_tensor_bytes (w, 0), ==, 68);

  g_assert_true (amk_gguf_writer_begin (w, f->path, &error));
  g_assert_false (amk_gguf_writer_write_tensor (w, bytes, 34, &error));
  g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE);
  assert_nothing_written (f);
}

/* A writer freed before it finishes, or finished before its last tensor: no file. */
static void
test_unfinished (Fixture *f, gconstpointer user_data)
{
  g_autoptr(GError) error = NULL;
  GBytes *data[3];
  AmkGgufWriter *w = sample_writer (data);

  g_assert_true (amk_gguf_writer_begin (w, f->path, &error));
  g_assert_true (amk_gguf_writer_write_tensor (w, g_bytes_get_data (data[0], NULL),
                                               g_bytes_get_size (data[0]), &error));
  amk_gguf_writer_free (w);
  assert_nothing_written (f);
  free_data (data);

  w = sample_writer (data);
  g_assert_true (amk_gguf_writer_begin (w, f->path, &error));
  g_assert_false (amk_gguf_writer_finish (w, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_FAILED);
  assert_nothing_written (f);
  amk_gguf_writer_free (w);
  free_data (data);
}

/* A write that the system refuses half way (a file size limit stands in for a full
 * disk: write(2) fails with EFBIG): a G_IO_ERROR naming the file, nothing left. */
static void
test_write_error (Fixture *f, gconstpointer user_data)
{
  if (g_test_subprocess ())
    {
      g_autoptr(AmkGgufWriter) w = amk_gguf_writer_new ();
      g_autoptr(GError) error = NULL;
      struct rlimit limit = { 64 * 1024, 64 * 1024 };
      const guint64 dims[] = { 1 << 20 };
      g_autofree float *zeros = g_new0 (float, 1 << 20);
      gboolean ok;

      signal (SIGXFSZ, SIG_IGN);
      g_assert_cmpint (setrlimit (RLIMIT_FSIZE, &limit), ==, 0);
      g_assert_true (amk_gguf_writer_add_tensor (w, "big", AMK_GGML_TYPE_F32, 1, dims, &error));
      ok = amk_gguf_writer_begin (w, f->path, &error) &&
           amk_gguf_writer_write_tensor (w, zeros, 4 << 20, &error) &&
           amk_gguf_writer_finish (w, &error);
      g_assert_false (ok);
      g_assert_true (error->domain == G_IO_ERROR);
      g_assert_nonnull (strstr (error->message, "out.gguf"));
      g_printerr ("%s\n", error->message);
      assert_nothing_written (f);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*Cannot write*File too large*");
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);

#define ADD(path, fn) g_test_add (path, Fixture, NULL, fixture_setup, fn, fixture_teardown)
  ADD ("/amk/gguf-writer/round-trip", test_round_trip);
  ADD ("/amk/gguf-writer/copy-keys", test_copy_keys);
  ADD ("/amk/gguf-writer/no-folder", test_no_folder);
  ADD ("/amk/gguf-writer/bad-tensors", test_bad_tensors);
  ADD ("/amk/gguf-writer/unfinished", test_unfinished);
  ADD ("/amk/gguf-writer/write-error", test_write_error);
#undef ADD
  return g_test_run ();
}

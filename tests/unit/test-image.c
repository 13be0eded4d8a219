/* test-image.c: serialize / load round trips, and untrusted bytes: random data, every
 * truncation, every bit flip, other ABI versions, crafted images with bad fields, files.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib/gstdio.h>
#include "amk-test-common.h"

#define IMAGE_TYPE "(suuta(syyaxtmay)amsayaai)"

/* A program that uses every dtype, role and opcode but TRAP, waits, signals, counters
 * with and without names, float parameters and default contents. */
static AmkProgram *
rich_program (void)
{
  AmkProgram *p = amk_program_new (4);
  const gint64 shape2[] = { 4, 8 };
  gint x, y, out, h, bf, i32, u8, s0, s1, kst, c0, c1, c2, i;
  g_autoptr(GBytes) dx = test_random_bytes (32 * 4);
  g_autoptr(GBytes) dh = NULL, dbf = NULL, di = test_random_bytes (16 * 4), du = test_random_bytes (16);
  guint16 halves[16], bhalves[16];

  for (guint k = 0; k < 16; k++)
    {
      halves[k] = (guint16) (0x3c00 + g_test_rand_int_range (0, 0x400)); /* [1, 2) */
      bhalves[k] = (guint16) (0x4000 + g_test_rand_int_range (0, 0x80)); /* [2, 4) */
    }
  dh = g_bytes_new (halves, sizeof halves);
  dbf = g_bytes_new (bhalves, sizeof bhalves);

  x = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, shape2, 2, AMK_BUFFER_ROLE_CONSTANT, NULL);
  y = test_add_buffer (p, "y", AMK_DTYPE_F32, 32, AMK_BUFFER_ROLE_INPUT);
  out = test_add_buffer (p, "out", AMK_DTYPE_F32, 32, AMK_BUFFER_ROLE_OUTPUT);
  h = test_add_buffer (p, "h", AMK_DTYPE_F16, 16, AMK_BUFFER_ROLE_STATE);
  bf = test_add_buffer (p, "bf", AMK_DTYPE_BF16, 16, AMK_BUFFER_ROLE_STATE);
  i32 = test_add_buffer (p, "i32", AMK_DTYPE_I32, 16, AMK_BUFFER_ROLE_OUTPUT);
  u8 = test_add_buffer (p, "u8", AMK_DTYPE_U8, 16, AMK_BUFFER_ROLE_OUTPUT);
  s0 = test_add_buffer (p, "s0", AMK_DTYPE_F32, 32, AMK_BUFFER_ROLE_SCRATCH);
  s1 = test_add_buffer (p, "s1", AMK_DTYPE_I32, 16, AMK_BUFFER_ROLE_SCRATCH);
  kst = test_add_buffer (p, "ki", AMK_DTYPE_I32, 16, AMK_BUFFER_ROLE_CONSTANT);
  g_assert_true (amk_program_set_buffer_data (p, x, dx, NULL));
  g_assert_true (amk_program_set_buffer_data (p, h, dh, NULL));
  g_assert_true (amk_program_set_buffer_data (p, bf, dbf, NULL));
  g_assert_true (amk_program_set_buffer_data (p, kst, di, NULL));
  g_assert_true (amk_program_set_buffer_data (p, u8, du, NULL));
  c0 = amk_program_add_counter (p, "scratch ready");
  c1 = amk_program_add_counter (p, NULL);
  c2 = amk_program_add_counter (p, "late");

  /* queue 0: s0 = x + y; signal c0 */
  i = test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { s0, x, y }, 3, "count", 32, NULL);
  test_signal (p, i, c0, 1);
  /* queue 1: s1 = ki; i32[0:8] = s1[8:16] + ki[0:8] after... */
  i = test_add (p, 1, AMK_OPCODE_COPY, (gint[]) { s1, kst }, 2, "count", 16, NULL);
  test_signal (p, i, c1, 2);
  i = test_add (p, 1, AMK_OPCODE_ADD, (gint[]) { i32, s1, kst }, 3, "a_offset", 8, "count", 16 - 8, NULL);
  test_wait (p, i, c1, 2);
  /* queue 2: out = s0 after c0, then out[3:10] = 0.75 */
  i = test_add (p, 2, AMK_OPCODE_COPY, (gint[]) { out, s0 }, 2, "count", 32, NULL);
  test_wait (p, i, c0, 1);
  i = test_add (p, 2, AMK_OPCODE_FILL, (gint[]) { out }, 1, "offset", 3, "count", 7, NULL);
  g_assert_true (amk_program_set_param_float (p, i, "value", 0.75f, NULL));
  test_signal (p, i, c2, 3);
  /* queue 3: h += h, bf[1:] = bf[:15] + bf[1:], u8 = u8 + u8, all after the barrier */
  for (guint q = 0; q < 4; q++)
    test_add (p, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
  i = test_add (p, 3, AMK_OPCODE_ADD, (gint[]) { h, h, h }, 3, "count", 16, NULL);
  test_wait (p, i, c2, 3);
  test_add (p, 3, AMK_OPCODE_ADD, (gint[]) { bf, bf, bf }, 3, "dst_offset", 8, "b_offset", 1, "count", 7,
            NULL);
  test_add (p, 3, AMK_OPCODE_ADD, (gint[]) { u8, u8, u8 }, 3, "count", 16, NULL);
  test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_program_verify (p, NULL));
  return p;
}

static void
assert_programs_equal (AmkProgram *a, AmkProgram *b)
{
  g_assert_cmpuint (a->num_queues, ==, b->num_queues);
  g_assert_cmpuint (a->scratch_size, ==, b->scratch_size);
  g_assert_cmpuint (a->buffers->len, ==, b->buffers->len);
  for (guint i = 0; i < a->buffers->len; i++)
    {
      AmkBufferInfo *x = g_ptr_array_index (a->buffers, i), *y = g_ptr_array_index (b->buffers, i);
      g_assert_cmpstr (x->name, ==, y->name);
      g_assert_cmpint (x->dtype, ==, y->dtype);
      g_assert_cmpint (x->role, ==, y->role);
      g_assert_cmpuint (x->n_dims, ==, y->n_dims);
      g_assert_cmpmem (x->shape, x->n_dims * sizeof (gint64), y->shape, y->n_dims * sizeof (gint64));
      g_assert_cmpuint (x->n_elements, ==, y->n_elements);
      g_assert_cmpuint (x->size_bytes, ==, y->size_bytes);
      g_assert_cmpuint (x->arena_offset, ==, y->arena_offset);
      g_assert_true ((x->data == NULL) == (y->data == NULL));
      if (x->data != NULL)
        g_assert_true (g_bytes_equal (x->data, y->data));
    }
  g_assert_cmpuint (a->counter_names->len, ==, b->counter_names->len);
  for (guint i = 0; i < a->counter_names->len; i++)
    g_assert_cmpstr (g_ptr_array_index (a->counter_names, i), ==, g_ptr_array_index (b->counter_names, i));
  g_assert_cmpmem (a->instructions->data, a->instructions->len * sizeof (amk_instruction_t),
                   b->instructions->data, b->instructions->len * sizeof (amk_instruction_t));
  g_assert_cmpuint (a->queues->len, ==, b->queues->len);
  for (guint q = 0; q < a->queues->len; q++)
    {
      GArray *x = g_ptr_array_index (a->queues, q), *y = g_ptr_array_index (b->queues, q);
      g_assert_cmpmem (x->data, x->len * sizeof (gint32), y->data, y->len * sizeof (gint32));
    }
}

/* Runs `p` on the CPU with seed `seed`, inputs from `inputs` (or the defaults). Returns
 * every buffer's contents. */
static GPtrArray *
run_cpu (AmkProgram *p, guint64 seed, GPtrArray *inputs)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkCpuExecutor) ex = amk_cpu_executor_new (p, &error);
  GPtrArray *outs = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);

  g_assert_no_error (error);
  amk_cpu_executor_set_threads (ex, 1);   /* the seeded scheduler */
  amk_cpu_executor_set_seed (ex, seed);
  for (guint b = 0; inputs != NULL && b < inputs->len; b++)
    if (g_ptr_array_index (inputs, b) != NULL)
      g_assert_true (amk_cpu_executor_upload (ex, b, g_ptr_array_index (inputs, b), NULL));
  g_assert_true (amk_cpu_executor_run (ex, &error));
  g_assert_no_error (error);
  for (guint b = 0; b < amk_program_get_n_buffers (p); b++)
    g_ptr_array_add (outs, amk_cpu_executor_download (ex, b, NULL));
  return outs;
}

static void
test_round_trip (void)
{
  g_autoptr(AmkProgram) p = rich_program ();
  g_autoptr(GBytes) bytes = amk_program_serialize (p);
  g_autoptr(GBytes) again = NULL;
  g_autoptr(AmkProgram) loaded = NULL;
  g_autoptr(GPtrArray) inputs = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  GError *error = NULL;

  loaded = amk_program_new_from_bytes (bytes, &error);
  g_assert_no_error (error);
  g_assert_nonnull (loaded);
  g_assert_true (amk_program_get_verified (loaded));
  assert_programs_equal (p, loaded);
  g_assert_cmpuint (amk_program_get_num_queues (loaded), ==, 4);
  g_assert_cmpuint (amk_program_get_scratch_size (loaded), ==, amk_program_get_scratch_size (p));

  /* serializing again gives the same bytes */
  again = amk_program_serialize (loaded);
  g_assert_true (g_bytes_equal (bytes, again));

  /* the same results on the CPU, from fresh random inputs, for several seeds */
  for (guint b = 0; b < amk_program_get_n_buffers (p); b++)
    g_ptr_array_add (inputs, amk_program_get_buffer_role (p, b) == AMK_BUFFER_ROLE_INPUT
                             ? test_random_bytes (amk_program_get_buffer_size (p, b)) : NULL);
  for (guint64 seed = 1; seed < 6; seed++)
    {
      g_autoptr(GPtrArray) r1 = run_cpu (p, seed, inputs);
      g_autoptr(GPtrArray) r2 = run_cpu (loaded, seed * 7919, inputs);
      for (guint b = 0; b < r1->len; b++)
        g_assert_true (g_bytes_equal (g_ptr_array_index (r1, b), g_ptr_array_index (r2, b)));
    }

  /* an empty program round-trips too */
  {
    g_autoptr(AmkProgram) e = amk_program_new (1);
    g_autoptr(GBytes) eb = amk_program_serialize (e);
    g_autoptr(AmkProgram) el = amk_program_new_from_bytes (eb, &error);
    g_assert_no_error (error);
    assert_programs_equal (e, el);
  }
}

/* Loads bytes that must fail (or, when `may_load`, may also load); never crashes. A
 * refusal has the code `code`, or with -1 any code but NOT_VERIFIED. Runs whatever loads
 * on the CPU. */
static void
load_untrusted (const guint8 *data, gsize size, gboolean may_load, gint code, guint *n_loaded)
{
  g_autoptr(GBytes) bytes = g_bytes_new (data, size);
  g_autoptr(AmkProgram) p = NULL;
  GError *error = NULL;

  p = amk_program_new_from_bytes (bytes, &error);
  if (p == NULL)
    {
      if (code >= 0)
        g_assert_error (error, AMK_PROGRAM_ERROR, code);
      g_assert_nonnull (error);
      g_assert_true (error->domain == AMK_PROGRAM_ERROR);
      g_assert_cmpint (error->code, !=, AMK_PROGRAM_ERROR_NOT_VERIFIED);
      g_clear_error (&error);
      return;
    }
  g_assert_no_error (error);
  if (!may_load)
    g_error ("%" G_GSIZE_FORMAT " bytes loaded as an image", size);
  (*n_loaded)++;
  g_assert_true (amk_program_get_verified (p));
  if (p->scratch_size > 64 * 1024 * 1024)
    {
      /* see /amk/image/corrupt/huge-scratch: the executor aborts on such an arena */
      g_test_message ("a corrupted image with a %" G_GUINT64_FORMAT "-byte arena loaded", p->scratch_size);
      return;
    }
  {
    g_autoptr(AmkCpuExecutor) ex = amk_cpu_executor_new (p, &error);
    g_assert_no_error (error);
    /* a verified program runs to the end or aborts by TRAP; nothing else */
    if (!amk_cpu_executor_run (ex, &error))
      {
        g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
        g_clear_error (&error);
      }
  }
}

static void
test_corrupt_random (void)
{
  guint n_loaded = 0;
  GError *error = NULL;

  for (guint seed = 0; seed < 2000; seed++)
    {
      gsize size = g_test_rand_int_range (0, seed < 1000 ? 64 : 4096);
      g_autoptr(GBytes) bytes = test_random_bytes (size);
      g_autoptr(AmkProgram) p = amk_program_new_from_bytes (bytes, &error);

      g_assert_null (p);
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
      g_clear_error (&error);
    }
  (void) n_loaded;
}

static void
test_corrupt_empty (void)
{
  g_autoptr(GBytes) empty = g_bytes_new (NULL, 0);
  g_autoptr(GBytes) zeros = g_bytes_new_take (g_malloc0 (1000), 1000);
  g_autoptr(AmkProgram) p = NULL;
  GError *error = NULL;

  p = amk_program_new_from_bytes (empty, &error);
  g_assert_null (p);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
  g_clear_error (&error);

  p = amk_program_new_from_bytes (zeros, &error);
  g_assert_null (p);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
  g_clear_error (&error);
}

/* A small image: two queues, one wait, one signal, a FILL and a COPY, and a TRAP behind
 * a wait that never holds once a bit flips it free. */
static AmkProgram *
small_program (void)
{
  AmkProgram *p = amk_program_new (2);
  gint a, b, c, i;
  g_autoptr(GBytes) data = test_random_bytes (8 * 4);

  a = test_add_buffer (p, "a", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_INPUT);
  b = test_add_buffer (p, "b", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_SCRATCH);
  g_assert_true (amk_program_set_buffer_data (p, a, data, NULL));
  c = amk_program_add_counter (p, "c");
  i = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { b }, 1, "offset", 1, "count", 6, NULL);
  amk_program_set_param_float (p, i, "value", -2.5f, NULL);
  test_signal (p, i, c, 1);
  i = test_add (p, 1, AMK_OPCODE_COPY, (gint[]) { a, b }, 2, "count", 8, NULL);
  test_wait (p, i, c, 1);
  g_assert_true (amk_program_verify (p, NULL));
  return p;
}

static void
test_corrupt_truncation (void)
{
  g_autoptr(AmkProgram) p = small_program ();
  g_autoptr(GBytes) bytes = amk_program_serialize (p);
  gsize size = 0;
  const guint8 *data = g_bytes_get_data (bytes, &size);
  guint n_loaded = 0;

  g_test_message ("small image: %" G_GSIZE_FORMAT " bytes", size);
  for (gsize len = 0; len < size; len++)
    {
      /* a copy of exactly `len` bytes, so that a read past the end is a valgrind error */
      g_autofree guint8 *copy = g_memdup2 (data, len);
      load_untrusted (copy, len, FALSE, AMK_PROGRAM_ERROR_CORRUPT, &n_loaded);
    }
  /* and longer: trailing garbage */
  {
    g_autofree guint8 *longer = g_malloc (size + 8);
    memcpy (longer, data, size);
    memset (longer + size, 0xa5, 8);
    load_untrusted (longer, size + 8, TRUE, -1, &n_loaded);
  }
}

static void
test_corrupt_bit_flips (void)
{
  g_autoptr(AmkProgram) p = small_program ();
  g_autoptr(GBytes) bytes = amk_program_serialize (p);
  gsize size = 0;
  const guint8 *data = g_bytes_get_data (bytes, &size);
  g_autofree guint8 *copy = g_malloc (size);
  guint n_loaded = 0;

  for (gsize bit = 0; bit < size * 8; bit++)
    {
      memcpy (copy, data, size);
      copy[bit / 8] ^= (guint8) (1u << (bit % 8));
      load_untrusted (copy, size, TRUE, -1, &n_loaded);
    }
  /* whole bytes set to extremes */
  for (gsize at = 0; at < size; at++)
    for (guint v = 0; v < 3; v++)
      {
        memcpy (copy, data, size);
        copy[at] = v == 0 ? 0x00 : v == 1 ? 0xff : 0x80;
        load_untrusted (copy, size, TRUE, -1, &n_loaded);
      }
  g_test_message ("%u of %" G_GSIZE_FORMAT " flipped images still loaded", n_loaded, size * 8 + size * 3);
  g_assert_cmpuint (n_loaded, >, 0); /* flips inside float data, for one, are harmless */
}

/* The ABI version is the uint32 after "amk-image\0", at the next 4-byte boundary. */
static gsize
version_offset (const guint8 *data, gsize size)
{
  const char magic[] = "amk-image";

  g_assert_cmpuint (size, >, 16);
  g_assert_cmpmem (data, sizeof magic, magic, sizeof magic);
  return (sizeof magic + 3) & ~(gsize) 3;
}

static void
test_version (void)
{
  g_autoptr(AmkProgram) p = small_program ();
  g_autoptr(GBytes) bytes = amk_program_serialize (p);
  gsize size = 0;
  const guint8 *data = g_bytes_get_data (bytes, &size);
  g_autofree guint8 *copy = g_memdup2 (data, size);
  gsize at = version_offset (data, size);
  const guint32 versions[] = { 0, AMK_ABI_VERSION + 1, 2, 0xffffffffu, 0x01000000u };
  guint32 v;

  memcpy (&v, data + at, 4);
  g_assert_cmpuint (GUINT32_FROM_LE (v), ==, AMK_ABI_VERSION);

  for (guint i = 0; i < G_N_ELEMENTS (versions); i++)
    {
      g_autoptr(GBytes) patched = NULL;
      g_autoptr(AmkProgram) loaded = NULL;
      GError *error = NULL;
      g_autofree char *what = g_strdup_printf ("version %u", versions[i]);

      v = GUINT32_TO_LE (versions[i]);
      memcpy (copy + at, &v, 4);
      patched = g_bytes_new (copy, size);
      loaded = amk_program_new_from_bytes (patched, &error);
      g_assert_null (loaded);
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_VERSION);
      test_assert_message_has (error, what);
      g_clear_error (&error);
    }

  /* a wrong magic is CORRUPT, even with the right version */
  memcpy (copy, data, size);
  copy[3] = 'X';
  {
    g_autoptr(GBytes) patched = g_bytes_new (copy, size);
    GError *error = NULL;
    g_assert_null (amk_program_new_from_bytes (patched, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
    g_clear_error (&error);
  }

  /* the number of queues follows the version */
  {
    const guint32 queues[] = { 0, 65537, G_MAXUINT32 };
    for (guint i = 0; i < G_N_ELEMENTS (queues); i++)
      {
        g_autoptr(GBytes) patched = NULL;
        GError *error = NULL;
        memcpy (copy, data, size);
        v = GUINT32_TO_LE (queues[i]);
        memcpy (copy + at + 4, &v, 4);
        patched = g_bytes_new (copy, size);
        g_assert_null (amk_program_new_from_bytes (patched, &error));
        g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
        g_clear_error (&error);
      }
    memcpy (copy, data, size);
    v = GUINT32_TO_LE (3);
    memcpy (copy + at + 4, &v, 4);
    {
      g_autoptr(GBytes) patched = g_bytes_new (copy, size);
      GError *error = NULL;
      g_assert_null (amk_program_new_from_bytes (patched, &error));
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
      g_clear_error (&error);
    }
  }
}

/* ---- crafted images --------------------------------------------------------------- */

typedef struct {
  const char *name;
  guchar dtype, role;
  gint64 shape[2];
  gsize n_dims;
  guint64 offset;
  gssize data_size;      /* -1: no contents */
} CraftBuffer;

static GBytes *
craft (guint32 version, guint32 num_queues, guint64 scratch, const CraftBuffer *bufs, guint n_bufs,
       guint n_counters, gsize instruction_bytes, const amk_instruction_t *instructions,
       guint n_queue_lists, const gint32 *queue0, gsize queue0_len)
{
  GVariantBuilder b, c, q;
  g_autoptr(GVariant) v = NULL;
  g_autofree guint8 *raw = g_malloc0 (MAX (instruction_bytes, 1));

  if (instructions != NULL)
    memcpy (raw, instructions, instruction_bytes);
  g_variant_builder_init (&b, G_VARIANT_TYPE ("a(syyaxtmay)"));
  for (guint i = 0; i < n_bufs; i++)
    {
      GVariant *data = NULL;
      if (bufs[i].data_size >= 0)
        {
          g_autoptr(GBytes) d = test_random_bytes (bufs[i].data_size);
          data = g_variant_new_from_bytes (G_VARIANT_TYPE_BYTESTRING, d, TRUE);
        }
      g_variant_builder_add (&b, "(syy@axt@may)", bufs[i].name, bufs[i].dtype, bufs[i].role,
                             g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, bufs[i].shape,
                                                        bufs[i].n_dims, sizeof (gint64)),
                             bufs[i].offset, g_variant_new_maybe (G_VARIANT_TYPE_BYTESTRING, data));
    }
  g_variant_builder_init (&c, G_VARIANT_TYPE ("ams"));
  for (guint i = 0; i < n_counters; i++)
    g_variant_builder_add (&c, "ms", i % 2 ? NULL : "n");
  g_variant_builder_init (&q, G_VARIANT_TYPE ("aai"));
  for (guint i = 0; i < n_queue_lists; i++)
    g_variant_builder_add_value (&q, g_variant_new_fixed_array (G_VARIANT_TYPE_INT32, queue0,
                                                                i == 0 ? queue0_len : 0, sizeof (gint32)));
  v = g_variant_ref_sink (g_variant_new ("(suut@a(syyaxtmay)@ams@ay@aai)", "amk-image", version,
                                         num_queues, scratch, g_variant_builder_end (&b),
                                         g_variant_builder_end (&c),
                                         g_variant_new_fixed_array (G_VARIANT_TYPE_BYTE, raw,
                                                                    instruction_bytes, 1),
                                         g_variant_builder_end (&q)));
  g_assert_true (g_variant_is_of_type (v, G_VARIANT_TYPE (IMAGE_TYPE)));
  return g_variant_get_data_as_bytes (v);
}

static void
assert_craft_error (GBytes *bytes, gint code)
{
  g_autoptr(AmkProgram) p = NULL;
  GError *error = NULL;

  p = amk_program_new_from_bytes (bytes, &error);
  g_assert_null (p);
  g_assert_error (error, AMK_PROGRAM_ERROR, code);
  g_test_message ("%s", error->message);
  g_clear_error (&error);
}

static void
test_crafted (void)
{
  const CraftBuffer ok = { "a", AMK_DTYPE_F32, AMK_BUFFER_ROLE_INPUT, { 4 }, 1, 0, 16 };
  amk_instruction_t nop = test_raw (AMK_ABI_OP_NOP);
  const gint32 q0[] = { 0 };
  GBytes *bytes;

  /* the crafter itself makes loadable images */
  bytes = craft (AMK_ABI_VERSION, 2, 0, &ok, 1, 3, sizeof nop, &nop, 2, q0, 1);
  {
    GError *error = NULL;
    g_autoptr(AmkProgram) p = amk_program_new_from_bytes (bytes, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (amk_program_get_n_counters (p), ==, 3);
    g_assert_null (g_ptr_array_index (p->counter_names, 1));
  }
  g_bytes_unref (bytes);

#define CHECK(code, ...) \
  G_STMT_START { bytes = craft (__VA_ARGS__); assert_craft_error (bytes, code); g_bytes_unref (bytes); } G_STMT_END

  /* the instruction table is not a whole number of instructions */
  CHECK (AMK_PROGRAM_ERROR_CORRUPT, AMK_ABI_VERSION, 1, 0, &ok, 1, 0, 100, NULL, 1, NULL, 0);
  CHECK (AMK_PROGRAM_ERROR_CORRUPT, AMK_ABI_VERSION, 1, 0, &ok, 1, 0, sizeof nop - 1, &nop, 1, q0, 1);
  /* queue lists and queues disagree */
  CHECK (AMK_PROGRAM_ERROR_CORRUPT, AMK_ABI_VERSION, 2, 0, &ok, 1, 0, sizeof nop, &nop, 1, q0, 1);
  CHECK (AMK_PROGRAM_ERROR_CORRUPT, AMK_ABI_VERSION, 1, 0, &ok, 1, 0, sizeof nop, &nop, 3, q0, 1);
  /* an instruction in no queue, or a queue naming a missing one */
  CHECK (AMK_PROGRAM_ERROR_INVALID, AMK_ABI_VERSION, 1, 0, &ok, 1, 0, sizeof nop, &nop, 1, NULL, 0);
  CHECK (AMK_PROGRAM_ERROR_OUT_OF_RANGE, AMK_ABI_VERSION, 1, 0, &ok, 1, 0, 0, NULL, 1, q0, 1);
  /* queue count */
  CHECK (AMK_PROGRAM_ERROR_OUT_OF_RANGE, AMK_ABI_VERSION, 0, 0, &ok, 1, 0, 0, NULL, 0, NULL, 0);
  CHECK (AMK_PROGRAM_ERROR_VERSION, AMK_ABI_VERSION + 1, 1, 0, &ok, 1, 0, 0, NULL, 1, NULL, 0);

  /* bad buffers */
  {
    const CraftBuffer bad[][2] = {
      { ok, { "a", AMK_DTYPE_I32, AMK_BUFFER_ROLE_OUTPUT, { 2 }, 1, 0, -1 } },       /* duplicate */
      { ok, { "", AMK_DTYPE_I32, AMK_BUFFER_ROLE_OUTPUT, { 2 }, 1, 0, -1 } },        /* no name */
      { ok, { "b", 5, AMK_BUFFER_ROLE_OUTPUT, { 2 }, 1, 0, -1 } },                   /* dtype */
      { ok, { "b", 255, AMK_BUFFER_ROLE_OUTPUT, { 2 }, 1, 0, -1 } },
      { ok, { "b", AMK_DTYPE_U8, 5, { 2 }, 1, 0, -1 } },                             /* role */
      { ok, { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_OUTPUT, { 2 }, 1, 0, 3 } },         /* data size */
      { ok, { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_SCRATCH, { 2 }, 1, 0, 2 } },        /* scratch data */
      { ok, { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_SCRATCH, { 2 }, 1, 8, -1 } },       /* misaligned */
    };
    const gint codes[] = {
      AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_INVALID,
      AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_INVALID,
      AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_INVALID,
    };
    for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
      CHECK (codes[i], AMK_ABI_VERSION, 1, 4096, bad[i], 2, 0, 0, NULL, 1, NULL, 0);
  }
  {
    const CraftBuffer bad[][1] = {
      { { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_OUTPUT, { 2 }, 0, 0, -1 } },             /* no dims */
      { { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_OUTPUT, { 0 }, 1, 0, -1 } },             /* zero dim */
      { { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_OUTPUT, { -5 }, 1, 0, -1 } },
      { { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_OUTPUT, { 1 << 20, 1 << 20 }, 2, 0, -1 } },
      { { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_SCRATCH, { 300 }, 1, 0, -1 } },          /* arena */
      { { "b", AMK_DTYPE_U8, AMK_BUFFER_ROLE_SCRATCH, { 2 }, 1, G_MAXUINT64 - 255, -1 } },
    };
    for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
      CHECK (AMK_PROGRAM_ERROR_OUT_OF_RANGE, AMK_ABI_VERSION, 1, 256, bad[i], 1, 0, 0, NULL, 1, NULL, 0);
  }

  /* bad instructions */
  {
    amk_instruction_t ins[6];
    const gint codes[] = {
      AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_INVALID, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
      AMK_PROGRAM_ERROR_OUT_OF_RANGE, AMK_PROGRAM_ERROR_OUT_OF_RANGE, AMK_PROGRAM_ERROR_DEADLOCK,
    };
    for (guint i = 0; i < G_N_ELEMENTS (ins); i++)
      ins[i] = test_raw (AMK_ABI_OP_NOP);
    ins[0].opcode = 99;
    ins[1].reserved = 7;
    ins[2].n_waits = 9;
    ins[3].signal.counter = 5;
    ins[3].signal.amount = 1;
    ins[4].opcode = AMK_ABI_OP_FILL, ins[4].n_buffers = 1, ins[4].buffers[0] = 0, ins[4].params.fill.count = 5;
    ins[5].n_waits = 1, ins[5].waits[0].counter = 1, ins[5].waits[0].target = 1;
    for (guint i = 0; i < G_N_ELEMENTS (ins); i++)
      CHECK (codes[i], AMK_ABI_VERSION, 1, 0, &ok, 1, 2, sizeof ins[i], &ins[i], 1, q0, 1);
  }
#undef CHECK
}

/* An image that declares a huge scratch arena that its buffers do not need is refused
 * at load, so no executor ever tries to allocate it. */
static void
test_huge_scratch (void)
{
  const CraftBuffer ok = { "a", AMK_DTYPE_F32, AMK_BUFFER_ROLE_INPUT, { 4 }, 1, 0, 16 };
  g_autoptr(GBytes) bytes = craft (AMK_ABI_VERSION, 1, G_MAXUINT64 / 2, &ok, 1, 0, 0, NULL, 1, NULL, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkProgram) p = amk_program_new_from_bytes (bytes, &error);

  g_assert_null (p);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
}

static void
test_files (void)
{
  g_autoptr(AmkProgram) p = small_program ();
  g_autoptr(AmkProgram) loaded = NULL;
  g_autofree char *path = NULL;
  g_autofree char *missing = NULL;
  GError *error = NULL;
  gint fd;

  fd = g_file_open_tmp ("amk-test-XXXXXX.amk", &path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (fd, >=, 0);
  close (fd);

  g_assert_true (amk_program_save (p, path, &error));
  g_assert_no_error (error);
  loaded = amk_program_new_from_file (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (loaded);
  assert_programs_equal (p, loaded);
  g_clear_object (&loaded);

  /* garbage in the file */
  {
    g_autoptr(GBytes) junk = test_random_bytes (333);
    g_assert_true (g_file_set_contents (path, g_bytes_get_data (junk, NULL), 333, &error));
    loaded = amk_program_new_from_file (path, &error);
    g_assert_null (loaded);
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
    g_clear_error (&error);
  }
  /* an empty file */
  g_assert_true (g_file_set_contents (path, "", 0, &error));
  loaded = amk_program_new_from_file (path, &error);
  g_assert_null (loaded);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_CORRUPT);
  g_clear_error (&error);
  g_unlink (path);

  /* a missing file */
  loaded = amk_program_new_from_file (path, &error);
  g_assert_null (loaded);
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
  g_clear_error (&error);

  /* saving into a folder that does not exist */
  missing = g_build_filename (path, "no", "such", "dir.amk", NULL);
  g_assert_false (amk_program_save (p, missing, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
  g_clear_error (&error);

  /* a folder is not an image: mapping it fails (ENODEV, or EINVAL where the file system
   * gives a folder the size 0) */
  loaded = amk_program_new_from_file (g_get_tmp_dir (), &error);
  g_assert_null (loaded);
  g_assert_nonnull (error);
  g_assert_true (error->domain == G_FILE_ERROR);
  g_assert_true (error->code == G_FILE_ERROR_NODEV || error->code == G_FILE_ERROR_INVAL);
  g_clear_error (&error);
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/image/round-trip", test_round_trip);
  g_test_add_func ("/amk/image/corrupt/random", test_corrupt_random);
  g_test_add_func ("/amk/image/corrupt/empty", test_corrupt_empty);
  g_test_add_func ("/amk/image/corrupt/truncation", test_corrupt_truncation);
  g_test_add_func ("/amk/image/corrupt/bit-flips", test_corrupt_bit_flips);
  g_test_add_func ("/amk/image/version", test_version);
  g_test_add_func ("/amk/image/crafted", test_crafted);
  g_test_add_func ("/amk/image/corrupt/huge-scratch", test_huge_scratch);
  g_test_add_func ("/amk/image/files", test_files);

  return g_test_run ();
}

/* test-hf-model.c: Hugging Face checkpoints (amk-hf-model.c) on the CPU executor.
 *
 * tests/data/tiny-llama and tests/data/tiny-qwen3 are random-weight checkpoints written
 * by transformers (tools/make-random-checkpoint.py, the command is in each folder's
 * reference.json) with transformers' float32 logits of a greedy 8-token run. The step
 * built by amk_model_build_from_path() is fed the same tokens; its logits must match
 * norm-wise within bf16 tolerance and its argmax must be transformers' token (or tie
 * with it within that tolerance). Then copies of tiny-llama, rewritten (f32, f16,
 * sharded) or broken (config, index, tensors), check the loader's conversions and
 * errors.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include <glib/gstdio.h>
#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include "amk-model-loader-private.h"
#include "amk-model-builder-private.h"
#include "amk-executor-private.h"
#include "amk-model-readers-private.h"
#include "amk-safetensors-private.h"
#include "amk-dtype-private.h"
#include "amk-gguf-private.h"
#include "amk-test-generate.h"

#define REL_TOL 2e-2

typedef struct {
  JsonNode *root;
  gint32   *tokens;       /* fed one a step */
  gsize     n_tokens;
  gint32   *prompt_ids;
  gsize     n_prompt;
  gint32   *generated;
  gsize     n_generated;
  char     *prompt;
  float    *logits;       /* [n_tokens, vocab] */
  gsize     vocab;
  char     *model_file;   /* the model to load instead of the folder (bench/gguf-reference.py) */
} Reference;

static void
reference_free (Reference *r)
{
  g_clear_pointer (&r->root, json_node_unref);
  g_free (r->tokens);
  g_free (r->prompt_ids);
  g_free (r->generated);
  g_free (r->prompt);
  g_free (r->logits);
  g_free (r->model_file);
  g_free (r);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (Reference, reference_free)

static gint32 *
int_array (JsonObject *o, const char *name, gsize *n)
{
  JsonArray *a = json_object_get_array_member (o, name);
  gint32 *v;

  g_assert_nonnull (a);
  *n = json_array_get_length (a);
  v = g_new (gint32, MAX (*n, 1));
  for (gsize i = 0; i < *n; i++)
    v[i] = (gint32) json_array_get_int_element (a, i);
  return v;
}

/* A little-endian float32 C-order .npy of shape (rows, cols). */
static float *
load_npy (const char *path, gsize rows, gsize cols)
{
  g_autofree char *data = NULL;
  g_autofree char *header = NULL;
  g_autofree char *shape = g_strdup_printf ("'shape': (%zu, %zu)", rows, cols);
  g_autoptr(GError) error = NULL;
  gsize len, header_len, offset;
  float *values;

  g_assert_true (g_file_get_contents (path, &data, &len, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (len, >=, 10);
  g_assert_true (memcmp (data, "\x93NUMPY", 6) == 0);
  if (data[6] == 1)
    {
      header_len = (guint8) data[8] | ((gsize) (guint8) data[9] << 8);
      offset = 10;
    }
  else
    {
      header_len = (guint8) data[8] | ((gsize) (guint8) data[9] << 8) |
                   ((gsize) (guint8) data[10] << 16) | ((gsize) (guint8) data[11] << 24);
      offset = 12;
    }
  g_assert_cmpuint (offset + header_len, <=, len);
  header = g_strndup (data + offset, header_len);
  g_assert_nonnull (strstr (header, "'descr': '<f4'"));
  g_assert_nonnull (strstr (header, "'fortran_order': False"));
  g_assert_nonnull (strstr (header, shape));
  offset += header_len;
  g_assert_cmpuint (len - offset, ==, rows * cols * sizeof (float));
  values = g_new (float, rows * cols);
  memcpy (values, data + offset, rows * cols * sizeof (float));
  return values;
}

static char *
data_dir (const char *name)
{
  return g_test_build_filename (G_TEST_DIST, "data", name, NULL);
}

static Reference *
load_reference (const char *dir)
{
  g_autofree char *json_path = g_build_filename (dir, "reference.json", NULL);
  g_autofree char *npy_path = NULL;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  Reference *r = g_new0 (Reference, 1);
  JsonObject *o;
  JsonArray *shape;

  g_assert_true (json_parser_load_from_file (parser, json_path, &error));
  g_assert_no_error (error);
  r->root = json_node_ref (json_parser_get_root (parser));
  o = json_node_get_object (r->root);
  r->tokens = int_array (o, "tokens", &r->n_tokens);
  r->prompt_ids = int_array (o, "prompt_ids", &r->n_prompt);
  r->generated = int_array (o, "generated", &r->n_generated);
  r->prompt = g_strdup (json_object_get_string_member (o, "prompt"));
  r->model_file = g_strdup (json_object_get_string_member_with_default (o, "model_file", NULL));
  shape = json_object_get_array_member (o, "logits_shape");
  g_assert_cmpuint (json_array_get_int_element (shape, 0), ==, r->n_tokens);
  r->vocab = (gsize) json_array_get_int_element (shape, 1);
  npy_path = g_build_filename (dir, json_object_get_string_member (o, "logits_file"), NULL);
  r->logits = load_npy (npy_path, r->n_tokens, r->vocab);
  return r;
}

/* Feeds tokens[0..n) at positions 0..n) to the build on a launcher (which loads the
 * program) or, with none, a new CPU executor; returns the logits of every step
 * [n, vocab] and, in argmax, the step's token. */
static float *
run_steps (AmkModelBuild *build, AmkLauncher *launcher, const gint32 *tokens, gsize n,
           gint32 *argmax)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkCpuExecutor) ex = NULL;
  float *logits = g_new (float, n * build->vocab_size);

  if (launcher != NULL)
    g_assert_true (amk_launcher_load (launcher, build->program, &error));
  else
    ex = amk_cpu_executor_new (build->program, &error);
  g_assert_no_error (error);
  for (gsize t = 0; t < n; t++)
    {
      g_autoptr(GBytes) tok = g_bytes_new (&tokens[t], sizeof (gint32));
      g_autoptr(GBytes) pos = g_bytes_new (&(gint32) { (gint32) t }, sizeof (gint32));
      g_autoptr(GBytes) out = NULL;
      g_autoptr(GBytes) next = NULL;
      gsize size;
      const void *p;

      if (launcher != NULL)
        {
          g_assert_true (amk_launcher_upload (launcher, (guint) build->tokens, tok, &error));
          g_assert_true (amk_launcher_upload (launcher, (guint) build->pos, pos, &error));
          g_assert_true (amk_launcher_launch (launcher, NULL, &error));
          g_assert_no_error (error);
          out = amk_launcher_download (launcher, (guint) build->logits, &error);
          next = amk_launcher_download (launcher, (guint) build->tokens, &error);
        }
      else
        {
          g_assert_true (amk_cpu_executor_upload (ex, (guint) build->tokens, tok, &error));
          g_assert_true (amk_cpu_executor_upload (ex, (guint) build->pos, pos, &error));
          g_assert_true (amk_cpu_executor_run (ex, &error));
          g_assert_no_error (error);
          out = amk_cpu_executor_download (ex, (guint) build->logits, &error);
          next = amk_cpu_executor_download (ex, (guint) build->tokens, &error);
        }
      g_assert_no_error (error);
      p = g_bytes_get_data (out, &size);
      g_assert_cmpuint (size, ==, build->vocab_size * sizeof (float));
      memcpy (logits + t * build->vocab_size, p, size);
      argmax[t] = *(const gint32 *) g_bytes_get_data (next, NULL);
    }
  return logits;
}

/* Builds the checkpoint at `dir` (or the model file its reference.json names) as a model
 * loads it for the executor (quantized matrices kept where it runs their type) and checks
 * it against its reference.json: the tokenizer's ids, every step's logits (norm-wise
 * within REL_TOL) and argmax, and greedy generation. On `launcher` (GPU) when not NULL. */
static AmkModelBuild *
check_reference (const char *dir, AmkLauncher *launcher, guint n_queues)
{
  g_autoptr(Reference) ref = load_reference (dir);
  g_autoptr(AmkModelBuild) build = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  g_autofree gint32 *argmax = NULL;
  g_autofree float *logits = NULL;
  g_autofree char *name = g_path_get_basename (dir);
  gsize n_ids = 0;
  gboolean all_exact = TRUE;
  double worst = 0;
  gint64 t0 = g_get_monotonic_time (), t1;

  {
    const char *path = ref->model_file != NULL ? ref->model_file : dir;
    g_autoptr(AmkCpuExecutor) cpu = amk_cpu_executor_new_empty ();
    g_autoptr(AmkModelSpec) spec = amk_model_read_spec (path, &error);

    g_assert_no_error (error);
    build = amk_model_build_graph_keeping (spec, n_queues, (guint) ref->n_tokens + 16,
                                           amk_executor_block_dtypes (launcher != NULL ? AMK_EXECUTOR (launcher)
                                                                                       : AMK_EXECUTOR (cpu)),
                                           &error);
  }
  g_assert_no_error (error);
  g_assert_nonnull (build);
  t1 = g_get_monotonic_time ();
  g_assert_cmpuint (build->vocab_size, ==, ref->vocab);
  g_assert_cmpuint (build->weight_bytes, >, 0);
  g_assert_cmpint (amk_program_get_buffer_role (build->program, (guint) build->logits), ==,
                   AMK_BUFFER_ROLE_OUTPUT);

  /* amk's tokenizer reads tokenizer.json as transformers does */
  ids = amk_tokenizer_encode (build->tokenizer, ref->prompt, TRUE, &n_ids, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (ids, n_ids * sizeof (gint32), ref->prompt_ids, ref->n_prompt * sizeof (gint32));

  {
    JsonObject *o = json_node_get_object (ref->root);
    JsonArray *encodings = json_object_has_member (o, "encodings")
                             ? json_object_get_array_member (o, "encodings") : NULL;

    for (guint i = 0; encodings != NULL && i < json_array_get_length (encodings); i++)
      {
        JsonObject *e = json_array_get_object_element (encodings, i);
        g_autofree gint32 *want = NULL;
        g_autofree gint32 *got = NULL;
        gsize n_want, n_got;

        want = int_array (e, "ids", &n_want);
        got = amk_tokenizer_encode (build->tokenizer, json_object_get_string_member (e, "text"),
                                    TRUE, &n_got, &error);
        g_assert_no_error (error);
        g_assert_cmpmem (got, n_got * sizeof (gint32), want, n_want * sizeof (gint32));
      }
  }

  argmax = g_new (gint32, ref->n_tokens);
  logits = run_steps (build, launcher, ref->tokens, ref->n_tokens, argmax);
  for (gsize t = 0; t < ref->n_tokens; t++)
    {
      const float *want = ref->logits + t * ref->vocab;
      double err = test_rel_error (logits + t * ref->vocab, want, ref->vocab);
      gint32 expected = t + 1 < ref->n_tokens ? ref->tokens[t + 1]
                                              : ref->generated[ref->n_generated - 1];
      float max_abs = 0;

      worst = MAX (worst, err);
      if (err > REL_TOL)
        g_error ("%s step %zu: logits differ by %.4f (relative, norm-wise)", name, t, err);
      if (t + 1 < ref->n_prompt)
        continue;   /* transformers' prompt token is given, not predicted */
      for (gsize i = 0; i < ref->vocab; i++)
        max_abs = MAX (max_abs, fabsf (want[i]));
      if (argmax[t] != expected)
        {
          /* a near tie in transformers' logits: amk's pick must be within tolerance */
          all_exact = FALSE;
          g_assert_cmpint (argmax[t], >=, 0);
          g_assert_cmpint (argmax[t], <, (gint) ref->vocab);
          g_test_message ("%s step %zu: amk picks %d, transformers %d (%.5f vs %.5f)", name, t,
                          argmax[t], expected, want[argmax[t]], want[expected]);
          g_assert_cmpfloat (want[expected] - want[argmax[t]], <=, REL_TOL * max_abs);
        }
    }
  g_test_message ("%s: %s, %.1f MB of weights, built in %.2f s; %zu steps (%s) in %.2f s, "
                  "largest relative logits error %.2e", name, build->architecture,
                  build->weight_bytes / 1e6, (t1 - t0) / 1e6, ref->n_tokens,
                  launcher != NULL ? "GPU" : "CPU executor",
                  (g_get_monotonic_time () - t1) / 1e6, worst);

  /* greedy generation through the model API gives transformers' continuation */
  if (all_exact)
    {
      /* a model file's quantized matrices kept as stored, as the steps above ran them */
      g_autoptr(AmkModel) model = g_initable_new (AMK_TYPE_MODEL, NULL, &error, "path",
                                                  ref->model_file != NULL ? ref->model_file : dir,
                                                  "n-queues", n_queues, "context-length",
                                                  (guint) ref->n_tokens + 16, "keep-quantized",
                                                  ref->model_file != NULL, NULL);
      g_autoptr(GArray) generated = NULL;
      g_autofree char *text = NULL;

      g_assert_no_error (error);
      text = test_generate (model, AMK_EXECUTOR (launcher), ref->prompt, (guint) ref->n_generated,
                                             &generated, NULL, &error);

      g_assert_no_error (error);
      g_assert_nonnull (text);
      g_assert_cmpmem (generated->data, generated->len * sizeof (gint32),
                       ref->generated, generated->len * sizeof (gint32));
    }
  return g_steal_pointer (&build);
}

static void
check_tiny (const char *name, const char *arch, guint head_dim)
{
  g_autofree char *dir = data_dir (name);
  g_autoptr(AmkModelBuild) build = check_reference (dir, NULL, 4);

  g_assert_cmpstr (build->architecture, ==, arch);
  g_assert_cmpuint (build->head_dim, ==, head_dim);
  g_assert_cmpuint (build->n_heads, ==, 4);
  g_assert_cmpuint (build->n_kv_heads, ==, 2);
  g_assert_cmpuint (build->hidden, ==, 64);
  g_assert_cmpuint (build->ffn, ==, 128);
  g_assert_cmpuint (build->n_layers, ==, 2);
  g_assert_cmpint (build->eos_id, ==, 511);
  g_assert_cmpuint (build->n_eos_ids, ==, 1);
  g_assert_cmpint (build->eos_ids[0], ==, 511);
  g_assert_cmpint (build->bos_id, ==, g_str_equal (arch, "llama") ? 510 : -1);
}

static void
test_tiny_llama (void)
{
  check_tiny ("tiny-llama", "llama", 16);
}

static void
test_tiny_qwen3 (void)
{
  check_tiny ("tiny-qwen3", "qwen3", 32);
}

/* AMK_TEST_HF_CHECKPOINTS: folders (':'-separated) with a reference.json, e.g. made by
 * tools/make-random-checkpoint.py llama-3.2-1b DIR --reference; on the GPU when there
 * is one (AMK_TEST_HF_CPU=1: on the CPU executor). */
static void
test_env_checkpoints (void)
{
  const char *list = g_getenv ("AMK_TEST_HF_CHECKPOINTS");
  g_auto(GStrv) dirs = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  guint n_queues = 8;

  if (list == NULL || *list == '\0')
    {
      g_test_skip ("set AMK_TEST_HF_CHECKPOINTS to checkpoint folders with a reference.json");
      return;
    }
  if (g_getenv ("AMK_TEST_HF_CPU") == NULL && amk_launcher_get_device_count () > 0)
    {
      g_autoptr(GError) error = NULL;

      /* as amk generate: the launcher's own configuration and queue count */
      launcher = amk_launcher_new (0);
      n_queues = amk_executor_get_preferred_queues (AMK_EXECUTOR (launcher), &error);
      g_assert_no_error (error);
    }
  dirs = g_strsplit (list, ":", -1);
  for (guint i = 0; dirs[i] != NULL; i++)
    if (*dirs[i] != '\0')
      {
        g_autoptr(AmkModelBuild) build = check_reference (dirs[i], launcher, n_queues);
      }
}

/* Copies of a checkpoint, rewritten */

static char *
copy_checkpoint (const char *name)
{
  g_autofree char *src = data_dir (name);
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) d = NULL;
  char *dst = g_dir_make_tmp ("amk-hf-XXXXXX", &error);
  const char *file;

  g_assert_no_error (error);
  d = g_dir_open (src, 0, &error);
  g_assert_no_error (error);
  while ((file = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *from = g_build_filename (src, file, NULL);
      g_autofree char *to = g_build_filename (dst, file, NULL);
      g_autofree char *contents = NULL;
      gsize len;

      g_assert_true (g_file_get_contents (from, &contents, &len, &error));
      g_assert_true (g_file_set_contents (to, contents, (gssize) len, &error));
      g_assert_no_error (error);
    }
  return dst;
}

static void
remove_checkpoint (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *file;

  while (d != NULL && (file = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, file, NULL);
      g_remove (path);
    }
  g_rmdir (dir);
}

static void
write_file (const char *dir, const char *file, const char *contents, gssize len)
{
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (path, contents, len, &error));
  g_assert_no_error (error);
}

typedef struct {
  char    *name;
  char    *dtype;
  guint    n_dims;
  guint64  shape[2];
  GBytes  *data;
} StTensor;

static void
st_tensor_free (StTensor *t)
{
  g_free (t->name);
  g_free (t->dtype);
  g_bytes_unref (t->data);
  g_free (t);
}

/* The tensors of dir/model.safetensors, in file order. */
static GPtrArray *
read_tensors (const char *dir)
{
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkSafetensors) st = amk_safetensors_open (path, &error);
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) st_tensor_free);

  g_assert_no_error (error);
  for (gsize i = 0; i < amk_safetensors_get_n_tensors (st); i++)
    {
      const AmkSafetensorsTensor *t = amk_safetensors_get_tensor (st, i);
      StTensor *c = g_new0 (StTensor, 1);

      g_assert_cmpuint (t->n_dims, <=, 2);
      c->name = g_strdup (t->name);
      c->dtype = g_strdup (amk_safetensors_dtype_name (t->dtype));
      c->n_dims = t->n_dims;
      memcpy (c->shape, t->shape, t->n_dims * sizeof (guint64));
      c->data = g_bytes_new (t->data, t->n_bytes);
      g_ptr_array_add (out, c);
    }
  return out;
}

static StTensor *
find (GPtrArray *tensors, const char *name)
{
  for (guint i = 0; i < tensors->len; i++)
    if (g_str_equal (((StTensor *) g_ptr_array_index (tensors, i))->name, name))
      return g_ptr_array_index (tensors, i);
  g_assert_not_reached ();
}

/* Writes tensors [first, last) as a safetensors file. */
static void
write_tensors (const char *dir, const char *file, GPtrArray *tensors, guint first, guint last)
{
  g_autoptr(GString) header = g_string_new ("{");
  g_autoptr(GByteArray) out = g_byte_array_new ();
  guint64 offset = 0, len;

  for (guint i = first; i < last; i++)
    {
      StTensor *t = g_ptr_array_index (tensors, i);
      gsize size = g_bytes_get_size (t->data);

      g_string_append_printf (header, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i > first ? "," : "",
                              t->name, t->dtype);
      for (guint d = 0; d < t->n_dims; d++)
        g_string_append_printf (header, "%s%" G_GUINT64_FORMAT, d > 0 ? "," : "", t->shape[d]);
      g_string_append_printf (header, "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]}",
                              offset, offset + size);
      offset += size;
    }
  g_string_append_c (header, '}');
  while (header->len % 8 != 0)
    g_string_append_c (header, ' ');
  len = GUINT64_TO_LE ((guint64) header->len);
  g_byte_array_append (out, (const guint8 *) &len, 8);
  g_byte_array_append (out, (const guint8 *) header->str, header->len);
  for (guint i = first; i < last; i++)
    {
      StTensor *t = g_ptr_array_index (tensors, i);
      gsize size;
      const guint8 *p = g_bytes_get_data (t->data, &size);

      g_byte_array_append (out, p, (guint) size);
    }
  write_file (dir, file, (const char *) out->data, (gssize) out->len);
}

/* Every BF16 tensor rewritten as F32 (exactly) or F16 (rounded). */
static void
convert_tensors (GPtrArray *tensors, const char *dtype)
{
  for (guint i = 0; i < tensors->len; i++)
    {
      StTensor *t = g_ptr_array_index (tensors, i);
      gsize size;
      const guint16 *bf = g_bytes_get_data (t->data, &size);
      gsize n = size / 2;

      g_assert_cmpstr (t->dtype, ==, "BF16");
      if (g_str_equal (dtype, "F32"))
        {
          guint32 *f = g_new (guint32, n);
          for (gsize j = 0; j < n; j++)
            f[j] = GUINT32_TO_LE ((guint32) GUINT16_FROM_LE (bf[j]) << 16);
          g_bytes_unref (t->data);
          t->data = g_bytes_new_take (f, n * 4);
        }
      else
        {
          guint16 *h = g_new (guint16, n);
          for (gsize j = 0; j < n; j++)
            h[j] = GUINT16_TO_LE (amk_float_to_f16 (amk_bf16_to_float (GUINT16_FROM_LE (bf[j]))));
          g_bytes_unref (t->data);
          t->data = g_bytes_new_take (h, n * 2);
        }
      g_free (t->dtype);
      t->dtype = g_strdup (dtype);
    }
}

static AmkModelBuild *
build_ok (const char *dir)
{
  g_autoptr(GError) error = NULL;
  AmkModelBuild *build = amk_model_build_from_path (dir, 3, 32, &error);

  g_assert_no_error (error);
  g_assert_nonnull (build);
  return build;
}

/* The logits of the reference's tokens through the build at `dir`. */
static float *
logits_of (const char *dir, Reference *ref)
{
  g_autoptr(AmkModelBuild) build = build_ok (dir);
  g_autofree gint32 *argmax = g_new (gint32, ref->n_tokens);

  return run_steps (build, NULL, ref->tokens, ref->n_tokens, argmax);
}

static void
test_dtypes_and_shards (void)
{
  g_autofree char *orig = data_dir ("tiny-llama");
  g_autoptr(Reference) ref = load_reference (orig);
  g_autofree float *base = logits_of (orig, ref);
  const gsize n = ref->n_tokens * ref->vocab;

  /* f32: the same bf16 values, so the very same logits */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);
    g_autofree float *logits = NULL;

    convert_tensors (tensors, "F32");
    write_tensors (dir, "model.safetensors", tensors, 0, tensors->len);
    logits = logits_of (dir, ref);
    g_assert_cmpmem (logits, n * sizeof (float), base, n * sizeof (float));
    remove_checkpoint (dir);
  }
  /* f16: rounded differently, within tolerance of transformers */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);
    g_autofree float *logits = NULL;

    convert_tensors (tensors, "F16");
    write_tensors (dir, "model.safetensors", tensors, 0, tensors->len);
    logits = logits_of (dir, ref);
    g_assert_cmpfloat (test_rel_error (logits, ref->logits, n), <=, REL_TOL);
    remove_checkpoint (dir);
  }
  /* sharded: two files and an index, the same logits */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);
    g_autoptr(GString) index = g_string_new ("{\"metadata\":{},\"weight_map\":{");
    g_autofree char *single = g_build_filename (dir, "model.safetensors", NULL);
    g_autofree float *logits = NULL;
    guint half = tensors->len / 2;

    write_tensors (dir, "model-00001-of-00002.safetensors", tensors, 0, half);
    write_tensors (dir, "model-00002-of-00002.safetensors", tensors, half, tensors->len);
    for (guint i = 0; i < tensors->len; i++)
      g_string_append_printf (index, "%s\"%s\":\"model-0000%u-of-00002.safetensors\"",
                              i > 0 ? "," : "", ((StTensor *) g_ptr_array_index (tensors, i))->name,
                              i < half ? 1 : 2);
    g_string_append (index, "}}");
    write_file (dir, "model.safetensors.index.json", index->str, -1);
    g_remove (single);
    logits = logits_of (dir, ref);
    g_assert_cmpmem (logits, n * sizeof (float), base, n * sizeof (float));
    remove_checkpoint (dir);
  }
}

/* Errors */

/* Builds dir and checks the error's domain and code and that its message names every string in
 * `names` (NULL-terminated). */
static void
expect_error (const char *dir, GQuark domain, gint code, ...)
{
  g_autoptr(GError) error = NULL;
  AmkModelBuild *build = amk_model_build_from_path (dir, 2, 16, &error);
  const char *name;
  va_list args;

  g_assert_null (build);
  g_assert_error (error, domain, code);
  g_test_message ("%s", error->message);
  va_start (args, code);
  while ((name = va_arg (args, const char *)) != NULL)
    if (strstr (error->message, name) == NULL)
      g_error ("the message “%s” does not name “%s”", error->message, name);
  va_end (args);
}

/* Rewrites the JSON object in `dir`/`file` with `edit` (it gets the object and `data`). */
static void
edit_json (const char *dir, const char *file, void (*edit) (JsonObject *o, gconstpointer data),
           gconstpointer data)
{
  g_autofree char *path = g_build_filename (dir, file, NULL);
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(GError) error = NULL;

  g_assert_true (json_parser_load_from_file (parser, path, &error));
  edit (json_node_get_object (json_parser_get_root (parser)), data);
  json_generator_set_root (gen, json_parser_get_root (parser));
  g_assert_true (json_generator_to_file (gen, path, &error));
  g_assert_no_error (error);
}

static void
set_member (JsonObject *o, gconstpointer data)
{
  const char * const *member_value = data;
  g_autoptr(JsonParser) vp = json_parser_new ();

  if (member_value[1] == NULL)
    {
      json_object_remove_member (o, member_value[0]);
      return;
    }
  g_assert_true (json_parser_load_from_data (vp, member_value[1], -1, NULL));
  json_object_set_member (o, member_value[0], json_node_copy (json_parser_get_root (vp)));
}

/* A copy of tiny-llama whose config.json member `member` is set to the JSON `value`
 * (NULL: removed). */
static char *
copy_with_config (const char *member, const char *value)
{
  char *dir = copy_checkpoint ("tiny-llama");
  const char *member_value[] = { member, value };

  edit_json (dir, "config.json", set_member, member_value);
  return dir;
}

static void
test_error_config (void)
{
  /* truncated */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autofree char *path = g_build_filename (dir, "config.json", NULL);
    g_autofree char *contents = NULL;
    gsize len;

    g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
    write_file (dir, "config.json", contents, (gssize) len / 2);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "config.json", "JSON", NULL);
    write_file (dir, "config.json", "", 0);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "config.json", NULL);
    write_file (dir, "config.json", "[1, 2]", -1);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "config.json", NULL);
    {
      g_autofree char *deep = g_strnfill (100000, '[');
      write_file (dir, "config.json", deep, -1);
      expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "config.json", NULL);
    }
    g_remove (path);
    expect_error (dir, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "config.json", NULL);
    remove_checkpoint (dir);
  }
  /* unknown architecture */
  {
    g_autofree char *dir = copy_with_config ("architectures", "[\"GPT2LMHeadModel\"]");
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE, "config.json", "architectures", "GPT2LMHeadModel", NULL);
    remove_checkpoint (dir);
  }
  {
    g_autofree char *dir = copy_with_config ("architectures", NULL);
    g_autoptr(AmkModelBuild) build = build_ok (dir);   /* model_type "llama" is enough */

    g_assert_cmpstr (build->architecture, ==, "llama");
    remove_checkpoint (dir);
  }
  /* fields of the wrong type or range, unsupported features */
  {
    static const struct {
      const char *member, *value;
      gint code;
      const char *field;
    } cases[] = {
      { "hidden_size", "\"64\"", AMK_MODEL_ERROR_INVALID_METADATA, "hidden_size" },
      { "hidden_size", NULL, AMK_MODEL_ERROR_INVALID_METADATA, "hidden_size" },
      { "num_hidden_layers", "-2", AMK_MODEL_ERROR_INVALID_METADATA, "num_hidden_layers" },
      { "vocab_size", "4294967296", AMK_MODEL_ERROR_INVALID_METADATA, "vocab_size" },
      { "hidden_size", "64.5", AMK_MODEL_ERROR_INVALID_METADATA, "hidden_size" },
      { "num_key_value_heads", "3", AMK_MODEL_ERROR_INVALID_METADATA, "num_key_value_heads" },
      { "head_dim", "15", AMK_MODEL_ERROR_INVALID_METADATA, "head_dim" },
      { "rms_norm_eps", "\"small\"", AMK_MODEL_ERROR_INVALID_METADATA, "rms_norm_eps" },
      { "tie_word_embeddings", "1", AMK_MODEL_ERROR_INVALID_METADATA, "tie_word_embeddings" },
      { "hidden_act", "\"gelu\"", AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "hidden_act" },
      { "attention_bias", "true", AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "attention_bias" },
      { "quantization_config", "{\"quant_method\": \"gptq\"}", AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "quantization_config" },
      { "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, "rope_parameters.rope_type" },
      { "rope_parameters", "{\"rope_type\": \"llama3\", \"factor\": 8.0}", AMK_MODEL_ERROR_INVALID_METADATA, "rope_parameters.low_freq_factor" },
      { "rope_parameters", "[]", AMK_MODEL_ERROR_INVALID_METADATA, "rope_parameters" },
      { "eos_token_id", "512", AMK_MODEL_ERROR_INVALID_METADATA, "eos_token_id" },
      /* the tensors are 64 wide */
      { "hidden_size", "128", AMK_MODEL_ERROR_TENSOR_SHAPE, "model.embed_tokens.weight" },
      { "intermediate_size", "256", AMK_MODEL_ERROR_TENSOR_SHAPE, "model.layers.0.mlp.gate_proj.weight" },
    };

    for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
      {
        g_autofree char *dir = copy_with_config (cases[i].member, cases[i].value);
        expect_error (dir, AMK_MODEL_ERROR, cases[i].code, cases[i].field, NULL);
        remove_checkpoint (dir);
      }
  }
  /* transformers 4.x's spelling of the RoPE parameters gives the same model */
  {
    g_autofree char *dir = copy_with_config ("rope_parameters", NULL);   /* plain RoPE */
    g_autoptr(AmkModelBuild) plain = build_ok (dir);
    g_autofree char *dir2 = copy_with_config ("rope_parameters", NULL);
    g_autofree char *orig = data_dir ("tiny-llama");
    g_autoptr(Reference) ref = load_reference (orig);
    g_autofree float *base = logits_of (orig, ref);
    g_autofree float *v4 = NULL;
    g_autoptr(JsonParser) parser = json_parser_new ();
    g_autoptr(JsonGenerator) gen = json_generator_new ();
    g_autofree char *path2 = g_build_filename (dir2, "config.json", NULL);
    JsonObject *o;

    g_assert_true (json_parser_load_from_file (parser, path2, NULL));
    o = json_node_get_object (json_parser_get_root (parser));
    json_object_set_double_member (o, "rope_theta", 10000.0);
    {
      JsonObject *scaling = json_object_new ();
      json_object_set_string_member (scaling, "rope_type", "llama3");
      json_object_set_double_member (scaling, "factor", 8.0);
      json_object_set_double_member (scaling, "low_freq_factor", 1.0);
      json_object_set_double_member (scaling, "high_freq_factor", 4.0);
      json_object_set_int_member (scaling, "original_max_position_embeddings", 64);
      json_object_set_object_member (o, "rope_scaling", scaling);
    }
    json_generator_set_root (gen, json_parser_get_root (parser));
    g_assert_true (json_generator_to_file (gen, path2, NULL));
    v4 = logits_of (dir2, ref);
    g_assert_cmpmem (v4, ref->n_tokens * ref->vocab * sizeof (float),
                     base, ref->n_tokens * ref->vocab * sizeof (float));
    remove_checkpoint (dir);
    remove_checkpoint (dir2);
  }
}

static void
test_error_tensors (void)
{
  /* a missing tensor */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);

    g_ptr_array_remove (tensors, find (tensors, "model.layers.1.mlp.up_proj.weight"));
    write_tensors (dir, "model.safetensors", tensors, 0, tensors->len);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_MISSING_TENSOR, "model.layers.1.mlp.up_proj.weight", NULL);
    remove_checkpoint (dir);
  }
  /* untied embeddings without lm_head.weight */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);

    g_ptr_array_remove (tensors, find (tensors, "lm_head.weight"));
    write_tensors (dir, "model.safetensors", tensors, 0, tensors->len);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_MISSING_TENSOR, "lm_head.weight", NULL);
    remove_checkpoint (dir);
  }
  /* a wrong shape (the same bytes) */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);
    StTensor *t = find (tensors, "model.layers.0.self_attn.k_proj.weight");
    guint64 rows = t->shape[0];

    t->shape[0] = t->shape[1];
    t->shape[1] = rows;
    write_tensors (dir, "model.safetensors", tensors, 0, tensors->len);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE, "model.layers.0.self_attn.k_proj.weight",
                  "model.safetensors", "[64, 32]", "[32, 64]", NULL);
    remove_checkpoint (dir);
  }
  /* a wrong dtype (the same bytes) */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autoptr(GPtrArray) tensors = read_tensors (dir);
    StTensor *t = find (tensors, "model.norm.weight");

    g_free (t->dtype);
    t->dtype = g_strdup ("I16");
    write_tensors (dir, "model.safetensors", tensors, 0, tensors->len);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, "model.norm.weight", "I16", NULL);
    remove_checkpoint (dir);
  }
  /* a truncated weights file */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
    g_autofree char *contents = NULL;
    gsize len;

    g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
    write_file (dir, "model.safetensors", contents, (gssize) len - 100);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "model.safetensors", NULL);
    g_remove (path);
    expect_error (dir, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "model.safetensors", NULL);
    remove_checkpoint (dir);
  }
  /* a corrupt index */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");

    write_file (dir, "model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": ", -1);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "model.safetensors.index.json", NULL);
    write_file (dir, "model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": \"../x\"}}", -1);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT, "model.safetensors.index.json", "model.norm.weight", NULL);
    write_file (dir, "model.safetensors.index.json", "{\"weight_map\": {\"model.norm.weight\": \"gone.safetensors\"}}", -1);
    expect_error (dir, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "gone.safetensors", NULL);
    remove_checkpoint (dir);
  }
  /* a missing or broken tokenizer */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");
    g_autofree char *path = g_build_filename (dir, "tokenizer.json", NULL);

    write_file (dir, "tokenizer.json", "{\"model\": ", -1);
    expect_error (dir, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_JSON, "tokenizer.json", NULL);
    g_remove (path);
    expect_error (dir, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "tokenizer.json", NULL);
    remove_checkpoint (dir);
  }
  /* a broken optional file is an error too */
  {
    g_autofree char *dir = copy_checkpoint ("tiny-llama");

    write_file (dir, "generation_config.json", "{\"eos_token_id\": [1, \"x\"]}", -1);
    expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA, "generation_config.json", "eos_token_id", NULL);
    write_file (dir, "generation_config.json", "{\"eos_token_id\": [3, 4]}", -1);
    {
      g_autoptr(AmkModelBuild) build = build_ok (dir);

      /* tokenizer_config.json's eos_token comes first, then the others */
      g_assert_cmpuint (build->n_eos_ids, ==, 3);
      g_assert_cmpint (build->eos_id, ==, 511);
      g_assert_cmpint (build->eos_ids[1], ==, 3);
      g_assert_cmpint (build->eos_ids[2], ==, 4);
    }
    remove_checkpoint (dir);
  }
}

/* The same models as GGUF files (llama.cpp's names, q/k rows of llama permuted as its
 * converter does): the GGUF loader must give the very same logits. */

static void
put_u32 (GByteArray *b, guint32 v)
{
  v = GUINT32_TO_LE (v);
  g_byte_array_append (b, (const guint8 *) &v, 4);
}

static void
put_u64 (GByteArray *b, guint64 v)
{
  v = GUINT64_TO_LE (v);
  g_byte_array_append (b, (const guint8 *) &v, 8);
}

static void
put_str (GByteArray *b, const char *s)
{
  put_u64 (b, strlen (s));
  g_byte_array_append (b, (const guint8 *) s, (guint) strlen (s));
}

static void
kv_u32 (GByteArray *b, guint *n_kv, const char *key, guint32 v)
{
  put_str (b, key);
  put_u32 (b, AMK_GGUF_TYPE_UINT32);
  put_u32 (b, v);
  (*n_kv)++;
}

static void
kv_f32 (GByteArray *b, guint *n_kv, const char *key, float v)
{
  guint32 u;

  memcpy (&u, &v, 4);
  put_str (b, key);
  put_u32 (b, AMK_GGUF_TYPE_FLOAT32);
  put_u32 (b, u);
  (*n_kv)++;
}

static void
kv_str (GByteArray *b, guint *n_kv, const char *key, const char *v)
{
  put_str (b, key);
  put_u32 (b, AMK_GGUF_TYPE_STRING);
  put_str (b, v);
  (*n_kv)++;
}

static void
kv_strv (GByteArray *b, guint *n_kv, const char *key, GPtrArray *v)
{
  put_str (b, key);
  put_u32 (b, AMK_GGUF_TYPE_ARRAY);
  put_u32 (b, AMK_GGUF_TYPE_STRING);
  put_u64 (b, v->len);
  for (guint i = 0; i < v->len; i++)
    put_str (b, g_ptr_array_index (v, i));
  (*n_kv)++;
}

static void
kv_i32v (GByteArray *b, guint *n_kv, const char *key, GArray *v)
{
  put_str (b, key);
  put_u32 (b, AMK_GGUF_TYPE_ARRAY);
  put_u32 (b, AMK_GGUF_TYPE_INT32);
  put_u64 (b, v->len);
  for (guint i = 0; i < v->len; i++)
    put_u32 (b, (guint32) g_array_index (v, gint32, i));
  (*n_kv)++;
}

/* llama.cpp's HF name of a GGUF tensor */
static char *
gguf_name (const char *hf)
{
  static const char * const map[][2] = {
    { "input_layernorm.weight", "attn_norm.weight" },
    { "self_attn.q_proj.weight", "attn_q.weight" },
    { "self_attn.k_proj.weight", "attn_k.weight" },
    { "self_attn.v_proj.weight", "attn_v.weight" },
    { "self_attn.o_proj.weight", "attn_output.weight" },
    { "self_attn.q_norm.weight", "attn_q_norm.weight" },
    { "self_attn.k_norm.weight", "attn_k_norm.weight" },
    { "post_attention_layernorm.weight", "ffn_norm.weight" },
    { "mlp.gate_proj.weight", "ffn_gate.weight" },
    { "mlp.up_proj.weight", "ffn_up.weight" },
    { "mlp.down_proj.weight", "ffn_down.weight" },
  };
  guint layer;
  char rest[128];

  if (g_str_equal (hf, "model.embed_tokens.weight"))
    return g_strdup ("token_embd.weight");
  if (g_str_equal (hf, "model.norm.weight"))
    return g_strdup ("output_norm.weight");
  if (g_str_equal (hf, "lm_head.weight"))
    return g_strdup ("output.weight");
  g_assert_cmpint (sscanf (hf, "model.layers.%u.%127s", &layer, rest), ==, 2);
  for (guint i = 0; i < G_N_ELEMENTS (map); i++)
    if (g_str_equal (rest, map[i][0]))
      return g_strdup_printf ("blk.%u.%s", layer, map[i][1]);
  g_assert_not_reached ();
}

/* convert_hf_to_gguf.py's permute: within each head, the rows of the two halves
 * interleaved. */
static GBytes *
permute_rows (GBytes *data, guint64 rows, guint64 cols, guint n_heads)
{
  gsize size;
  const guint16 *in = g_bytes_get_data (data, &size);
  guint16 *out = g_new (guint16, rows * cols);
  const guint64 hd = rows / n_heads;

  for (guint64 h = 0; h < n_heads; h++)
    for (guint64 i = 0; i < hd / 2; i++)
      for (guint64 j = 0; j < 2; j++)
        memcpy (out + (h * hd + 2 * i + j) * cols, in + (h * hd + j * (hd / 2) + i) * cols,
                cols * sizeof (guint16));
  return g_bytes_new_take (out, size);
}

/* convert_hf_to_gguf.py's rope_freqs table of Llama-3 RoPE scaling (LlamaModel's
 * generate_extra_tensors): the divisor of each inverse frequency, as little-endian F32
 * bytes of head_dim / 2 values. */
static GBytes *
rope_freqs_table (JsonObject *rope, guint head_dim)
{
  const double theta = json_object_get_double_member (rope, "rope_theta");
  const double factor = json_object_get_double_member (rope, "factor");
  const double low = json_object_get_double_member (rope, "low_freq_factor");
  const double high = json_object_get_double_member (rope, "high_freq_factor");
  const double old_ctx = (double) json_object_get_int_member (rope, "original_max_position_embeddings");
  g_autoptr(GByteArray) table = g_byte_array_new ();

  for (guint i = 0; i < head_dim / 2; i++)
    {
      const float freq = (float) (1.0 / pow (theta, (double) (2 * i) / head_dim));
      const double wavelen = 2 * G_PI / freq;
      float divisor;
      guint32 bits;

      if (wavelen < old_ctx / high)
        divisor = 1.0f;
      else if (wavelen > old_ctx / low)
        divisor = (float) factor;
      else
        {
          const double smooth = (old_ctx / wavelen - low) / (high - low);
          divisor = (float) (1.0 / ((1.0 - smooth) / factor + smooth));
        }
      memcpy (&bits, &divisor, sizeof bits);
      put_u32 (table, bits);
    }
  return g_byte_array_free_to_bytes (g_steal_pointer (&table));
}

/* Writes dir/model.gguf from the folder's safetensors, config and tokenizer.json. A
 * llama3 rope_parameters gives the rope_freqs table of the converter and, with
 * `rope_keys`, the keys rope.scaling.factor and rope.scaling.original_context_length
 * (which the converter does not write). */
static char *
write_gguf (const char *dir, const char *arch, gboolean rope_keys)
{
  g_autoptr(GPtrArray) tensors = read_tensors (dir);
  g_autofree char *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *tok_path = g_build_filename (dir, "tokenizer.json", NULL);
  g_autoptr(JsonParser) config = json_parser_new ();
  g_autoptr(JsonParser) tokenizer = json_parser_new ();
  g_autoptr(GByteArray) kv = g_byte_array_new ();
  g_autoptr(GByteArray) info = g_byte_array_new ();
  g_autoptr(GByteArray) data = g_byte_array_new ();
  g_autoptr(GByteArray) file = g_byte_array_new ();
  g_autoptr(GPtrArray) tokens = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) merges = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GArray) types = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GError) error = NULL;
  const gboolean llama = g_str_equal (arch, "llama");
  g_autoptr(GBytes) rope_freqs = NULL;
  JsonObject *c, *model, *vocab, *rope = NULL;
  JsonArray *added, *merge_list;
  guint n_kv = 0, n_heads, n_kv_heads, vocab_size, n_tensors;
  char key[128];
  JsonObjectIter iter;
  const char *member;
  JsonNode *node;

  g_assert_true (json_parser_load_from_file (config, config_path, &error));
  g_assert_true (json_parser_load_from_file (tokenizer, tok_path, &error));
  g_assert_no_error (error);
  c = json_node_get_object (json_parser_get_root (config));
  n_heads = (guint) json_object_get_int_member (c, "num_attention_heads");
  n_kv_heads = (guint) json_object_get_int_member (c, "num_key_value_heads");
  vocab_size = (guint) json_object_get_int_member (c, "vocab_size");

  kv_str (kv, &n_kv, "general.architecture", arch);
#define ARCH_KEY(k) (g_snprintf (key, sizeof key, "%s.%s", arch, k), key)
  kv_u32 (kv, &n_kv, ARCH_KEY ("block_count"), (guint32) json_object_get_int_member (c, "num_hidden_layers"));
  kv_u32 (kv, &n_kv, ARCH_KEY ("embedding_length"), (guint32) json_object_get_int_member (c, "hidden_size"));
  kv_u32 (kv, &n_kv, ARCH_KEY ("feed_forward_length"), (guint32) json_object_get_int_member (c, "intermediate_size"));
  kv_u32 (kv, &n_kv, ARCH_KEY ("attention.head_count"), n_heads);
  kv_u32 (kv, &n_kv, ARCH_KEY ("attention.head_count_kv"), n_kv_heads);
  kv_u32 (kv, &n_kv, ARCH_KEY ("attention.key_length"), (guint32) json_object_get_int_member (c, "head_dim"));
  kv_f32 (kv, &n_kv, ARCH_KEY ("rope.freq_base"),
          json_object_has_member (c, "rope_parameters")
            ? (float) json_object_get_double_member (json_object_get_object_member (c, "rope_parameters"), "rope_theta")
            : 10000.0f);
  kv_f32 (kv, &n_kv, ARCH_KEY ("attention.layer_norm_rms_epsilon"),
          (float) json_object_get_double_member (c, "rms_norm_eps"));
  if (json_object_has_member (c, "rope_parameters"))
    rope = json_object_get_object_member (c, "rope_parameters");
  if (rope != NULL && g_strcmp0 (json_object_get_string_member_with_default (rope, "rope_type", NULL),
                                 "llama3") == 0)
    {
      rope_freqs = rope_freqs_table (rope, (guint) json_object_get_int_member (c, "head_dim"));
      if (rope_keys)
        {
          kv_f32 (kv, &n_kv, ARCH_KEY ("rope.scaling.factor"),
                  (float) json_object_get_double_member (rope, "factor"));
          kv_u32 (kv, &n_kv, ARCH_KEY ("rope.scaling.original_context_length"),
                  (guint32) json_object_get_int_member (rope, "original_max_position_embeddings"));
        }
    }
#undef ARCH_KEY

  /* the vocabulary by id: the BPE's, then the added (special) tokens */
  model = json_object_get_object_member (json_node_get_object (json_parser_get_root (tokenizer)), "model");
  vocab = json_object_get_object_member (model, "vocab");
  g_ptr_array_set_size (tokens, (gint) vocab_size);
  g_array_set_size (types, vocab_size);
  json_object_iter_init (&iter, vocab);
  while (json_object_iter_next (&iter, &member, &node))
    {
      gint64 id = json_node_get_int (node);
      g_ptr_array_index (tokens, id) = g_strdup (member);
      g_array_index (types, gint32, id) = 1;
    }
  added = json_object_get_array_member (json_node_get_object (json_parser_get_root (tokenizer)), "added_tokens");
  for (guint i = 0; i < json_array_get_length (added); i++)
    {
      JsonObject *a = json_array_get_object_element (added, i);
      gint64 id = json_object_get_int_member (a, "id");

      g_free (g_ptr_array_index (tokens, id));
      g_ptr_array_index (tokens, id) = g_strdup (json_object_get_string_member (a, "content"));
      g_array_index (types, gint32, id) = 3;
    }
  for (guint i = 0; i < vocab_size; i++)
    g_assert_nonnull (g_ptr_array_index (tokens, i));
  merge_list = json_object_get_array_member (model, "merges");
  for (guint i = 0; i < json_array_get_length (merge_list); i++)
    {
      JsonNode *m = json_array_get_element (merge_list, i);

      if (JSON_NODE_HOLDS_ARRAY (m))
        g_ptr_array_add (merges, g_strdup_printf ("%s %s",
                                                  json_array_get_string_element (json_node_get_array (m), 0),
                                                  json_array_get_string_element (json_node_get_array (m), 1)));
      else
        g_ptr_array_add (merges, g_strdup (json_node_get_string (m)));
    }
  kv_str (kv, &n_kv, "tokenizer.ggml.model", "gpt2");
  kv_str (kv, &n_kv, "tokenizer.ggml.pre", llama ? "llama-bpe" : "qwen2");
  kv_strv (kv, &n_kv, "tokenizer.ggml.tokens", tokens);
  kv_strv (kv, &n_kv, "tokenizer.ggml.merges", merges);
  kv_i32v (kv, &n_kv, "tokenizer.ggml.token_type", types);
  kv_u32 (kv, &n_kv, "tokenizer.ggml.eos_token_id", 511);
  if (llama)
    kv_u32 (kv, &n_kv, "tokenizer.ggml.bos_token_id", 510);

  /* the tensors: bf16, ggml's dimension order (fastest first), 32-byte aligned */
  for (guint i = 0; i < tensors->len; i++)
    {
      StTensor *t = g_ptr_array_index (tensors, i);
      g_autofree char *name = gguf_name (t->name);
      g_autoptr(GBytes) bytes = g_bytes_ref (t->data);
      gsize size;
      const guint8 *p;

      if (llama && g_str_has_suffix (name, "attn_q.weight"))
        {
          g_bytes_unref (bytes);
          bytes = permute_rows (t->data, t->shape[0], t->shape[1], n_heads);
        }
      else if (llama && g_str_has_suffix (name, "attn_k.weight"))
        {
          g_bytes_unref (bytes);
          bytes = permute_rows (t->data, t->shape[0], t->shape[1], n_kv_heads);
        }
      put_str (info, name);
      put_u32 (info, t->n_dims);
      for (guint d = t->n_dims; d > 0; d--)
        put_u64 (info, t->shape[d - 1]);
      put_u32 (info, AMK_GGML_TYPE_BF16);
      put_u64 (info, data->len);
      p = g_bytes_get_data (bytes, &size);
      g_byte_array_append (data, p, (guint) size);
      while (data->len % 32 != 0)
        g_byte_array_append (data, (const guint8 *) "", 1);
    }
  n_tensors = tensors->len;
  if (rope_freqs != NULL)
    {
      put_str (info, "rope_freqs.weight");
      put_u32 (info, 1);
      put_u64 (info, g_bytes_get_size (rope_freqs) / sizeof (float));
      put_u32 (info, AMK_GGML_TYPE_F32);
      put_u64 (info, data->len);
      g_byte_array_append (data, g_bytes_get_data (rope_freqs, NULL), (guint) g_bytes_get_size (rope_freqs));
      n_tensors++;
    }

  g_byte_array_append (file, (const guint8 *) "GGUF", 4);
  put_u32 (file, 3);
  put_u64 (file, n_tensors);
  put_u64 (file, n_kv);
  g_byte_array_append (file, kv->data, kv->len);
  g_byte_array_append (file, info->data, info->len);
  while (file->len % 32 != 0)
    g_byte_array_append (file, (const guint8 *) "", 1);
  g_byte_array_append (file, data->data, data->len);
  write_file (dir, "model.gguf", (const char *) file->data, (gssize) file->len);
  return g_build_filename (dir, "model.gguf", NULL);
}

static void
check_gguf (const char *name, const char *arch)
{
  g_autofree char *orig = data_dir (name);
  g_autoptr(Reference) ref = load_reference (orig);
  /* plain RoPE here; the Llama-3 scaling's rope_freqs table in test_gguf_llama3_rope */
  g_autofree char *dir = g_str_equal (arch, "llama") ? copy_with_config ("rope_parameters", NULL)
                                                     : copy_checkpoint (name);
  g_autofree char *gguf = write_gguf (dir, arch, FALSE);
  g_autofree float *hf = logits_of (dir, ref);
  g_autofree float *from_gguf = logits_of (gguf, ref);
  g_autoptr(AmkModelBuild) build = build_ok (gguf);
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  gsize n_ids;

  g_assert_cmpstr (build->architecture, ==, arch);
  g_assert_cmpint (build->eos_id, ==, 511);
  g_assert_cmpmem (from_gguf, ref->n_tokens * ref->vocab * sizeof (float),
                   hf, ref->n_tokens * ref->vocab * sizeof (float));
  ids = amk_tokenizer_encode (build->tokenizer, ref->prompt, TRUE, &n_ids, &error);
  g_assert_no_error (error);
  if (g_str_equal (arch, "qwen3"))   /* llama's BOS comes from the template, not in GGUF */
    g_assert_cmpmem (ids, n_ids * sizeof (gint32), ref->prompt_ids, ref->n_prompt * sizeof (gint32));
  remove_checkpoint (dir);
}

static void
test_gguf_llama (void)
{
  check_gguf ("tiny-llama", "llama");
}

static void
test_gguf_qwen3 (void)
{
  check_gguf ("tiny-qwen3", "qwen3");
}

/* A llama GGUF with the rope_freqs table of the converter: the loader finds the Llama-3
 * scaling parameters that reproduce the table, and its logits are those of the
 * checkpoint folder with the same rope_parameters, to the bit. */
static void
test_gguf_llama3_rope (void)
{
  static const struct {
    const char *rope;       /* config.json's rope_parameters; NULL: tiny-llama's own */
    gboolean    keys;       /* with the rope.scaling keys */
    gint        code;       /* 0: loads */
  } cases[] = {
    /* Llama 3.1 and 3.2, from the table alone */
    { "{\"rope_type\": \"llama3\", \"rope_theta\": 10000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, "
      "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", FALSE, 0 },
    { "{\"rope_type\": \"llama3\", \"rope_theta\": 10000.0, \"factor\": 32.0, \"low_freq_factor\": 1.0, "
      "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", FALSE, 0 },
    /* tiny-llama's (factor 8, original context 64): from the keys, unknown without */
    { NULL, TRUE, 0 },
    { NULL, FALSE, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE },
    /* other frequency factors: no key says so */
    { "{\"rope_type\": \"llama3\", \"rope_theta\": 10000.0, \"factor\": 8.0, \"low_freq_factor\": 2.0, "
      "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", TRUE, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE },
  };
  g_autofree char *orig = data_dir ("tiny-llama");
  g_autoptr(Reference) ref = load_reference (orig);
  g_autofree char *plain_dir = copy_with_config ("rope_parameters", NULL);
  g_autofree float *plain = logits_of (plain_dir, ref);
  const gsize size = ref->n_tokens * ref->vocab * sizeof (float);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *dir = cases[i].rope != NULL ? copy_with_config ("rope_parameters", cases[i].rope)
                                                   : copy_checkpoint ("tiny-llama");
      g_autofree char *gguf = write_gguf (dir, "llama", cases[i].keys);
      g_autofree float *hf = logits_of (dir, ref);

      /* (the scaling makes a difference in these few positions) */
      g_assert_true (memcmp (hf, plain, size) != 0);
      if (cases[i].code == 0)
        {
          g_autofree float *from_gguf = logits_of (gguf, ref);

          g_assert_cmpmem (from_gguf, size, hf, size);
        }
      else
        expect_error (gguf, AMK_MODEL_ERROR, cases[i].code, "model.gguf", "rope_freqs.weight", "Llama 3", NULL);
      remove_checkpoint (dir);
    }
  remove_checkpoint (plain_dir);
}

/* Drops the two added tokens of a tiny-llama copy's tokenizer.json (and the
 * post-processor that names one): 510 pieces for an embedding of 512 rows, as in
 * checkpoints whose vocabulary is padded. */
static void
drop_added_tokens (JsonObject *o, gconstpointer data)
{
  json_object_set_array_member (o, "added_tokens", json_array_new ());
  json_object_set_null_member (o, "post_processor");   /* it adds BOS */
}

/* BOS/EOS ids inside vocab_size but without a piece in the tokenizer */
static void
test_error_special_ids (void)
{
  static const struct { const char *eos, *file, *field, *id; } cases[] = {
    { NULL, "generation_config.json", "eos_token_id", "511" },   /* read first */
    { "[2, 511]", "config.json", "eos_token_id", "511" },
    { "2", "config.json", "bos_token_id", "510" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *dir = copy_with_config ("eos_token_id", cases[i].eos != NULL ? cases[i].eos : "511");

      edit_json (dir, "tokenizer.json", drop_added_tokens, NULL);
      if (cases[i].eos != NULL)
        write_file (dir, "generation_config.json", "{}", -1);
      expect_error (dir, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                    cases[i].file, cases[i].field, cases[i].id, "only 510 tokens", NULL);
      remove_checkpoint (dir);
    }
}

static void
test_error_path (void)
{
  g_autoptr(GError) error = NULL;
  AmkModelBuild *build = amk_model_build_from_path ("/nonexistent/model", 1, 8, &error);
  AmkModelSpec *spec;

  g_assert_null (build);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_clear_error (&error);
  spec = amk_hf_model_read ("/nonexistent/folder", &error);
  g_assert_null (spec);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_DIRECTORY);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/hf-model/tiny-llama", test_tiny_llama);
  g_test_add_func ("/amk/hf-model/tiny-qwen3", test_tiny_qwen3);
  g_test_add_func ("/amk/hf-model/dtypes-and-shards", test_dtypes_and_shards);
  g_test_add_func ("/amk/hf-model/env-checkpoints", test_env_checkpoints);
  g_test_add_func ("/amk/hf-model/gguf/llama", test_gguf_llama);
  g_test_add_func ("/amk/hf-model/gguf/qwen3", test_gguf_qwen3);
  g_test_add_func ("/amk/hf-model/gguf/llama3-rope", test_gguf_llama3_rope);
  g_test_add_func ("/amk/hf-model/error/config", test_error_config);
  g_test_add_func ("/amk/hf-model/error/tensors", test_error_tensors);
  g_test_add_func ("/amk/hf-model/error/path", test_error_path);
  g_test_add_func ("/amk/hf-model/error/special-ids", test_error_special_ids);
  return g_test_run ();
}

/* amk-golden.h: the golden-continuation check shared by tests/unit/test-model-golden.c
 * (CPU executor), tests/gpu/test-gpu-golden.c (the megakernel, the model as the GPU
 * loads it and quantized by `amk quantize`) and tests/unit/test-quantized-golden.c (the
 * model quantized by `amk quantize`, on the CPU).
 *
 * A golden json of tests/golden/ (written by tests/golden/make-golden.py, whose docstring
 * explains it) holds, for a few prompts, the prompt's token ids and the greedy
 * continuation that Hugging Face transformers computes from the same GGUF file, with the
 * top-2 logit margin of every step, once per reference: "cpu" models the weights as the
 * CPU executor loads them, "gpu" as the GPU does; each test reads its executor's. amk
 * must encode each prompt to the same ids and generate the same tokens; a different
 * token is accepted only at a step whose margin is below the json's tolerance (a near-tie
 * that rounding alone can flip), and nothing after it is compared. A prompt with an
 * answer ("Paris") must have it in amk's text too.
 *
 * The model file comes from AMK_TEST_GGUF (amk fetch-model); without it the tests
 * skip, and they skip too when its SHA-256 is not the one the json was made from.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>
#include <amk-glib/amk-glib.h>
#include "../unit/amk-test-generate.h"

typedef struct {
  char   *prompt;
  GArray *prompt_ids;   /* gint32 */
  GArray *generated;    /* gint32 */
  GArray *margins;      /* double: one a step, the EOS step included */
  char   *text;
  char   *answer;       /* nullable: what the text must contain */
} GoldenPrompt;

typedef struct {
  char      *path;
  char      *reference;   /* "cpu" or "gpu" */
  char      *sha256;
  gint32     eos_id;
  gboolean   add_bos;
  guint      max_new_tokens;
  double     tolerance;
  GPtrArray *prompts;   /* GoldenPrompt */
} Golden;

static inline void
golden_prompt_free (gpointer data)
{
  GoldenPrompt *p = data;

  g_free (p->prompt);
  g_array_unref (p->prompt_ids);
  g_array_unref (p->generated);
  g_array_unref (p->margins);
  g_free (p->text);
  g_free (p->answer);
  g_free (p);
}

static inline void
golden_free (Golden *g)
{
  if (g == NULL)
    return;
  g_free (g->path);
  g_free (g->reference);
  g_free (g->sha256);
  g_clear_pointer (&g->prompts, g_ptr_array_unref);
  g_free (g);
}

G_DEFINE_AUTOPTR_CLEANUP_FUNC (Golden, golden_free)

/* The json `name` of tests/golden/ in the source tree. */
static inline char *
golden_json_path (const char *name)
{
  return g_test_build_filename (G_TEST_DIST, "golden", name, NULL);
}

/* The json of the SmolLM2 file itself: $AMK_GOLDEN_JSON, else smollm2-golden.json. */
static inline char *
golden_default_json_path (void)
{
  const char *env = g_getenv ("AMK_GOLDEN_JSON");

  if (env != NULL && *env != '\0')
    return g_strdup (env);
  return golden_json_path ("smollm2-golden.json");
}

/* The model file of AMK_TEST_GGUF, or NULL (the test then skips). */
static inline const char *
golden_model_path (void)
{
  const char *path = g_getenv ("AMK_TEST_GGUF");

  if (path == NULL || *path == '\0' || !g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return NULL;
  return path;
}

static inline GArray *
golden_int_array (JsonObject *o, const char *member)
{
  JsonArray *a = json_object_get_array_member (o, member);
  GArray *out = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_assert_nonnull (a);
  for (guint i = 0; i < json_array_get_length (a); i++)
    {
      gint32 v = (gint32) json_array_get_int_element (a, i);
      g_array_append_val (out, v);
    }
  return out;
}

/* The golden continuations of `reference` ("cpu" or "gpu") in the json at `path`. */
static inline Golden *
golden_load (const char *path,
             const char *reference)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(Golden) g = g_new0 (Golden, 1);
  JsonObject *root, *model, *tolerance, *references;
  JsonArray *prompts;

  g->path = g_strdup (path);
  g->reference = g_strdup (reference);
  json_parser_load_from_file (parser, g->path, &error);
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  model = json_object_get_object_member (root, "model");
  tolerance = json_object_get_object_member (root, "tolerance");
  references = json_object_get_object_member (root, "references");
  g_assert_nonnull (model);
  g_assert_nonnull (tolerance);
  g_assert_nonnull (references);
  if (!json_object_has_member (references, reference))
    g_error ("%s has no “%s” reference: regenerate it with tests/golden/make-golden.py",
             g->path, reference);
  g->sha256 = g_strdup (json_object_get_string_member (model, "sha256"));
  g->eos_id = (gint32) json_object_get_int_member (model, "eos_id");
  g->add_bos = json_object_get_boolean_member (model, "add_bos_token");
  g->max_new_tokens = (guint) json_object_get_int_member (root, "max_new_tokens");
  g->tolerance = json_object_get_double_member (tolerance, "top2_margin");
  g->prompts = g_ptr_array_new_with_free_func (golden_prompt_free);

  prompts = json_object_get_array_member (root, "prompts");
  g_assert_nonnull (prompts);
  for (guint i = 0; i < json_array_get_length (prompts); i++)
    {
      JsonObject *o = json_array_get_object_element (prompts, i);
      JsonObject *expected = json_object_get_object_member (o, "expected");
      JsonObject *e;
      JsonArray *m;
      GoldenPrompt *p = g_new0 (GoldenPrompt, 1);

      g_assert_nonnull (expected);
      e = json_object_get_object_member (expected, reference);
      g_assert_nonnull (e);
      m = json_object_get_array_member (e, "top2_margin");
      p->prompt = g_strdup (json_object_get_string_member (o, "prompt"));
      if (json_object_has_member (o, "answer") && !json_object_get_null_member (o, "answer"))
        p->answer = g_strdup (json_object_get_string_member (o, "answer"));
      p->prompt_ids = golden_int_array (o, "prompt_ids");
      p->text = g_strdup (json_object_get_string_member (e, "text"));
      p->generated = golden_int_array (e, "generated_ids");
      p->margins = g_array_new (FALSE, FALSE, sizeof (double));
      for (guint s = 0; s < json_array_get_length (m); s++)
        {
          double v = json_array_get_double_element (m, s);
          g_array_append_val (p->margins, v);
        }
      /* a margin for every generated token, and one for the EOS step if it stopped */
      g_assert_cmpuint (p->margins->len, >=, p->generated->len);
      g_ptr_array_add (g->prompts, p);
    }
  g_assert_cmpuint (g->prompts->len, >=, 3);
  return g_steal_pointer (&g);
}

/* The SHA-256 of a file, in hex. */
static inline char *
golden_file_sha256 (const char *path)
{
  g_autoptr(GMappedFile) file = NULL;
  g_autoptr(GError) error = NULL;

  file = g_mapped_file_new (path, FALSE, &error);
  g_assert_no_error (error);
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256,
                                      (const guchar *) g_mapped_file_get_contents (file),
                                      g_mapped_file_get_length (file));
}

/* Whether the model file is the one the json was made from. */
static inline gboolean
golden_same_model (Golden *g, const char *path)
{
  g_autofree char *sum = golden_file_sha256 (path);

  if (g_strcmp0 (sum, g->sha256) == 0)
    return TRUE;
  g_test_message ("%s has SHA-256 %s; %s was made from %s", path, sum, g->path, g->sha256);
  return FALSE;
}

/* The golden continuations of `reference` ("cpu" or "gpu") for SmolLM2 and the model
 * file of AMK_TEST_GGUF (*path), or NULL after g_test_skip() when it is unset or not the
 * file they were made from. */
static inline Golden *
golden_open (const char  *reference,
             const char **path)
{
  g_autoptr(Golden) g = NULL;
  g_autofree char *json = NULL;

  *path = golden_model_path ();
  if (*path == NULL)
    {
      g_test_skip ("set AMK_TEST_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf (amk fetch-model)");
      return NULL;
    }
  json = golden_default_json_path ();
  g = golden_load (json, reference);
  if (!golden_same_model (g, *path))
    {
      g_test_skip ("AMK_TEST_GGUF is not the file the golden continuations were made from");
      return NULL;
    }
  return g_steal_pointer (&g);
}

static inline char *
golden_ids_string (const gint32 *ids, gsize n)
{
  GString *s = g_string_new (NULL);

  for (gsize i = 0; i < n; i++)
    g_string_append_printf (s, "%s%d", i > 0 ? " " : "", ids[i]);
  return g_string_free (s, FALSE);
}

/* The token the reference produced at `step`: a generated one, or EOS after the last. */
static inline gint32
golden_token_at (Golden *g, GoldenPrompt *p, guint step)
{
  if (step < p->generated->len)
    return g_array_index (p->generated, gint32, step);
  return g->eos_id;
}

/* Generates each prompt's continuation with AmkGenerator on `launcher` (NULL: the CPU
 * executor) and compares it with the golden one. Returns the number of prompts that
 * matched in full (the others stopped at an accepted near-tie); fails the test on a
 * real mismatch. */
static inline guint
golden_check (Golden *g, AmkModel *model, AmkLauncher *launcher)
{
  guint exact = 0;

  for (guint i = 0; i < g->prompts->len; i++)
    {
      GoldenPrompt *p = g_ptr_array_index (g->prompts, i);
      g_autoptr(GError) error = NULL;
      g_autoptr(GArray) generated = NULL;
      g_autofree gint32 *prompt_ids = NULL;
      g_autofree char *text = NULL;
      g_autofree char *got = NULL, *want = NULL;
      const gint32 *ids;
      gsize n_prompt_ids = 0, n_ids = 0;
      guint n_prompt = 0, n_compare;
      gint64 t0, t1;
      gboolean full = TRUE;

      /* the prompt encodes to the same ids (amk adds BOS where the file says so) */
      prompt_ids = amk_tokenizer_encode (amk_model_get_tokenizer (model), p->prompt, TRUE,
                                         &n_prompt_ids, &error);
      g_assert_no_error (error);
      got = golden_ids_string (prompt_ids, n_prompt_ids);
      want = golden_ids_string ((const gint32 *) p->prompt_ids->data, p->prompt_ids->len);
      if (g_strcmp0 (got, want) != 0)
        g_error ("prompt %u “%s”: amk encodes it to [%s], transformers to [%s]",
                 i, p->prompt, got, want);
      g_clear_pointer (&got, g_free);
      g_clear_pointer (&want, g_free);

      t0 = g_get_monotonic_time ();
      text = test_generate (model, AMK_EXECUTOR (launcher), p->prompt, g->max_new_tokens, &generated, &n_prompt,
                            &error);
      g_assert_no_error (error);
      t1 = g_get_monotonic_time ();
      ids = (const gint32 *) generated->data;
      n_ids = generated->len;
      g_assert_cmpuint (n_prompt, ==, p->prompt_ids->len);
      got = golden_ids_string (ids, n_ids);
      want = golden_ids_string ((const gint32 *) p->generated->data, p->generated->len);
      g_test_message ("prompt %u “%s”: %zu tokens in %.1f s (the %s reference)", i, p->prompt,
                      n_ids, (t1 - t0) / 1e6, g->reference);
      g_test_message ("  amk:          [%s] “%s”", got, text);
      g_test_message ("  transformers: [%s] “%s”", want, p->text);

      /* compare up to the first difference; amk's stop at EOS is a token too */
      n_compare = (guint) MAX (n_ids, p->generated->len);
      if (n_compare < g->max_new_tokens)
        n_compare++;   /* both stopped: the EOS step */
      for (guint s = 0; s < n_compare && s < p->margins->len; s++)
        {
          gint32 mine = s < n_ids ? ids[s] : g->eos_id;
          gint32 theirs = golden_token_at (g, p, s);
          double margin = g_array_index (p->margins, double, s);

          if (mine == theirs)
            continue;
          if (margin < g->tolerance)
            {
              g_test_message ("  step %u: amk %d, transformers %d at a near-tie (top-2 margin "
                              "%.4f < %.4f): accepted, the rest is not compared",
                              s, mine, theirs, margin, g->tolerance);
              full = FALSE;
              break;
            }
          g_error ("prompt %u “%s”: step %u gives %d, transformers %d, whose top-2 logit "
                   "margin %.4f is not below the tolerance %.4f\n  amk:          [%s]\n"
                   "  transformers: [%s]", i, p->prompt, s, mine, theirs, margin,
                   g->tolerance, got, want);
        }
      if (full)
        {
          g_assert_cmpuint (n_ids, ==, p->generated->len);
          exact++;
        }
      /* the factual prompts: the answer, whatever near-tie came before it */
      if (p->answer != NULL && g_strstr_len (text, -1, p->answer) == NULL)
        g_error ("prompt %u “%s”: amk's continuation “%s” does not contain “%s”", i,
                 p->prompt, text, p->answer);
    }
  return exact;
}

/* The json's model.quantized member: the mix and the SHA-256 of the file it was
 * quantized from. */
static inline void
golden_quantized_from (const char  *json,
                       char       **type,
                       char       **from_sha256)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *root, *model, *quantized;

  json_parser_load_from_file (parser, json, &error);
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  model = json_object_get_object_member (root, "model");
  g_assert_nonnull (model);
  quantized = json_object_get_object_member (model, "quantized");
  g_assert_nonnull (quantized);
  *type = g_strdup (json_object_get_string_member (quantized, "type"));
  *from_sha256 = g_strdup (json_object_get_string_member (quantized, "from_sha256"));
}

/* `tool quantize --type mix` of `in` written to `out`. */
static inline void
golden_quantize (const char *tool,
                 const char *in,
                 const char *out,
                 const char *mix)
{
  g_autoptr(GSubprocess) proc = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *output = NULL;

  proc = g_subprocess_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_MERGE,
                           &error, tool, "quantize", "--quiet", in, out, "--type", mix, NULL);
  g_assert_no_error (error);
  g_subprocess_communicate_utf8 (proc, NULL, NULL, &output, NULL, &error);
  g_assert_no_error (error);
  if (!g_subprocess_get_if_exited (proc) || g_subprocess_get_exit_status (proc) != 0)
    g_error ("%s quantize --quiet %s %s --type %s failed:\n%s", tool, in, out, mix, output);
}

/* The goldens of SmolLM2 quantized to `mix` ("cpu" reference: transformers on the
 * quantized file) and that file, written by `tool` into the new folder *dir; NULL after
 * g_test_skip() without AMK_TEST_GGUF or with another file, or after g_test_fail() when
 * the quantizer no longer writes the bytes the goldens were made from. The caller removes
 * *path and *dir. */
static inline Golden *
golden_quantized (const char  *tool,
                  const char  *mix,
                  char       **dir,
                  char       **path)
{
  const char *original = golden_model_path ();
  g_autofree char *name = g_strdup_printf ("smollm2-%s-golden.json", mix);
  g_autofree char *json = golden_json_path (name);
  g_autofree char *type = NULL, *from = NULL, *original_sum = NULL, *file = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(Golden) g = NULL;

  *dir = *path = NULL;
  if (original == NULL)
    {
      g_test_skip ("set AMK_TEST_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf (amk fetch-model)");
      return NULL;
    }
  g = golden_load (json, "cpu");
  golden_quantized_from (json, &type, &from);
  original_sum = golden_file_sha256 (original);
  if (g_strcmp0 (original_sum, from) != 0)
    {
      g_test_skip ("AMK_TEST_GGUF is not the file the goldens were quantized from");
      return NULL;
    }
  *dir = g_dir_make_tmp ("amk-quantized-golden-XXXXXX", &error);
  g_assert_no_error (error);
  file = g_strdup_printf ("smollm2-%s.gguf", mix);
  *path = g_build_filename (*dir, file, NULL);
  golden_quantize (tool, original, *path, mix);
  /* the goldens are of the quantizer's bytes: any change to them needs new goldens */
  if (!golden_same_model (g, *path))
    {
      g_test_fail_printf ("amk quantize --type %s no longer writes the file %s was made from: "
                          "if the change is meant, regenerate it (in a venv with torch, "
                          "transformers, gguf, numpy and accelerate) with\n"
                          "  python3 tests/golden/make-golden.py \"$(build/tools/amk "
                          "fetch-model)\" --quantize %s --amk build/tools/amk",
                          mix, json, mix);
      return NULL;
    }
  return g_steal_pointer (&g);
}

/* test-tokenizer.c: AmkTokenizer's error paths and a tiny hand-written vocabulary.
 *
 * The comparison with the tokenizers package on a real vocabulary is in
 * tests/python/test_tokenizer.py.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib/gstdio.h>

#include "amk-test-common.h"

/* ids: a 0, b 1, c 2, Ġ 3, ab 4, abc 5, Ġab 6, <s> 7, </s> 8, Ċ 9 */
#define TINY_VOCAB \
  "{\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, " \
  "\"\\u0120ab\": 6, \"<s>\": 7, \"</s>\": 8, \"\\u010a\": 9}"
#define TINY_MERGES "[\"a b\", [\"ab\", \"c\"], \"\\u0120 ab\"]"
#define TINY_ADDED \
  "[{\"id\": 7, \"content\": \"<s>\", \"special\": true}, " \
  "{\"id\": 8, \"content\": \"</s>\", \"special\": true}]"
#define TINY_PRE "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"

static char *
tiny_json (const char *vocab,
           const char *merges,
           const char *added,
           const char *post)
{
  return g_strdup_printf ("{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": null, "
                          "\"pre_tokenizer\": %s, \"post_processor\": %s, "
                          "\"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": %s}}",
                          added, TINY_PRE, post, vocab, merges);
}

static AmkTokenizer *
tiny_tokenizer (const char *post)
{
  g_autofree char *json = tiny_json (TINY_VOCAB, TINY_MERGES, TINY_ADDED, post);
  g_autoptr(GError) error = NULL;
  AmkTokenizer *tok = amk_tokenizer_new_from_json_data (json, -1, &error);

  g_assert_no_error (error);
  g_assert_nonnull (tok);
  return tok;
}

static void
assert_encode (AmkTokenizer  *tok,
               const char    *text,
               gboolean       add_special,
               const gint32  *expected,
               gsize          n_expected)
{
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  gsize n = 99;

  ids = amk_tokenizer_encode (tok, text, add_special, &n, &error);
  g_assert_no_error (error);
  g_assert_nonnull (ids);
  g_assert_cmpuint (n, ==, n_expected);
  if (n > 0)
    g_assert_cmpmem (ids, n * sizeof (gint32), expected, n_expected * sizeof (gint32));
}

static void
test_encode_tiny (void)
{
  g_autoptr(AmkTokenizer) tok = tiny_tokenizer ("null");
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  const gint32 abc_ab[] = { 5, 6 };
  const gint32 ca[] = { 2, 0 };
  const gint32 specials[] = { 7, 4, 8 };
  const gint32 nl[] = { 4, 9, 5 };
  const gint32 ids[] = { 7, 5, 6, 8 };

  g_assert_cmpuint (amk_tokenizer_get_vocab_size (tok), ==, 10);
  assert_encode (tok, "abc ab", FALSE, abc_ab, G_N_ELEMENTS (abc_ab));
  assert_encode (tok, "ca", FALSE, ca, G_N_ELEMENTS (ca));
  assert_encode (tok, "<s>ab</s>", FALSE, specials, G_N_ELEMENTS (specials));
  assert_encode (tok, "ab\nabc", FALSE, nl, G_N_ELEMENTS (nl));
  /* characters outside the vocabulary vanish (no unk_token), as in tokenizers */
  assert_encode (tok, "xyz", FALSE, NULL, 0);
  assert_encode (tok, "", TRUE, NULL, 0);

  text = amk_tokenizer_decode (tok, ids, G_N_ELEMENTS (ids), &error);
  g_assert_no_error (error);
  g_assert_cmpstr (text, ==, "<s>abc ab</s>");

  g_assert_cmpint (amk_tokenizer_token_to_id (tok, "\xc4\xa0" "ab"), ==, 6);
  g_assert_cmpint (amk_tokenizer_token_to_id (tok, "</s>"), ==, 8);
  g_assert_cmpint (amk_tokenizer_token_to_id (tok, "zzz"), ==, -1);
  g_assert_cmpstr (amk_tokenizer_id_to_token (tok, 5), ==, "abc");
  g_assert_null (amk_tokenizer_id_to_token (tok, 10));
  g_assert_true (amk_tokenizer_is_special (tok, 7));
  g_assert_false (amk_tokenizer_is_special (tok, 0));
  g_assert_cmpint (amk_tokenizer_get_bos_id (tok), ==, -1);
  g_assert_cmpint (amk_tokenizer_get_eos_id (tok), ==, -1);
}

static void
test_encode_template (void)
{
  g_autoptr(AmkTokenizer) tok = tiny_tokenizer (
    "{\"type\": \"TemplateProcessing\", "
    "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, "
    "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
    "{\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], "
    "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [7], \"tokens\": [\"<s>\"]}, "
    "\"</s>\": {\"id\": \"</s>\", \"ids\": [8], \"tokens\": [\"</s>\"]}}}");
  const gint32 with[] = { 7, 5, 8 };
  const gint32 without[] = { 5 };

  g_assert_cmpint (amk_tokenizer_get_bos_id (tok), ==, 7);
  g_assert_cmpint (amk_tokenizer_get_eos_id (tok), ==, 8);
  assert_encode (tok, "abc", TRUE, with, G_N_ELEMENTS (with));
  assert_encode (tok, "abc", FALSE, without, G_N_ELEMENTS (without));
  /* add-bos does not double the template's BOS */
  amk_tokenizer_set_add_bos (tok, TRUE);
  assert_encode (tok, "abc", TRUE, with, G_N_ELEMENTS (with));
}

static void
test_vocab_constructor (void)
{
  const char *tokens[] = { "a", "b", "c", "\xc4\xa0", "ab", "abc", "\xc4\xa0" "ab", "<s>", "</s>",
                           "\xc4\x8a", NULL };
  const char *merges[] = { "a b", "ab c", "\xc4\xa0 ab", NULL };
  const gint32 types[] = { 1, 1, 1, 1, 1, 1, 1, 3, 3, 1 };
  const char *bad_merges[] = { "a b", "a q", NULL };
  const char *dup_tokens[] = { "a", "b", "a", NULL };
  const char *no_merges[] = { NULL };
  g_autoptr(AmkTokenizer) tok = NULL;
  g_autoptr(GError) error = NULL;
  const gint32 expected[] = { 7, 5, 6 };
  const gint32 plain[] = { 5, 6 };

  tok = amk_tokenizer_new_from_vocab (tokens, merges, types, G_N_ELEMENTS (types), "gpt2", &error);
  g_assert_no_error (error);
  amk_tokenizer_set_bos_id (tok, 7);
  amk_tokenizer_set_add_bos (tok, TRUE);
  assert_encode (tok, "abc ab", TRUE, expected, G_N_ELEMENTS (expected));
  assert_encode (tok, "abc ab", FALSE, plain, G_N_ELEMENTS (plain));
  g_clear_object (&tok);

  tok = amk_tokenizer_new_from_vocab (tokens, bad_merges, NULL, 0, "gpt2", &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_assert_null (tok);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (dup_tokens, no_merges, NULL, 0, "gpt2", &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (tokens, merges, types, 3, "gpt2", &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (tokens, merges, NULL, 0, "martian", &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED);
  g_clear_error (&error);
}

static void
test_encode_invalid_utf8 (void)
{
  g_autoptr(AmkTokenizer) tok = tiny_tokenizer ("null");
  g_autoptr(GError) error = NULL;
  gsize n = 7;
  gint32 *ids = amk_tokenizer_encode (tok, "ab\xff" "c", FALSE, &n, &error);

  g_assert_error (error, G_CONVERT_ERROR, G_CONVERT_ERROR_ILLEGAL_SEQUENCE);
  g_assert_null (ids);
  g_assert_cmpuint (n, ==, 0);
}

static void
test_decode_bad_id (void)
{
  g_autoptr(AmkTokenizer) tok = tiny_tokenizer ("null");
  g_autoptr(GError) error = NULL;
  const gint32 ids[] = { 0, 10 };
  const gint32 negative[] = { -1 };
  char *text;

  text = amk_tokenizer_decode (tok, ids, G_N_ELEMENTS (ids), &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
  g_assert_null (text);
  g_clear_error (&error);
  text = amk_tokenizer_decode (tok, negative, 1, &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  text = amk_tokenizer_decode (tok, NULL, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (text, ==, "");
  g_free (text);
}

/* Writes @contents into a temporary folder and loads it; returns the error. */
static GError *
load_file_error (const char *name,
                 const char *contents,
                 gssize      length)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("amk-tokenizer-XXXXXX", &error);
  g_autofree char *path = NULL;
  g_autoptr(AmkTokenizer) tok = NULL;

  g_assert_no_error (error);
  path = g_build_filename (dir, name, NULL);
  g_assert_true (g_file_set_contents (path, contents, length, &error));
  tok = amk_tokenizer_new_from_json_file (path, &error);
  g_assert_null (tok);
  g_assert_nonnull (error);
  /* every message names the file */
  g_assert_nonnull (strstr (error->message, name));
  g_unlink (path);
  g_rmdir (dir);
  return g_steal_pointer (&error);
}

static void
expect_invalid (const char *name,
                const char *contents,
                const char *field)
{
  g_autoptr(GError) error = load_file_error (name, contents, -1);

  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
  if (field != NULL && strstr (error->message, field) == NULL)
    g_error ("“%s” does not name “%s”", error->message, field);
}

static void
test_file_corrupt (void)
{
  g_autofree char *good = tiny_json (TINY_VOCAB, TINY_MERGES, TINY_ADDED, "null");
  g_autofree char *truncated = g_strndup (good, strlen (good) / 2);
  g_autoptr(GError) binary = NULL;

  expect_invalid ("corrupt.json", "{\"model\": [}", "JSON");
  expect_invalid ("truncated.json", truncated, "JSON");
  expect_invalid ("empty.json", "", NULL);
  expect_invalid ("array.json", "[1, 2, 3]", NULL);
  expect_invalid ("deep.json", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                  "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                  "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", NULL);
  binary = load_file_error ("binary.json", "{\"a\xff\": 1}", -1);
  g_assert_error (binary, G_IO_ERROR, G_IO_ERROR_INVALID_DATA);
}

static void
test_file_missing_fields (void)
{
  g_autofree char *no_merges = g_strdup_printf ("{\"pre_tokenizer\": %s, \"model\": "
                                                "{\"type\": \"BPE\", \"vocab\": %s}}",
                                                TINY_PRE, TINY_VOCAB);
  g_autofree char *string_id = tiny_json ("{\"a\": \"zero\"}", "[]", "[]", "null");
  g_autofree char *bad_merge = tiny_json (TINY_VOCAB, "[\"ab\"]", "[]", "null");
  g_autofree char *merge_kind = tiny_json (TINY_VOCAB, "[42]", "[]", "null");
  g_autofree char *added_no_id = tiny_json (TINY_VOCAB, TINY_MERGES,
                                            "[{\"content\": \"<s>\"}]", "null");
  g_autofree char *big_id = tiny_json ("{\"a\": 2000000000}", "[]", "[]", "null");

  expect_invalid ("nomodel.json", "{\"pre_tokenizer\": null}", "model");
  expect_invalid ("nomerges.json", no_merges, "model.merges");
  expect_invalid ("stringid.json", string_id, "model.vocab");
  expect_invalid ("badmerge.json", bad_merge, "merges");
  expect_invalid ("mergekind.json", merge_kind, "merges");
  expect_invalid ("addednoid.json", added_no_id, "added_tokens.id");
  expect_invalid ("bigid.json", big_id, "model.vocab");
}

static void
test_file_duplicates (void)
{
  g_autofree char *dup_id = tiny_json ("{\"a\": 0, \"b\": 0}", "[]", "[]", "null");
  g_autofree char *dup_added = tiny_json (TINY_VOCAB, TINY_MERGES,
                                          "[{\"id\": 7, \"content\": \"<s>\"}, "
                                          "{\"id\": 7, \"content\": \"<s>\"}]", "null");
  g_autofree char *wrong_added = tiny_json (TINY_VOCAB, TINY_MERGES,
                                            "[{\"id\": 0, \"content\": \"<s>\"}]", "null");

  expect_invalid ("dupid.json", dup_id, "model.vocab");
  expect_invalid ("dupadded.json", dup_added, "added_tokens");
  expect_invalid ("wrongadded.json", wrong_added, "added_tokens");
}

static void
test_file_unknown_merge (void)
{
  g_autofree char *unknown = tiny_json (TINY_VOCAB, "[\"a b\", \"b zz\"]", "[]", "null");
  g_autofree char *not_joined = tiny_json (TINY_VOCAB, "[\"b c\"]", "[]", "null");

  expect_invalid ("unknownmerge.json", unknown, "zz");
  expect_invalid ("notjoined.json", not_joined, "bc");
}

static void
test_file_unsupported (void)
{
  g_autofree char *wordpiece = g_strdup_printf ("{\"model\": {\"type\": \"WordPiece\", "
                                                "\"vocab\": %s, \"merges\": []}}", TINY_VOCAB);
  g_autoptr(GError) error = load_file_error ("wordpiece.json", wordpiece, -1);

  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED);
}

static void
test_file_missing (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkTokenizer) tok = amk_tokenizer_new_from_json_file ("/nonexistent/t.json", &error);

  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_null (tok);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C.UTF-8");
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/tokenizer/encode/tiny", test_encode_tiny);
  g_test_add_func ("/amk/tokenizer/encode/template", test_encode_template);
  g_test_add_func ("/amk/tokenizer/encode/invalid-utf8", test_encode_invalid_utf8);
  g_test_add_func ("/amk/tokenizer/decode/bad-id", test_decode_bad_id);
  g_test_add_func ("/amk/tokenizer/vocab", test_vocab_constructor);
  g_test_add_func ("/amk/tokenizer/file/corrupt", test_file_corrupt);
  g_test_add_func ("/amk/tokenizer/file/missing-fields", test_file_missing_fields);
  g_test_add_func ("/amk/tokenizer/file/duplicates", test_file_duplicates);
  g_test_add_func ("/amk/tokenizer/file/unknown-merge", test_file_unknown_merge);
  g_test_add_func ("/amk/tokenizer/file/unsupported", test_file_unsupported);
  g_test_add_func ("/amk/tokenizer/file/missing", test_file_missing);

  return g_test_run ();
}

/* test-tokenizer.c: AmkTokenizer's error paths (one test at least for each code of
 * AMK_TOKENIZER_ERROR) and a tiny hand-written vocabulary.
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
make_json (const char *vocab,
           const char *merges,
           const char *added,
           const char *normalizer,
           const char *pre,
           const char *post)
{
  return g_strdup_printf ("{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": %s, "
                          "\"pre_tokenizer\": %s, \"post_processor\": %s, "
                          "\"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": %s}}",
                          added, normalizer, pre, post, vocab, merges);
}

static char *
tiny_json (const char *vocab,
           const char *merges,
           const char *added,
           const char *post)
{
  return make_json (vocab, merges, added, "null", TINY_PRE, post);
}

/* The tiny vocabulary with another normalizer, pre-tokenizer or post-processor. */
static char *
tiny_pipeline (const char *normalizer,
               const char *pre,
               const char *post)
{
  return make_json (TINY_VOCAB, TINY_MERGES, TINY_ADDED, normalizer, pre, post);
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
  const char *unsplit_merges[] = { "ab", NULL };
  const gint32 bad_types[] = { 1, 1, 1, 1, 1, 1, 1, 3, 3, 7 };
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
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES);
  g_assert_null (tok);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (tokens, unsplit_merges, NULL, 0, "gpt2", &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES);
  g_assert_null (tok);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (dup_tokens, no_merges, NULL, 0, "gpt2", &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB);
  g_assert_null (tok);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (tokens, merges, types, 3, "gpt2", &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB);
  g_assert_null (tok);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (tokens, merges, bad_types, G_N_ELEMENTS (bad_types), "gpt2",
                                      &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB);
  g_assert_null (tok);
  g_clear_error (&error);

  tok = amk_tokenizer_new_from_vocab (tokens, merges, NULL, 0, "martian", &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER);
  g_assert_null (tok);
  g_clear_error (&error);
}

static void
test_encode_invalid_utf8 (void)
{
  g_autoptr(AmkTokenizer) tok = tiny_tokenizer ("null");
  g_autoptr(GError) error = NULL;
  gsize n = 7;
  gint32 *ids = amk_tokenizer_encode (tok, "ab\xff" "c", FALSE, &n, &error);

  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_TEXT);
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
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_UNKNOWN_ID);
  g_assert_null (text);
  g_clear_error (&error);
  text = amk_tokenizer_decode (tok, negative, 1, &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_UNKNOWN_ID);
  g_assert_null (text);
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
expect_error (const char *name,
              const char *contents,
              gint        code,
              const char *field)
{
  g_autoptr(GError) error = load_file_error (name, contents, -1);

  g_assert_error (error, AMK_TOKENIZER_ERROR, code);
  if (field != NULL && strstr (error->message, field) == NULL)
    g_error ("“%s” does not name “%s”", error->message, field);
}

/* Text that is not JSON, or JSON that json-glib must not be given. */
static void
test_file_corrupt (void)
{
  g_autofree char *good = tiny_json (TINY_VOCAB, TINY_MERGES, TINY_ADDED, "null");
  g_autofree char *truncated = g_strndup (good, strlen (good) / 2);
  const AmkTokenizerError json = AMK_TOKENIZER_ERROR_INVALID_JSON;

  expect_error ("corrupt.json", "{\"model\": [}", json, "JSON");
  expect_error ("truncated.json", truncated, json, "JSON");
  expect_error ("empty.json", "", json, NULL);
  expect_error ("deep.json", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", json, "deeper");
  expect_error ("binary.json", "{\"a\xff\": 1}", json, "UTF-8");
}

/* JSON that is not shaped like a tokenizer.json. */
static void
test_file_missing_fields (void)
{
  g_autofree char *no_merges = g_strdup_printf ("{\"pre_tokenizer\": %s, \"model\": "
                                                "{\"type\": \"BPE\", \"vocab\": %s}}",
                                                TINY_PRE, TINY_VOCAB);
  g_autofree char *string_id = tiny_json ("{\"a\": \"zero\"}", "[]", "[]", "null");
  g_autofree char *added_no_id = tiny_json (TINY_VOCAB, TINY_MERGES,
                                            "[{\"content\": \"<s>\"}]", "null");
  g_autofree char *no_sequence = tiny_json (TINY_VOCAB, TINY_MERGES, TINY_ADDED,
                                            "{\"type\": \"TemplateProcessing\", \"single\": [], "
                                            "\"special_tokens\": {}}");
  const AmkTokenizerError structure = AMK_TOKENIZER_ERROR_INVALID_STRUCTURE;

  expect_error ("array.json", "[1, 2, 3]", structure, "(top level)");
  expect_error ("nomodel.json", "{\"pre_tokenizer\": null}", structure, "model");
  expect_error ("nomerges.json", no_merges, structure, "model.merges");
  expect_error ("stringid.json", string_id, structure, "model.vocab");
  expect_error ("addednoid.json", added_no_id, structure, "added_tokens.id");
  expect_error ("nosequence.json", no_sequence, structure, "post_processor.single");
}

/* A vocabulary or added tokens that contradict themselves. */
static void
test_file_duplicates (void)
{
  g_autofree char *dup_id = tiny_json ("{\"a\": 0, \"b\": 0}", "[]", "[]", "null");
  g_autofree char *dup_added = tiny_json (TINY_VOCAB, TINY_MERGES,
                                          "[{\"id\": 7, \"content\": \"<s>\"}, "
                                          "{\"id\": 7, \"content\": \"<s>\"}]", "null");
  g_autofree char *wrong_added = tiny_json (TINY_VOCAB, TINY_MERGES,
                                            "[{\"id\": 0, \"content\": \"<s>\"}]", "null");
  g_autofree char *big_id = tiny_json ("{\"a\": 2000000000}", "[]", "[]", "null");
  g_autofree char *unknown_unk = g_strdup_printf ("{\"pre_tokenizer\": %s, \"model\": "
                                                  "{\"vocab\": %s, \"merges\": [], "
                                                  "\"unk_token\": \"<unk>\"}}",
                                                  TINY_PRE, TINY_VOCAB);
  /* the template's </s> is id 8, a hole in this vocabulary (0 to 7 and 9) */
  g_autofree char *hole_special = tiny_json (
    "{\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, "
    "\"\\u0120ab\": 6, \"<s>\": 7, \"x\": 9}", TINY_MERGES,
    "[{\"id\": 7, \"content\": \"<s>\"}]",
    "{\"type\": \"TemplateProcessing\", "
    "\"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
    "{\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], "
    "\"special_tokens\": {\"</s>\": {\"id\": \"</s>\", \"ids\": [8]}}}");
  const AmkTokenizerError vocab = AMK_TOKENIZER_ERROR_INVALID_VOCAB;

  expect_error ("holespecial.json", hole_special, vocab, "post_processor.special_tokens.ids");
  expect_error ("dupid.json", dup_id, vocab, "model.vocab");
  expect_error ("dupadded.json", dup_added, vocab, "added_tokens");
  expect_error ("wrongadded.json", wrong_added, vocab, "added_tokens");
  expect_error ("bigid.json", big_id, vocab, "model.vocab");
  expect_error ("unknownunk.json", unknown_unk, vocab, "model.unk_token");
}

/* Merges that are not two tokens of the vocabulary whose join is one too. */
static void
test_file_unknown_merge (void)
{
  g_autofree char *unknown = tiny_json (TINY_VOCAB, "[\"a b\", \"b zz\"]", "[]", "null");
  g_autofree char *not_joined = tiny_json (TINY_VOCAB, "[\"b c\"]", "[]", "null");
  g_autofree char *one_token = tiny_json (TINY_VOCAB, "[\"ab\"]", "[]", "null");
  g_autofree char *merge_kind = tiny_json (TINY_VOCAB, "[42]", "[]", "null");
  const AmkTokenizerError merges = AMK_TOKENIZER_ERROR_INVALID_MERGES;

  expect_error ("unknownmerge.json", unknown, merges, "zz");
  expect_error ("notjoined.json", not_joined, merges, "bc");
  expect_error ("onetoken.json", one_token, merges, "merges");
  expect_error ("mergekind.json", merge_kind, merges, "merges");
}

/* Tokenizers of another kind, or with a step this one does not implement: each named
 * by its code. */
static void
test_file_unsupported (void)
{
  g_autofree char *wordpiece = g_strdup_printf ("{\"model\": {\"type\": \"WordPiece\", "
                                                "\"vocab\": %s, \"merges\": []}}", TINY_VOCAB);
  g_autofree char *fallback = g_strdup_printf ("{\"model\": {\"type\": \"BPE\", "
                                               "\"byte_fallback\": true, \"vocab\": %s, "
                                               "\"merges\": []}}", TINY_VOCAB);
  g_autofree char *nfd = tiny_pipeline ("{\"type\": \"NFD\"}", TINY_PRE, "null");
  g_autofree char *whitespace = tiny_pipeline ("null", "{\"type\": \"Whitespace\"}", "null");
  g_autofree char *no_byte_level = tiny_pipeline ("null", "null", "null");
  g_autofree char *merged_split = tiny_pipeline ("null",
                                                 "{\"type\": \"Split\", \"behavior\": \"Removed\", "
                                                 "\"pattern\": {\"String\": \" \"}}", "null");
  g_autofree char *bad_regex = tiny_pipeline ("null",
                                              "{\"type\": \"Split\", \"behavior\": \"Isolated\", "
                                              "\"pattern\": {\"Regex\": \"(\"}}", "null");
  g_autofree char *bert = tiny_pipeline ("null", TINY_PRE, "{\"type\": \"BertProcessing\"}");

  expect_error ("wordpiece.json", wordpiece, AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL, "WordPiece");
  expect_error ("fallback.json", fallback, AMK_TOKENIZER_ERROR_UNSUPPORTED_MODEL,
                "model.byte_fallback");
  expect_error ("nfd.json", nfd, AMK_TOKENIZER_ERROR_UNSUPPORTED_NORMALIZER, "NFD");
  expect_error ("whitespace.json", whitespace, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                "Whitespace");
  expect_error ("nobytelevel.json", no_byte_level, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                "ByteLevel");
  expect_error ("removed.json", merged_split, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                "Removed");
  expect_error ("badregex.json", bad_regex, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                "pre_tokenizer.pattern");
  expect_error ("bert.json", bert, AMK_TOKENIZER_ERROR_UNSUPPORTED_POST_PROCESSOR,
                "BertProcessing");
}

/* A Split regex that backtracks past PCRE2's limit on the text to encode. */
static void
test_encode_pattern_failed (void)
{
  g_autofree char *json = tiny_pipeline ("null",
                                         "{\"type\": \"Sequence\", \"pretokenizers\": ["
                                         "{\"type\": \"Split\", \"behavior\": \"Isolated\", "
                                         "\"pattern\": {\"Regex\": \"(a|aa)+$\"}}, "
                                         TINY_PRE "]}", "null");
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkTokenizer) tok = amk_tokenizer_new_from_json_data (json, -1, &error);
  g_autofree char *text = g_strnfill (60, 'a');
  g_autofree char *stuck = g_strconcat (text, "b", NULL);
  const gint32 short_ids[] = { 4, 3, 0, 0, 0 };
  gsize n = 7;
  gint32 *ids;

  g_assert_no_error (error);
  assert_encode (tok, "ab aaa", FALSE, short_ids, G_N_ELEMENTS (short_ids));
  ids = amk_tokenizer_encode (tok, stuck, FALSE, &n, &error);
  g_assert_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_PATTERN_FAILED);
  g_assert_null (ids);
  g_assert_cmpuint (n, ==, 0);
}

/* Only a file that cannot be read is an I/O error. */
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
  g_test_add_func ("/amk/tokenizer/encode/pattern-failed", test_encode_pattern_failed);
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

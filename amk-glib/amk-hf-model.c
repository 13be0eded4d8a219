/* amk-hf-model.c: the Hugging Face checkpoint reader (untrusted input): a folder to the
 * neutral description of the model (AmkModelSpec).
 *
 * A checkpoint folder holds config.json (the architecture and hyperparameters, parsed
 * with json-glib), model.safetensors or shards named by model.safetensors.index.json
 * (mapped, read with amk-safetensors.c), tokenizer.json, and optionally
 * generation_config.json and tokenizer_config.json (the special tokens). Supported:
 * LlamaForCausalLM (Llama 2/3.x, with "llama3" RoPE scaling) and Qwen3ForCausalLM
 * (q/k norm, a head_dim of its own). Each weight is recorded as a slice of its mapped
 * shard; the builder uses a bf16 one in place and converts an f16 or f32 one. Hugging
 * Face's q/k rows are in rotate-half order already.
 *
 * Every problem is a GError naming the file and the field or tensor: in AMK_MODEL_ERROR
 * (corrupt JSON, a wrong or missing field, an unsupported architecture or feature), or
 * G_IO_ERROR for a missing or unreadable file.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n-lib.h>
#include <gio/gio.h>
#include <json-glib/json-glib.h>

#include "amk-glib.h"
#include "amk-json-private.h"
#include "amk-model-readers-private.h"
#include "amk-safetensors-private.h"

#define MAX_JSON_SIZE   (64u * 1024 * 1024)   /* config and tokenizer_config files */
#define MAX_JSON_DEPTH  64
#define MAX_COUNT       (1u << 20)            /* hidden size, heads, MLP size */

static gboolean
unsupported (GError **error, const char *file, const char *field, const char *detail)
{
  return amk_json_fail (error, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE, file, field, detail);
}

#define invalid(error, file, field, detail) \
  amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, field, detail)

/* The architecture from "architectures" (else "model_type"): "llama" or "qwen3". */
static gboolean
parse_architecture (JsonObject *config, const char *file, const char **arch, GError **error)
{
  static const struct {
    const char *hf;
    const char *model_type;
  } known[] = {
    { "LlamaForCausalLM", "llama" },
    { "Qwen3ForCausalLM", "qwen3" },
  };
  JsonNode *node = amk_json_member (config, "architectures");
  const char *name = NULL, *field = "architectures";
  g_autofree char *detail = NULL;

  if (node != NULL)
    {
      JsonArray *array;
      JsonNode *first;

      if (!JSON_NODE_HOLDS_ARRAY (node) ||
          json_array_get_length (array = json_node_get_array (node)) == 0 ||
          !JSON_NODE_HOLDS_VALUE (first = json_array_get_element (array, 0)) ||
          json_node_get_value_type (first) != G_TYPE_STRING)
        return invalid (error, file, field,
                          _("must be an array of class names"));
      if (json_array_get_length (array) > 1)
        return amk_json_fail (error, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE, file, field,
                              _("names more than one architecture"));
      name = json_node_get_string (first);
      for (guint i = 0; i < G_N_ELEMENTS (known); i++)
        if (strcmp (name, known[i].hf) == 0)
          {
            *arch = known[i].model_type;
            return TRUE;
          }
    }
  else
    {
      field = "model_type";
      if (!amk_json_get_string (config, "model_type", field, &name, file, error))
        return FALSE;
      if (name == NULL)
        return invalid (error, file, "architectures", _("is missing"));
      for (guint i = 0; i < G_N_ELEMENTS (known); i++)
        if (strcmp (name, known[i].model_type) == 0)
          {
            *arch = known[i].model_type;
            return TRUE;
          }
    }
  detail = g_strdup_printf (_("the architecture “%s” is not supported (only LlamaForCausalLM "
                              "and Qwen3ForCausalLM are)"), name);
  return amk_json_fail (error, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE, file, field, detail);
}

/* RoPE: "rope_parameters" (transformers 5) or "rope_scaling" and "rope_theta" (4.x);
 * rope types "default" and "llama3". */
static gboolean
parse_rope (JsonObject *config, AmkModelParams *hp, const char *file, GError **error)
{
  const char *field = "rope_parameters";
  JsonNode *node = amk_json_member (config, field);
  JsonObject *rope = NULL;
  const char *type = NULL;
  gfloat partial = 1.0f;
  guint64 original = 0, max_pos = 0;
  g_autofree char *f_theta = NULL, *f_type = NULL, *f_factor = NULL, *f_low = NULL;
  g_autofree char *f_high = NULL, *f_orig = NULL, *f_partial = NULL, *detail = NULL;

  if (node == NULL)
    node = amk_json_member (config, field = "rope_scaling");
  if (node != NULL)
    {
      if (!JSON_NODE_HOLDS_OBJECT (node))
        return invalid (error, file, field, _("must be an object"));
      rope = json_node_get_object (node);
      /* per layer type (transformers 5, models with sliding layers): take the full one */
      if (amk_json_member (rope, "full_attention") != NULL && amk_json_member (rope, "rope_type") == NULL &&
          amk_json_member (rope, "type") == NULL)
        {
          node = amk_json_member (rope, "full_attention");
          field = "rope_parameters.full_attention";
          if (!JSON_NODE_HOLDS_OBJECT (node))
            return invalid (error, file, field, _("must be an object"));
          rope = json_node_get_object (node);
        }
    }
  f_theta = g_strconcat (field, ".rope_theta", NULL);
  f_type = g_strconcat (field, ".rope_type", NULL);
  f_factor = g_strconcat (field, ".factor", NULL);
  f_low = g_strconcat (field, ".low_freq_factor", NULL);
  f_high = g_strconcat (field, ".high_freq_factor", NULL);
  f_orig = g_strconcat (field, ".original_max_position_embeddings", NULL);
  f_partial = g_strconcat (field, ".partial_rotary_factor", NULL);

  hp->rope_theta = 10000.0f;
  hp->rope_factor = 0.0f;
  hp->rope_low_freq_factor = 1.0f;
  hp->rope_high_freq_factor = 4.0f;
  hp->rope_original_context = 8192;
  if (!amk_json_get_float (config, "rope_theta", "rope_theta", 0.0, FALSE, 1e30, &hp->rope_theta, file, error) ||
      !amk_json_get_float (rope, "rope_theta", f_theta, 0.0, FALSE, 1e30, &hp->rope_theta, file, error) ||
      !amk_json_get_float (config, "partial_rotary_factor", "partial_rotary_factor", 0.0, FALSE, 1.0, &partial, file, error) ||
      !amk_json_get_float (rope, "partial_rotary_factor", f_partial, 0.0, FALSE, 1.0, &partial, file, error) ||
      !amk_json_get_string (rope, "rope_type", f_type, &type, file, error))
    return FALSE;
  if (type == NULL && !amk_json_get_string (rope, "type", f_type, &type, file, error))
    return FALSE;
  if (partial != 1.0f)
    return unsupported (error, file, f_partial, _("partial rotary embeddings are not supported"));
  if (type == NULL || strcmp (type, "default") == 0)
    return TRUE;
  if (strcmp (type, "llama3") != 0)
    {
      detail = g_strdup_printf (_("the RoPE type “%s” is not supported (only “default” and “llama3” are)"), type);
      return unsupported (error, file, f_type, detail);
    }
  hp->rope_factor = -1.0f;
  hp->rope_low_freq_factor = hp->rope_high_freq_factor = -1.0f;
  if (!amk_json_get_float (rope, "factor", f_factor, 0.0, FALSE, 1e6, &hp->rope_factor, file, error) ||
      !amk_json_get_float (rope, "low_freq_factor", f_low, 0.0, FALSE, 1e6, &hp->rope_low_freq_factor, file, error) ||
      !amk_json_get_float (rope, "high_freq_factor", f_high, 0.0, FALSE, 1e6, &hp->rope_high_freq_factor, file, error) ||
      !amk_json_get_uint (config, "max_position_embeddings", "max_position_embeddings", FALSE, 1, G_MAXINT32,
                 &max_pos, file, error) ||
      !amk_json_get_uint (config, "original_max_position_embeddings", "original_max_position_embeddings", FALSE,
                 1, G_MAXINT32, &original, file, error) ||
      !amk_json_get_uint (rope, "original_max_position_embeddings", f_orig, FALSE, 1, G_MAXINT32,
                 &original, file, error))
    return FALSE;
  if (hp->rope_factor < 0.0f)
    return invalid (error, file, f_factor, _("is missing"));
  if (hp->rope_low_freq_factor < 0.0f)
    return invalid (error, file, f_low, _("is missing"));
  if (hp->rope_high_freq_factor <= hp->rope_low_freq_factor)
    return invalid (error, file, f_high,
                      _("is missing or not above the low frequency factor"));
  if (original == 0)
    original = max_pos;
  if (original == 0)
    return invalid (error, file, f_orig, _("is missing"));
  hp->rope_original_context = (guint) original;
  return TRUE;
}

/* Fills `hp` from config.json; `arch` keeps the static architecture name. */
static gboolean
parse_config (JsonObject *config, AmkModelParams *hp, const char *file, GError **error)
{
  guint64 vocab = 0;
  const char *act = NULL;
  gboolean attention_bias = FALSE, mlp_bias = FALSE, sliding = FALSE;
  JsonNode *node;

  memset (hp, 0, sizeof *hp);
  if (!parse_architecture (config, file, &hp->architecture, error))
    return FALSE;
  if (amk_json_member (config, "quantization_config") != NULL)
    return unsupported (error, file, "quantization_config",
                        _("quantized checkpoints are not supported; use bf16, f16 or f32 weights"));
  if (!amk_json_get_u32 (config, "hidden_size", TRUE, 1, MAX_COUNT, &hp->hidden, file, error) ||
      !amk_json_get_u32 (config, "intermediate_size", TRUE, 1, MAX_COUNT, &hp->ffn, file, error) ||
      !amk_json_get_u32 (config, "num_hidden_layers", TRUE, 1, 65536, &hp->n_layers, file, error) ||
      !amk_json_get_u32 (config, "num_attention_heads", TRUE, 1, 65536, &hp->n_heads, file, error) ||
      !amk_json_get_uint (config, "vocab_size", "vocab_size", TRUE, 1, G_MAXINT32, &vocab, file, error))
    return FALSE;
  hp->vocab = vocab;
  hp->n_kv_heads = hp->n_heads;
  /* Qwen3Config's head_dim defaults to 128, LlamaConfig's to hidden / heads */
  hp->head_dim = g_str_equal (hp->architecture, "qwen3") ? 128 : hp->hidden / hp->n_heads;
  hp->eps = 1e-6f;
  if (!amk_json_get_u32 (config, "num_key_value_heads", FALSE, 1, hp->n_heads, &hp->n_kv_heads, file, error) ||
      !amk_json_get_u32 (config, "head_dim", FALSE, 2, 65536, &hp->head_dim, file, error) ||
      !amk_json_get_float (config, "rms_norm_eps", "rms_norm_eps", 0.0, TRUE, 1.0, &hp->eps, file, error) ||
      !amk_json_get_bool (config, "tie_word_embeddings", &hp->tied_embeddings, file, error) ||
      !amk_json_get_bool (config, "attention_bias", &attention_bias, file, error) ||
      !amk_json_get_bool (config, "mlp_bias", &mlp_bias, file, error) ||
      !amk_json_get_bool (config, "use_sliding_window", &sliding, file, error) ||
      !amk_json_get_string (config, "hidden_act", "hidden_act", &act, file, error))
    return FALSE;
  if (hp->n_heads % hp->n_kv_heads != 0)
    return invalid (error, file, "num_key_value_heads",
                      _("must divide num_attention_heads"));
  if (amk_json_member (config, "head_dim") == NULL && !g_str_equal (hp->architecture, "qwen3") &&
      hp->hidden % hp->n_heads != 0)
    return invalid (error, file, "num_attention_heads",
                      _("must divide hidden_size (or give head_dim)"));
  if (hp->head_dim % 2 != 0)
    return invalid (error, file, "head_dim", _("must be even"));
  if (act != NULL && strcmp (act, "silu") != 0)
    return unsupported (error, file, "hidden_act", _("only “silu” is supported"));
  if (attention_bias)
    return unsupported (error, file, "attention_bias", _("attention biases are not supported"));
  if (mlp_bias)
    return unsupported (error, file, "mlp_bias", _("MLP biases are not supported"));
  if (sliding)
    return unsupported (error, file, "use_sliding_window", _("sliding-window attention is not supported"));
  if ((node = amk_json_member (config, "layer_types")) != NULL)
    {
      JsonArray *types;

      if (!JSON_NODE_HOLDS_ARRAY (node))
        return invalid (error, file, "layer_types", _("must be an array"));
      types = json_node_get_array (node);
      for (guint i = 0; i < json_array_get_length (types); i++)
        {
          JsonNode *t = json_array_get_element (types, i);

          if (!JSON_NODE_HOLDS_VALUE (t) || json_node_get_value_type (t) != G_TYPE_STRING ||
              strcmp (json_node_get_string (t), "full_attention") != 0)
            return unsupported (error, file, "layer_types",
                                _("only “full_attention” layers are supported"));
        }
    }
  hp->qk_norm = g_str_equal (hp->architecture, "qwen3");
  return parse_rope (config, hp, file, error);
}

/**
 * amk_model_parse_hf_config:
 * @text: the contents of a config.json
 * @len: its length in bytes
 * @file: the file's name, for messages
 * @params: (out caller-allocates): the hyperparameters
 * @error: return location for a #GError
 *
 * Parses a Hugging Face config.json (untrusted) into @params, as
 * amk_model_build_from_hf() does; `params->architecture` is a static string,
 * `params->source` is @file.
 *
 * Returns: whether the config describes a model amk-glib can build
 */
gboolean
amk_model_parse_hf_config (const char      *text,
                           gsize            len,
                           const char      *file,
                           AmkModelParams  *params,
                           GError         **error)
{
  g_autoptr(JsonNode) root = NULL;
  g_autofree char *what = NULL;

  g_return_val_if_fail (text != NULL || len == 0, FALSE);
  g_return_val_if_fail (file != NULL, FALSE);
  g_return_val_if_fail (params != NULL, FALSE);

  what = g_strdup_printf ("“%s”", file);
  root = amk_json_parse_object (text, len, MAX_JSON_SIZE, MAX_JSON_DEPTH, what, error);
  if (root == NULL || !parse_config (json_node_get_object (root), params, file, error))
    return FALSE;
  params->source = file;
  return TRUE;
}

/* The weights */

/* transformers' names; the per-layer ones follow "model.layers.N." */
static const char * const hf_names[] = {
  [AMK_MODEL_WEIGHT_TOKEN_EMBD] = "model.embed_tokens.weight",
  [AMK_MODEL_WEIGHT_OUTPUT_NORM] = "model.norm.weight",
  [AMK_MODEL_WEIGHT_OUTPUT] = "lm_head.weight",
  [AMK_MODEL_WEIGHT_ATTN_NORM] = "input_layernorm.weight",
  [AMK_MODEL_WEIGHT_ATTN_Q] = "self_attn.q_proj.weight",
  [AMK_MODEL_WEIGHT_ATTN_K] = "self_attn.k_proj.weight",
  [AMK_MODEL_WEIGHT_ATTN_V] = "self_attn.v_proj.weight",
  [AMK_MODEL_WEIGHT_ATTN_OUTPUT] = "self_attn.o_proj.weight",
  [AMK_MODEL_WEIGHT_ATTN_Q_NORM] = "self_attn.q_norm.weight",
  [AMK_MODEL_WEIGHT_ATTN_K_NORM] = "self_attn.k_norm.weight",
  [AMK_MODEL_WEIGHT_FFN_NORM] = "post_attention_layernorm.weight",
  [AMK_MODEL_WEIGHT_FFN_GATE] = "mlp.gate_proj.weight",
  [AMK_MODEL_WEIGHT_FFN_UP] = "mlp.up_proj.weight",
  [AMK_MODEL_WEIGHT_FFN_DOWN] = "mlp.down_proj.weight",
};

/* Records where every weight the graph may ask for is, in whichever shard holds it
 * (Hugging Face's q/k rows are in rotate-half order already). */
static void
add_tensors (AmkModelSpec *spec, AmkSafetensors *st)
{
  for (guint w = 0; w < AMK_MODEL_N_WEIGHTS; w++)
    for (guint layer = 0; layer < (w >= AMK_MODEL_WEIGHT_FIRST_LAYER ? spec->params.n_layers : 1); layer++)
      {
        g_autofree char *name = amk_model_spec_tensor_name (spec, w, layer);
        const AmkSafetensorsTensor *t = amk_safetensors_find_tensor (st, name);
        AmkModelTensor *mt;

        if (t == NULL)
          continue;
        mt = amk_model_spec_add_tensor (spec, w, layer, t->file);
        mt->type = amk_safetensors_dtype_to_model (t->dtype);
        mt->type_name = amk_safetensors_dtype_name (t->dtype);
        mt->n_dims = t->n_dims;
        memcpy (mt->shape, t->shape, sizeof mt->shape);
        mt->n_elements = t->n_elements;
        mt->data = amk_safetensors_tensor_ref_data (t);
      }
}

/* The special tokens */

/* Appends one id of an "eos_token_id"-like field. The id must also have a piece in the
 * tokenizer: the embedding may be padded beyond the tokenizer's vocabulary, but a special
 * token there could be neither decoded nor set on the tokenizer. */
static gboolean
add_id (JsonNode *e, const char *name, GArray *ids, guint64 vocab, AmkTokenizer *tok,
        const char *file, const char *detail, GError **error)
{
  guint n_tokens = amk_tokenizer_get_vocab_size (tok);
  gint64 v;

  if (!amk_json_is_integer (e) || (v = json_node_get_int (e)) < 0 || (guint64) v >= vocab)
    return invalid (error, file, name, detail);
  if ((guint64) v >= n_tokens)
    {
      g_autofree char *beyond = g_strdup_printf (_("names the token id %" PRId64
                                                   ", but the tokenizer has only %u tokens"),
                                                 v, n_tokens);
      return invalid (error, file, name, beyond);
    }
  g_array_append_vals (ids, &(gint32) { (gint32) v }, 1);
  return TRUE;
}

/* Appends the ids of an "eos_token_id"-like field (an id, a list of ids, or null). */
static gboolean
add_ids (JsonObject *o, const char *name, GArray *ids, guint64 vocab, AmkTokenizer *tok,
         const char *file, GError **error)
{
  JsonNode *node = amk_json_member (o, name);
  g_autofree char *detail = NULL;

  if (node == NULL)
    return TRUE;
  detail = g_strdup_printf (_("must be a token id below the vocabulary size %" PRIu64
                              " or a list of them"), vocab);
  if (JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *array = json_node_get_array (node);

      for (guint i = 0; i < json_array_get_length (array); i++)
        if (!add_id (json_array_get_element (array, i), name, ids, vocab, tok, file, detail, error))
          return FALSE;
      return TRUE;
    }
  if (amk_json_is_integer (node))
    return add_id (node, name, ids, vocab, tok, file, detail, error);
  return invalid (error, file, name, detail);
}

/* tokenizer_config.json's "bos_token"/"eos_token": a string or {"content": string}. */
static gboolean
add_token (JsonObject *o, const char *name, AmkTokenizer *tok, GArray *ids, const char *file,
           GError **error)
{
  JsonNode *node = amk_json_member (o, name);
  const char *text = NULL;
  gint32 id;

  if (node == NULL)
    return TRUE;
  if (JSON_NODE_HOLDS_OBJECT (node))
    {
      g_autofree char *field = g_strconcat (name, ".content", NULL);

      if (!amk_json_get_string (json_node_get_object (node), "content", field, &text, file, error))
        return FALSE;
    }
  else if (!amk_json_get_string (o, name, name, &text, file, error))
    return FALSE;
  if (text != NULL && (id = amk_tokenizer_token_to_id (tok, text)) >= 0)
    g_array_append_val (ids, id);
  return TRUE;
}

/* tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"}
 * whose "default" one is the chat's; NULL when there is none (or another shape). */
static const char *
chat_template (JsonObject *tc)
{
  JsonNode *node = tc != NULL ? json_object_get_member (tc, "chat_template") : NULL;
  JsonArray *list;

  if (node != NULL && amk_json_is_string (node))
    return json_node_get_string (node);
  if (node == NULL || !JSON_NODE_HOLDS_ARRAY (node))
    return NULL;
  list = json_node_get_array (node);
  for (guint i = 0; i < json_array_get_length (list); i++)
    {
      JsonNode *item = json_array_get_element (list, i);
      JsonObject *o = JSON_NODE_HOLDS_OBJECT (item) ? json_node_get_object (item) : NULL;
      JsonNode *name = o != NULL ? json_object_get_member (o, "name") : NULL;
      JsonNode *text = o != NULL ? json_object_get_member (o, "template") : NULL;

      if (name != NULL && amk_json_is_string (name) && text != NULL && amk_json_is_string (text) &&
          g_strcmp0 (json_node_get_string (name), "default") == 0)
        return json_node_get_string (text);
    }
  return NULL;
}

/* BOS/EOS from tokenizer_config.json, generation_config.json and config.json (in that
 * order of preference for the one eos_id; every EOS id is kept in `eos`). */
static gboolean
load_special_tokens (const char    *dir,
                     AmkJsonFile   *config,
                     guint64        vocab,
                     AmkTokenizer  *tok,
                     GArray        *eos,
                     GError       **error)
{
  g_auto(AmkJsonFile) gen = { 0 };
  g_auto(AmkJsonFile) tc = { 0 };
  g_autoptr(GArray) bos = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) bos_tc = g_array_new (FALSE, FALSE, sizeof (gint32));
  JsonObject *cfg = amk_json_file_object (config);
  JsonObject *go, *to;
  gboolean add_bos = FALSE;

  if (!amk_json_file_load (&gen, dir, "generation_config.json", FALSE, MAX_JSON_SIZE,
                           MAX_JSON_DEPTH, error) ||
      !amk_json_file_load (&tc, dir, "tokenizer_config.json", FALSE, MAX_JSON_SIZE,
                           MAX_JSON_DEPTH, error))
    return FALSE;
  go = amk_json_file_object (&gen);
  to = amk_json_file_object (&tc);

  if (!add_token (to, "eos_token", tok, eos, tc.file, error) ||
      !add_ids (go, "eos_token_id", eos, vocab, tok, gen.file, error) ||
      !add_ids (cfg, "eos_token_id", eos, vocab, tok, config->file, error) ||
      !add_ids (go, "bos_token_id", bos, vocab, tok, gen.file, error) ||
      !add_ids (cfg, "bos_token_id", bos, vocab, tok, config->file, error) ||
      !add_token (to, "bos_token", tok, bos_tc, tc.file, error) ||
      !amk_json_get_bool (to, "add_bos_token", &add_bos, tc.file, error))
    return FALSE;
  amk_tokenizer_set_chat_template (tok, chat_template (to));
  if (bos->len > 0 || bos_tc->len > 0)
    amk_tokenizer_set_bos_id (tok, g_array_index (bos->len > 0 ? bos : bos_tc, gint32, 0));
  if (eos->len > 0)
    amk_tokenizer_set_eos_id (tok, g_array_index (eos, gint32, 0));
  amk_tokenizer_set_add_bos (tok, add_bos && amk_tokenizer_get_bos_id (tok) >= 0);
  return TRUE;
}

/**
 * amk_hf_model_read:
 * @dir: a Hugging Face checkpoint folder
 * @error: return location for a #GError
 *
 * Reads config.json, tokenizer.json and the special tokens of @dir, and where each
 * weight is in its safetensors files.
 *
 * Returns: (transfer full) (nullable): the description, free with amk_model_spec_free()
 */
AmkModelSpec *
amk_hf_model_read (const char  *dir,
                   GError     **error)
{
  g_auto(AmkJsonFile) config = { 0 };
  g_autoptr(AmkSafetensors) st = NULL;
  g_autoptr(AmkTokenizer) tok = NULL;
  g_autoptr(AmkModelSpec) spec = NULL;
  g_autoptr(GArray) eos_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree char *display = NULL;
  g_autofree char *tok_path = NULL;
  AmkModelParams hp;

  g_return_val_if_fail (dir != NULL, NULL);

  display = g_filename_display_name (dir);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_DIRECTORY,
                   _("“%s” is not a checkpoint folder"), display);
      return NULL;
    }
  if (!amk_json_file_load (&config, dir, "config.json", TRUE, MAX_JSON_SIZE, MAX_JSON_DEPTH,
                           error) ||
      !parse_config (amk_json_file_object (&config), &hp, config.file, error))
    return NULL;

  tok_path = g_build_filename (dir, "tokenizer.json", NULL);
  if (!g_file_test (tok_path, G_FILE_TEST_EXISTS))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("The checkpoint “%s” has no tokenizer.json"), display);
      return NULL;
    }
  tok = amk_tokenizer_new_from_json_file (tok_path, error);
  if (tok == NULL)
    return NULL;
  if (amk_tokenizer_get_vocab_size (tok) > hp.vocab)
    {
      g_autofree char *tok_display = g_filename_display_name (tok_path);

      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                   _("The tokenizer “%s” has %u tokens, more than the vocab_size %" PRIu64 " of “%s”"),
                   tok_display, amk_tokenizer_get_vocab_size (tok), hp.vocab, config.file);
      return NULL;
    }
  if (!load_special_tokens (dir, &config, hp.vocab, tok, eos_ids, error))
    return NULL;

  st = amk_safetensors_open (dir, error);
  if (st == NULL)
    return NULL;
  spec = amk_model_spec_new (display, hf_names, "model.layers.%u.%s");
  amk_model_spec_set_params (spec, &hp);
  amk_model_spec_set_tokenizer (spec, tok, eos_ids);
  add_tensors (spec, st);
  return g_steal_pointer (&spec);
}

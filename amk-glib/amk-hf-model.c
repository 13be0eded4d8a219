/* amk-hf-model.c: the Hugging Face checkpoint loader (untrusted input).
 *
 * A checkpoint folder holds config.json (the architecture and hyperparameters, parsed
 * with json-glib), model.safetensors or shards named by model.safetensors.index.json
 * (mapped, read with amk-safetensors.c), tokenizer.json, and optionally
 * generation_config.json and tokenizer_config.json (the special tokens). Supported:
 * LlamaForCausalLM (Llama 2/3.x, with "llama3" RoPE scaling) and Qwen3ForCausalLM
 * (q/k norm, a head_dim of its own). The weights become bf16 constants of the layer
 * graph in amk-model.c; a bf16 tensor is used in place (a slice of the mapped file),
 * an f16 or f32 one converted. Hugging Face's q/k rows are in rotate-half order already.
 *
 * Every problem is a GError in G_IO_ERROR naming the file and the field or tensor:
 * G_IO_ERROR_NOT_FOUND (a missing file or tensor), G_IO_ERROR_INVALID_DATA (corrupt
 * JSON, a wrong or missing field, a wrong shape), G_IO_ERROR_NOT_SUPPORTED (another
 * architecture or feature, a dtype that is not bf16, f16 or f32).
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
#include "amk-model-builder-private.h"
#include "amk-safetensors-private.h"
#include "amk-loader-private.h"

#define MAX_JSON_SIZE   (64u * 1024 * 1024)   /* config and tokenizer_config files */
#define MAX_JSON_DEPTH  64
#define MAX_COUNT       (1u << 20)            /* hidden size, heads, MLP size */

/* One JSON file of the folder, for messages. */
typedef struct {
  JsonNode *root;
  char     *file;       /* display name */
} JsonFile;

static void
json_file_clear (JsonFile *f)
{
  g_clear_pointer (&f->root, json_node_unref);
  g_clear_pointer (&f->file, g_free);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (JsonFile, json_file_clear)

static gboolean
json_fail (GError **error, gint code, const char *file, const char *field, const char *detail)
{
  g_set_error (error, G_IO_ERROR, code, _("“%s”, field “%s”: %s"), file, field, detail);
  return FALSE;
}

/* JSON text without NUL bytes nesting at most MAX_JSON_DEPTH levels (json-glib's parser
 * recurses). */
static gboolean
check_json_shape (const char *text, gsize len, const char *file, GError **error)
{
  switch (amk_json_scan (text, len, MAX_JSON_DEPTH))
    {
    case AMK_JSON_SCAN_NUL:
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("“%s” is not valid JSON: it holds a NUL byte"), file);
      return FALSE;
    case AMK_JSON_SCAN_TOO_DEEP:
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("“%s” nests deeper than %d levels"), file, MAX_JSON_DEPTH);
      return FALSE;
    default:
      return TRUE;
    }
}

/* Parses untrusted JSON text that must be an object; `file` names it in messages. */
static JsonNode *
parse_json_object (const char *text, gsize len, const char *file, GError **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) local = NULL;
  JsonNode *root;

  if (len > MAX_JSON_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("“%s” is larger than the limit of %u bytes"), file, MAX_JSON_SIZE);
      return NULL;
    }
  if (text == NULL)
    text = "";
  if (!check_json_shape (text, len, file, error))
    return NULL;
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, text, (gssize) len, &local))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("“%s” is not valid JSON: %s"), file, local->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("“%s” is not a JSON object"), file);
      return NULL;
    }
  return json_node_ref (root);
}

/* Reads `name` of `dir` as a JSON object. A missing optional file leaves f->root NULL. */
static gboolean
load_json (const char *dir, const char *name, gboolean required, JsonFile *f, GError **error)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autoptr(GMappedFile) mapped = NULL;
  g_autoptr(GError) local = NULL;

  f->file = g_filename_display_name (path);
  if (!required && !g_file_test (path, G_FILE_TEST_EXISTS))
    return TRUE;
  mapped = g_mapped_file_new (path, FALSE, &local);
  if (mapped == NULL)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_file_error (local->code),
                   _("Cannot read “%s”: %s"), f->file, local->message);
      return FALSE;
    }
  f->root = parse_json_object (g_mapped_file_get_contents (mapped),
                               g_mapped_file_get_length (mapped), f->file, error);
  return f->root != NULL;
}

/* A member that is there and not null. */
static JsonNode *
member (JsonObject *o, const char *name)
{
  JsonNode *node = o != NULL ? json_object_get_member (o, name) : NULL;

  return node != NULL && !JSON_NODE_HOLDS_NULL (node) ? node : NULL;
}

static gboolean
is_integer (JsonNode *node)
{
  return JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_INT64;
}

/* An integer field in [min, max]; absent (or null) leaves `value` as it is unless
 * required. `field` is the name in messages (a dotted path). */
static gboolean
get_uint (JsonObject  *o,
          const char  *name,
          const char  *field,
          gboolean     required,
          guint64      min,
          guint64      max,
          guint64     *value,
          const char  *file,
          GError     **error)
{
  JsonNode *node = member (o, name);
  g_autofree char *detail = NULL;
  gint64 v;

  if (node == NULL)
    return !required || json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, _("is missing"));
  if (!is_integer (node) || (v = json_node_get_int (node)) < 0 || (guint64) v < min ||
      (guint64) v > max)
    {
      detail = g_strdup_printf (_("must be an integer from %" PRIu64 " to %" PRIu64), min, max);
      return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, detail);
    }
  *value = (guint64) v;
  return TRUE;
}

static gboolean
get_u32 (JsonObject *o, const char *name, gboolean required, guint min, guint max,
         guint *value, const char *file, GError **error)
{
  guint64 v = *value;

  if (!get_uint (o, name, name, required, min, max, &v, file, error))
    return FALSE;
  *value = (guint) v;
  return TRUE;
}

/* A number field, finite and in (min, max] (min itself when min_inclusive). */
static gboolean
get_float (JsonObject  *o,
           const char  *name,
           const char  *field,
           gdouble      min,
           gboolean     min_inclusive,
           gdouble      max,
           gfloat      *value,
           const char  *file,
           GError     **error)
{
  JsonNode *node = member (o, name);
  g_autofree char *detail = NULL;
  gdouble v = 0;

  if (node == NULL)
    return TRUE;
  if (is_integer (node))
    v = (gdouble) json_node_get_int (node);
  else if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_DOUBLE)
    v = json_node_get_double (node);
  else
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, _("must be a number"));
  if (!(min_inclusive ? v >= min : v > min) || !(v <= max))
    {
      detail = g_strdup_printf (_("must be a number from %g to %g"), min, max);
      return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, detail);
    }
  *value = (gfloat) v;
  return TRUE;
}

static gboolean
get_bool (JsonObject *o, const char *name, gboolean *value, const char *file, GError **error)
{
  JsonNode *node = member (o, name);

  if (node == NULL)
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_BOOLEAN)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, name, _("must be true or false"));
  *value = json_node_get_boolean (node);
  return TRUE;
}

/* A string field; absent leaves *value NULL. Borrowed from the node. */
static gboolean
get_string (JsonObject *o, const char *name, const char *field, const char **value,
            const char *file, GError **error)
{
  JsonNode *node = member (o, name);

  *value = NULL;
  if (node == NULL)
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, _("must be a string"));
  *value = json_node_get_string (node);
  return TRUE;
}

static gboolean
unsupported (GError **error, const char *file, const char *field, const char *detail)
{
  return json_fail (error, G_IO_ERROR_NOT_SUPPORTED, file, field, detail);
}

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
  JsonNode *node = member (config, "architectures");
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
        return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field,
                          _("must be an array of class names"));
      if (json_array_get_length (array) > 1)
        return unsupported (error, file, field, _("names more than one architecture"));
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
      if (!get_string (config, "model_type", field, &name, file, error))
        return FALSE;
      if (name == NULL)
        return json_fail (error, G_IO_ERROR_INVALID_DATA, file, "architectures", _("is missing"));
      for (guint i = 0; i < G_N_ELEMENTS (known); i++)
        if (strcmp (name, known[i].model_type) == 0)
          {
            *arch = known[i].model_type;
            return TRUE;
          }
    }
  detail = g_strdup_printf (_("the architecture “%s” is not supported (only LlamaForCausalLM "
                              "and Qwen3ForCausalLM are)"), name);
  return unsupported (error, file, field, detail);
}

/* RoPE: "rope_parameters" (transformers 5) or "rope_scaling" and "rope_theta" (4.x);
 * rope types "default" and "llama3". */
static gboolean
parse_rope (JsonObject *config, AmkModelParams *hp, const char *file, GError **error)
{
  const char *field = "rope_parameters";
  JsonNode *node = member (config, field);
  JsonObject *rope = NULL;
  const char *type = NULL;
  gfloat partial = 1.0f;
  guint64 original = 0, max_pos = 0;
  g_autofree char *f_theta = NULL, *f_type = NULL, *f_factor = NULL, *f_low = NULL;
  g_autofree char *f_high = NULL, *f_orig = NULL, *f_partial = NULL, *detail = NULL;

  if (node == NULL)
    node = member (config, field = "rope_scaling");
  if (node != NULL)
    {
      if (!JSON_NODE_HOLDS_OBJECT (node))
        return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, _("must be an object"));
      rope = json_node_get_object (node);
      /* per layer type (transformers 5, models with sliding layers): take the full one */
      if (member (rope, "full_attention") != NULL && member (rope, "rope_type") == NULL &&
          member (rope, "type") == NULL)
        {
          node = member (rope, "full_attention");
          field = "rope_parameters.full_attention";
          if (!JSON_NODE_HOLDS_OBJECT (node))
            return json_fail (error, G_IO_ERROR_INVALID_DATA, file, field, _("must be an object"));
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
  if (!get_float (config, "rope_theta", "rope_theta", 0.0, FALSE, 1e30, &hp->rope_theta, file, error) ||
      !get_float (rope, "rope_theta", f_theta, 0.0, FALSE, 1e30, &hp->rope_theta, file, error) ||
      !get_float (config, "partial_rotary_factor", "partial_rotary_factor", 0.0, FALSE, 1.0, &partial, file, error) ||
      !get_float (rope, "partial_rotary_factor", f_partial, 0.0, FALSE, 1.0, &partial, file, error) ||
      !get_string (rope, "rope_type", f_type, &type, file, error))
    return FALSE;
  if (type == NULL && !get_string (rope, "type", f_type, &type, file, error))
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
  if (!get_float (rope, "factor", f_factor, 0.0, FALSE, 1e6, &hp->rope_factor, file, error) ||
      !get_float (rope, "low_freq_factor", f_low, 0.0, FALSE, 1e6, &hp->rope_low_freq_factor, file, error) ||
      !get_float (rope, "high_freq_factor", f_high, 0.0, FALSE, 1e6, &hp->rope_high_freq_factor, file, error) ||
      !get_uint (config, "max_position_embeddings", "max_position_embeddings", FALSE, 1, G_MAXINT32,
                 &max_pos, file, error) ||
      !get_uint (config, "original_max_position_embeddings", "original_max_position_embeddings", FALSE,
                 1, G_MAXINT32, &original, file, error) ||
      !get_uint (rope, "original_max_position_embeddings", f_orig, FALSE, 1, G_MAXINT32,
                 &original, file, error))
    return FALSE;
  if (hp->rope_factor < 0.0f)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, f_factor, _("is missing"));
  if (hp->rope_low_freq_factor < 0.0f)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, f_low, _("is missing"));
  if (hp->rope_high_freq_factor <= hp->rope_low_freq_factor)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, f_high,
                      _("is missing or not above the low frequency factor"));
  if (original == 0)
    original = max_pos;
  if (original == 0)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, f_orig, _("is missing"));
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
  if (member (config, "quantization_config") != NULL)
    return unsupported (error, file, "quantization_config",
                        _("quantized checkpoints are not supported; use bf16, f16 or f32 weights"));
  if (!get_u32 (config, "hidden_size", TRUE, 1, MAX_COUNT, &hp->hidden, file, error) ||
      !get_u32 (config, "intermediate_size", TRUE, 1, MAX_COUNT, &hp->ffn, file, error) ||
      !get_u32 (config, "num_hidden_layers", TRUE, 1, 65536, &hp->n_layers, file, error) ||
      !get_u32 (config, "num_attention_heads", TRUE, 1, 65536, &hp->n_heads, file, error) ||
      !get_uint (config, "vocab_size", "vocab_size", TRUE, 1, G_MAXINT32, &vocab, file, error))
    return FALSE;
  hp->vocab = vocab;
  hp->n_kv_heads = hp->n_heads;
  /* Qwen3Config's head_dim defaults to 128, LlamaConfig's to hidden / heads */
  hp->head_dim = g_str_equal (hp->architecture, "qwen3") ? 128 : hp->hidden / hp->n_heads;
  hp->eps = 1e-6f;
  if (!get_u32 (config, "num_key_value_heads", FALSE, 1, hp->n_heads, &hp->n_kv_heads, file, error) ||
      !get_u32 (config, "head_dim", FALSE, 2, 65536, &hp->head_dim, file, error) ||
      !get_float (config, "rms_norm_eps", "rms_norm_eps", 0.0, TRUE, 1.0, &hp->eps, file, error) ||
      !get_bool (config, "tie_word_embeddings", &hp->tied_embeddings, file, error) ||
      !get_bool (config, "attention_bias", &attention_bias, file, error) ||
      !get_bool (config, "mlp_bias", &mlp_bias, file, error) ||
      !get_bool (config, "use_sliding_window", &sliding, file, error) ||
      !get_string (config, "hidden_act", "hidden_act", &act, file, error))
    return FALSE;
  if (hp->n_heads % hp->n_kv_heads != 0)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, "num_key_value_heads",
                      _("must divide num_attention_heads"));
  if (member (config, "head_dim") == NULL && !g_str_equal (hp->architecture, "qwen3") &&
      hp->hidden % hp->n_heads != 0)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, "num_attention_heads",
                      _("must divide hidden_size (or give head_dim)"));
  if (hp->head_dim % 2 != 0)
    return json_fail (error, G_IO_ERROR_INVALID_DATA, file, "head_dim", _("must be even"));
  if (act != NULL && strcmp (act, "silu") != 0)
    return unsupported (error, file, "hidden_act", _("only “silu” is supported"));
  if (attention_bias)
    return unsupported (error, file, "attention_bias", _("attention biases are not supported"));
  if (mlp_bias)
    return unsupported (error, file, "mlp_bias", _("MLP biases are not supported"));
  if (sliding)
    return unsupported (error, file, "use_sliding_window", _("sliding-window attention is not supported"));
  if ((node = member (config, "layer_types")) != NULL)
    {
      JsonArray *types;

      if (!JSON_NODE_HOLDS_ARRAY (node))
        return json_fail (error, G_IO_ERROR_INVALID_DATA, file, "layer_types", _("must be an array"));
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

  g_return_val_if_fail (text != NULL || len == 0, FALSE);
  g_return_val_if_fail (file != NULL, FALSE);
  g_return_val_if_fail (params != NULL, FALSE);

  root = parse_json_object (text, len, file, error);
  if (root == NULL || !parse_config (json_node_get_object (root), params, file, error))
    return FALSE;
  params->source = file;
  return TRUE;
}

/* The weights */

typedef struct {
  AmkModelWeightSource  parent;
  AmkSafetensors       *st;
  const char           *dir;    /* display name */
} HfSource;

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

static char *
shape_string (const guint64 *shape, guint n_dims)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < n_dims; i++)
    g_string_append_printf (s, "%s%" PRIu64, i > 0 ? ", " : "", shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static GBytes *
hf_load (AmkModelWeightSource  *source,
         AmkModelWeight         weight,
         guint                  layer,
         guint64                rows,
         guint64                cols,
         char                 **name_out,
         GError               **error)
{
  HfSource *s = (HfSource *) source;
  g_autofree char *name = NULL;
  g_autofree guint16 *data = NULL;
  const AmkSafetensorsTensor *t;
  const guint64 expected[2] = { rows > 0 ? rows : cols, cols };
  const guint n_dims = rows > 0 ? 2 : 1;

  g_return_val_if_fail ((guint) weight < G_N_ELEMENTS (hf_names), NULL);

  name = weight >= AMK_MODEL_WEIGHT_ATTN_NORM
           ? g_strdup_printf ("model.layers.%u.%s", layer, hf_names[weight])
           : g_strdup (hf_names[weight]);
  t = amk_safetensors_find_tensor (s->st, name);
  if (t == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("The checkpoint “%s” has no tensor “%s”"), s->dir, name);
      return NULL;
    }
  if (t->n_dims != n_dims || t->shape[0] != expected[0] || (n_dims == 2 && t->shape[1] != cols))
    {
      g_autofree char *got = shape_string (t->shape, t->n_dims);
      g_autofree char *want = shape_string (expected, n_dims);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The tensor “%s” of “%s” has the shape %s; the config asks for %s"),
                   name, t->file, got, want);
      return NULL;
    }
  if (t->dtype != AMK_SAFETENSORS_DTYPE_BF16 && t->dtype != AMK_SAFETENSORS_DTYPE_F16 &&
      t->dtype != AMK_SAFETENSORS_DTYPE_F32)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                   _("The tensor “%s” of “%s” has the dtype %s; only BF16, F16 and F32 are supported"),
                   name, t->file, amk_safetensors_dtype_name (t->dtype));
      return NULL;
    }
  *name_out = g_strdup (name);
  /* bf16 as the program wants it: the mapped file's bytes themselves */
  if (t->dtype == AMK_SAFETENSORS_DTYPE_BF16 && G_BYTE_ORDER == G_LITTLE_ENDIAN &&
      ((guintptr) t->data) % 2 == 0)
    return amk_safetensors_tensor_ref_data (t);
  data = g_try_new (guint16, MAX (t->n_elements, 1));
  if (data == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   _("Out of memory loading the tensor “%s”"), name);
      g_clear_pointer (name_out, g_free);
      return NULL;
    }
  if (!amk_safetensors_tensor_to_bf16 (t, data, error))
    {
      g_clear_pointer (name_out, g_free);
      return NULL;
    }
  return g_bytes_new_take (g_steal_pointer (&data), t->n_elements * sizeof (guint16));
}

/* The special tokens */

/* Appends the ids of an "eos_token_id"-like field (an id, a list of ids, or null). */
static gboolean
add_ids (JsonObject *o, const char *name, GArray *ids, guint64 vocab, const char *file,
         GError **error)
{
  JsonNode *node = member (o, name);
  g_autofree char *detail = NULL;

  if (node == NULL)
    return TRUE;
  detail = g_strdup_printf (_("must be a token id below the vocabulary size %" PRIu64
                              " or a list of them"), vocab);
  if (JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *array = json_node_get_array (node);

      for (guint i = 0; i < json_array_get_length (array); i++)
        {
          JsonNode *e = json_array_get_element (array, i);
          gint64 v;

          if (!is_integer (e) || (v = json_node_get_int (e)) < 0 || (guint64) v >= vocab)
            return json_fail (error, G_IO_ERROR_INVALID_DATA, file, name, detail);
          g_array_append_vals (ids, &(gint32) { (gint32) v }, 1);
        }
      return TRUE;
    }
  if (is_integer (node))
    {
      gint64 v = json_node_get_int (node);

      if (v < 0 || (guint64) v >= vocab)
        return json_fail (error, G_IO_ERROR_INVALID_DATA, file, name, detail);
      g_array_append_vals (ids, &(gint32) { (gint32) v }, 1);
      return TRUE;
    }
  return json_fail (error, G_IO_ERROR_INVALID_DATA, file, name, detail);
}

/* tokenizer_config.json's "bos_token"/"eos_token": a string or {"content": string}. */
static gboolean
add_token (JsonObject *o, const char *name, AmkTokenizer *tok, GArray *ids, const char *file,
           GError **error)
{
  JsonNode *node = member (o, name);
  const char *text = NULL;
  gint32 id;

  if (node == NULL)
    return TRUE;
  if (JSON_NODE_HOLDS_OBJECT (node))
    {
      g_autofree char *field = g_strconcat (name, ".content", NULL);

      if (!get_string (json_node_get_object (node), "content", field, &text, file, error))
        return FALSE;
    }
  else if (!get_string (o, name, name, &text, file, error))
    return FALSE;
  if (text != NULL && (id = amk_tokenizer_token_to_id (tok, text)) >= 0)
    g_array_append_val (ids, id);
  return TRUE;
}

static void
append_unique (GArray *to, GArray *from)
{
  for (guint i = 0; i < from->len; i++)
    {
      gint32 id = g_array_index (from, gint32, i);
      gboolean seen = FALSE;

      for (guint j = 0; j < to->len && !seen; j++)
        seen = g_array_index (to, gint32, j) == id;
      if (!seen)
        g_array_append_val (to, id);
    }
}

/* BOS/EOS from tokenizer_config.json, generation_config.json and config.json (in that
 * order of preference for the one eos_id; every EOS id is kept). */
static gboolean
load_special_tokens (const char    *dir,
                     JsonFile      *config,
                     guint64        vocab,
                     AmkTokenizer  *tok,
                     GArray        *eos_ids,
                     GError       **error)
{
  g_auto(JsonFile) gen = { 0 };
  g_auto(JsonFile) tc = { 0 };
  g_autoptr(GArray) bos = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) bos_tc = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autoptr(GArray) eos = g_array_new (FALSE, FALSE, sizeof (gint32));
  JsonObject *cfg = json_node_get_object (config->root);
  JsonObject *go, *to;
  gboolean add_bos = FALSE;

  if (!load_json (dir, "generation_config.json", FALSE, &gen, error) ||
      !load_json (dir, "tokenizer_config.json", FALSE, &tc, error))
    return FALSE;
  go = gen.root != NULL ? json_node_get_object (gen.root) : NULL;
  to = tc.root != NULL ? json_node_get_object (tc.root) : NULL;

  if (!add_token (to, "eos_token", tok, eos, tc.file, error) ||
      !add_ids (go, "eos_token_id", eos, vocab, gen.file, error) ||
      !add_ids (cfg, "eos_token_id", eos, vocab, config->file, error) ||
      !add_ids (go, "bos_token_id", bos, vocab, gen.file, error) ||
      !add_ids (cfg, "bos_token_id", bos, vocab, config->file, error) ||
      !add_token (to, "bos_token", tok, bos_tc, tc.file, error) ||
      !get_bool (to, "add_bos_token", &add_bos, tc.file, error))
    return FALSE;
  append_unique (bos, bos_tc);
  append_unique (eos_ids, eos);
  if (bos->len > 0)
    amk_tokenizer_set_bos_id (tok, g_array_index (bos, gint32, 0));
  if (eos_ids->len > 0)
    amk_tokenizer_set_eos_id (tok, g_array_index (eos_ids, gint32, 0));
  amk_tokenizer_set_add_bos (tok, add_bos && amk_tokenizer_get_bos_id (tok) >= 0);
  return TRUE;
}

/**
 * amk_model_build_from_hf:
 * @dir: a Hugging Face checkpoint folder
 * @n_queues: the program's queue count
 * @context: the KV cache length (positions)
 * @error: return location for a #GError
 *
 * Reads config.json, the safetensors weights and tokenizer.json of @dir and builds the
 * decode step with amk_model_build_graph().
 *
 * Returns: (transfer full) (nullable): the build, free with amk_model_build_free()
 */
AmkModelBuild *
amk_model_build_from_hf (const char  *dir,
                         guint        n_queues,
                         guint        context,
                         GError     **error)
{
  g_auto(JsonFile) config = { 0 };
  g_autoptr(AmkSafetensors) st = NULL;
  g_autoptr(AmkTokenizer) tok = NULL;
  g_autoptr(AmkModelBuild) build = NULL;
  g_autoptr(GArray) eos_ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree char *display = NULL;
  g_autofree char *tok_path = NULL;
  AmkModelParams hp;
  HfSource source = { { hf_load }, NULL, NULL };

  g_return_val_if_fail (dir != NULL, NULL);
  g_return_val_if_fail (n_queues > 0, NULL);
  g_return_val_if_fail (context > 0, NULL);

  display = g_filename_display_name (dir);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_DIRECTORY,
                   _("“%s” is not a checkpoint folder"), display);
      return NULL;
    }
  if (!load_json (dir, "config.json", TRUE, &config, error) ||
      !parse_config (json_node_get_object (config.root), &hp, config.file, error))
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

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The tokenizer “%s” has %u tokens, more than the vocab_size %" PRIu64 " of “%s”"),
                   tok_display, amk_tokenizer_get_vocab_size (tok), hp.vocab, config.file);
      return NULL;
    }
  if (!load_special_tokens (dir, &config, hp.vocab, tok, eos_ids, error))
    return NULL;

  st = amk_safetensors_open (dir, error);
  if (st == NULL)
    return NULL;
  source.st = st;
  source.dir = display;
  build = amk_model_build_graph (&hp, &source.parent, tok, n_queues, context, error);
  if (build == NULL)
    return NULL;
  g_free (build->eos_ids);
  build->n_eos_ids = eos_ids->len;
  build->eos_ids = (gint32 *) g_array_free (g_steal_pointer (&eos_ids), FALSE);
  return g_steal_pointer (&build);
}

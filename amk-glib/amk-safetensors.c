/* amk-safetensors.c: the safetensors file parser (untrusted input).
 *
 * Each file is mapped (or held as GBytes). Before json-glib sees a header its nesting
 * depth is checked (json-glib's parser recurses, and no valid header nests more than
 * three levels), then every entry is validated: dtype, shape, data_offsets within the
 * data section, consistent with dtype x shape, and not overlapping another tensor.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n-lib.h>
#include <gio/gio.h>
#include <json-glib/json-glib.h>

#include "amk-safetensors-private.h"
#include "amk-model-spec-private.h"
#include "amk-dtype-private.h"
#include "amk-loader-private.h"

#define MAX_JSON_DEPTH 8

typedef struct {
  GBytes *bytes;
  char   *name;          /* display name, for messages */
} Shard;

struct _AmkSafetensors {
  GPtrArray  *shards;    /* Shard* */
  GPtrArray  *tensors;   /* AmkSafetensorsTensor* */
  GHashTable *index;     /* name -> AmkSafetensorsTensor* */
  GHashTable *metadata;  /* string -> string ("__metadata__" of the first file) */
};

static const struct {
  const char *name;
  guint       size;
} dtypes[] = {
  [AMK_SAFETENSORS_DTYPE_BOOL] = { "BOOL", 1 },
  [AMK_SAFETENSORS_DTYPE_U8] = { "U8", 1 },
  [AMK_SAFETENSORS_DTYPE_I8] = { "I8", 1 },
  [AMK_SAFETENSORS_DTYPE_F8_E5M2] = { "F8_E5M2", 1 },
  [AMK_SAFETENSORS_DTYPE_F8_E4M3] = { "F8_E4M3", 1 },
  [AMK_SAFETENSORS_DTYPE_I16] = { "I16", 2 },
  [AMK_SAFETENSORS_DTYPE_U16] = { "U16", 2 },
  [AMK_SAFETENSORS_DTYPE_F16] = { "F16", 2 },
  [AMK_SAFETENSORS_DTYPE_BF16] = { "BF16", 2 },
  [AMK_SAFETENSORS_DTYPE_I32] = { "I32", 4 },
  [AMK_SAFETENSORS_DTYPE_U32] = { "U32", 4 },
  [AMK_SAFETENSORS_DTYPE_F32] = { "F32", 4 },
  [AMK_SAFETENSORS_DTYPE_F64] = { "F64", 8 },
  [AMK_SAFETENSORS_DTYPE_I64] = { "I64", 8 },
  [AMK_SAFETENSORS_DTYPE_U64] = { "U64", 8 },
};

const char *
amk_safetensors_dtype_name (AmkSafetensorsDType dtype)
{
  return (guint) dtype < G_N_ELEMENTS (dtypes) ? dtypes[dtype].name : "?";
}

guint
amk_safetensors_dtype_size (AmkSafetensorsDType dtype)
{
  return (guint) dtype < G_N_ELEMENTS (dtypes) ? dtypes[dtype].size : 0;
}

/* A malformed file: "Cannot read the safetensors file “file”: detail". */
#define fail(error, code, file, ...) amk_loader_fail (error, code, "safetensors", file, __VA_ARGS__)

static void
shard_free (Shard *shard)
{
  g_bytes_unref (shard->bytes);
  g_free (shard->name);
  g_free (shard);
}

static void
tensor_free (AmkSafetensorsTensor *t)
{
  g_free ((char *) t->name);
  g_free (t);
}

/* A JSON object of `file`; `what` is "header" or "index" (the size was checked). */
static JsonNode *
parse_json (const char *text, gsize len, const char *file, gboolean index, GError **error)
{
  /* TRANSLATORS: %s is a file's name */
  g_autofree char *what = g_strdup_printf (index ? _("The safetensors index “%s”")
                                                 : _("The header of the safetensors file “%s”"),
                                           file);

  return amk_json_parse_object (text, len, AMK_SAFETENSORS_MAX_HEADER, MAX_JSON_DEPTH, what,
                                error);
}

static gint
compare_offsets (gconstpointer a, gconstpointer b)
{
  const AmkSafetensorsTensor *x = *(AmkSafetensorsTensor * const *) a;
  const AmkSafetensorsTensor *y = *(AmkSafetensorsTensor * const *) b;

  if (x->data != y->data)
    return x->data < y->data ? -1 : 1;
  return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

static gboolean
parse_entry (const char *file, const char *name, JsonNode *node, const guint8 *data,
             gsize data_size, AmkSafetensorsTensor *t, GError **error)
{
  JsonObject *entry;
  JsonNode *dtype_node, *shape_node, *offsets_node;
  JsonArray *shape, *offsets;
  const char *dtype;
  guint64 n = 1, begin, end, n_bytes;
  guint d;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("the entry of tensor “%s” is not an object"), name);
  entry = json_node_get_object (node);

  dtype_node = json_object_get_member (entry, "dtype");
  if (dtype_node == NULL || !JSON_NODE_HOLDS_VALUE (dtype_node) ||
      json_node_get_value_type (dtype_node) != G_TYPE_STRING)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("tensor “%s” has no dtype string"), name);
  dtype = json_node_get_string (dtype_node);
  for (d = 0; d < G_N_ELEMENTS (dtypes); d++)
    if (strcmp (dtype, dtypes[d].name) == 0)
      break;
  if (d == G_N_ELEMENTS (dtypes))
    return fail (error, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE, file, _("tensor “%s” has the unknown dtype “%s”"), name, dtype);
  t->dtype = d;

  shape_node = json_object_get_member (entry, "shape");
  if (shape_node == NULL || !JSON_NODE_HOLDS_ARRAY (shape_node))
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("tensor “%s” has no shape array"), name);
  shape = json_node_get_array (shape_node);
  if (json_array_get_length (shape) > AMK_SAFETENSORS_MAX_DIMS)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("tensor “%s” has %u dimensions, more than %d"),
                 name, json_array_get_length (shape), AMK_SAFETENSORS_MAX_DIMS);
  t->n_dims = json_array_get_length (shape);
  for (guint i = 0; i < t->n_dims; i++)
    {
      if (!amk_json_node_get_uint (json_array_get_element (shape, i), &t->shape[i]))
        return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                     _("dimension %u of tensor “%s” is not a non-negative integer"), i, name);
      if (!g_uint64_checked_mul (&n, n, t->shape[i]))
        return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("the shape of tensor “%s” overflows"), name);
    }
  t->n_elements = n;

  offsets_node = json_object_get_member (entry, "data_offsets");
  if (offsets_node == NULL || !JSON_NODE_HOLDS_ARRAY (offsets_node) ||
      json_array_get_length (offsets = json_node_get_array (offsets_node)) != 2 ||
      !amk_json_node_get_uint (json_array_get_element (offsets, 0), &begin) ||
      !amk_json_node_get_uint (json_array_get_element (offsets, 1), &end))
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                 _("tensor “%s” has no data_offsets pair of non-negative integers"), name);
  if (begin > end || end > data_size)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                 _("the data_offsets [%" PRIu64 ", %" PRIu64 "] of tensor “%s” are outside the %zu bytes of data"),
                 begin, end, name, data_size);
  if (!g_uint64_checked_mul (&n_bytes, n, dtypes[d].size) || n_bytes != end - begin)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                 _("tensor “%s” has %" PRIu64 " bytes of data, but its dtype and shape need %" PRIu64 " elements of %u bytes"),
                 name, end - begin, n, dtypes[d].size);
  t->data = data + begin;
  t->n_bytes = (gsize) n_bytes;
  return TRUE;
}

/* Parses one file's bytes and adds its tensors. */
static gboolean
add_file (AmkSafetensors *self, GBytes *bytes, const char *file, GError **error)
{
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GPtrArray) mine = g_ptr_array_new ();
  g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func ((GDestroyNotify) tensor_free);
  const guint8 *base;
  gsize size, data_size;
  guint64 header_len;
  JsonObject *object;
  JsonObjectIter iter;
  const char *member;
  JsonNode *node;
  Shard *shard;

  base = g_bytes_get_data (bytes, &size);
  if (size < 8)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                 _("the file is truncated: %zu bytes, less than the 8 of the header length"), size);
  memcpy (&header_len, base, 8);
  header_len = GUINT64_FROM_LE (header_len);
  if (header_len > AMK_SAFETENSORS_MAX_HEADER)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                 _("the header length %" PRIu64 " exceeds the limit of %u bytes"),
                 header_len, AMK_SAFETENSORS_MAX_HEADER);
  if (header_len > size - 8)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                 _("the header length %" PRIu64 " runs past the end of the file (%zu bytes)"),
                 header_len, size);
  root = parse_json ((const char *) base + 8, (gsize) header_len, file, FALSE, error);
  if (root == NULL)
    return FALSE;
  data_size = size - 8 - (gsize) header_len;
  object = json_node_get_object (root);

  json_object_iter_init (&iter, object);
  while (json_object_iter_next (&iter, &member, &node))
    {
      AmkSafetensorsTensor *t;

      if (strcmp (member, "__metadata__") == 0)
        {
          JsonObjectIter meta;
          const char *key;
          JsonNode *value;

          if (!JSON_NODE_HOLDS_OBJECT (node))
            return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("__metadata__ is not an object"));
          json_object_iter_init (&meta, json_node_get_object (node));
          while (json_object_iter_next (&meta, &key, &value))
            {
              if (!JSON_NODE_HOLDS_VALUE (value) || json_node_get_value_type (value) != G_TYPE_STRING)
                return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                             _("the __metadata__ value of “%s” is not a string"), key);
              if (self->shards->len == 0)
                g_hash_table_insert (self->metadata, g_strdup (key), g_strdup (json_node_get_string (value)));
            }
          continue;
        }
      if (g_hash_table_contains (self->index, member))
        return fail (error, AMK_MODEL_ERROR_CORRUPT, file, _("tensor “%s” appears twice"), member);

      t = g_new0 (AmkSafetensorsTensor, 1);
      t->name = g_strdup (member);
      g_ptr_array_add (owned, t);
      if (!parse_entry (file, member, node, base + 8 + header_len, data_size, t, error))
        return FALSE;
      g_ptr_array_add (mine, t);
    }

  /* no two tensors may share a byte: sorted by start, each tensor is checked against the
   * one reaching furthest so far, not just its neighbour, so a short or empty tensor in
   * between cannot hide an overlap; empty tensors own no byte and take no part */
  g_ptr_array_sort (mine, compare_offsets);
  {
    const AmkSafetensorsTensor *furthest = NULL;

    for (guint i = 0; i < mine->len; i++)
      {
        const AmkSafetensorsTensor *b = g_ptr_array_index (mine, i);

        if (b->n_bytes == 0)
          continue;
        if (furthest != NULL && furthest->data + furthest->n_bytes > b->data)
          return fail (error, AMK_MODEL_ERROR_CORRUPT, file,
                       _("the data of tensors “%s” and “%s” overlap"), furthest->name, b->name);
        if (furthest == NULL || b->data + b->n_bytes > furthest->data + furthest->n_bytes)
          furthest = b;
      }
  }

  shard = g_new0 (Shard, 1);
  shard->bytes = g_bytes_ref (bytes);
  shard->name = g_strdup (file);
  g_ptr_array_add (self->shards, shard);
  g_ptr_array_set_free_func (owned, NULL);   /* self->tensors owns them now */
  for (guint i = 0; i < mine->len; i++)
    {
      AmkSafetensorsTensor *t = g_ptr_array_index (mine, i);

      t->file = shard->name;
      t->bytes = shard->bytes;
      g_ptr_array_add (self->tensors, t);
      g_hash_table_insert (self->index, (char *) t->name, t);
    }
  return TRUE;
}

static AmkSafetensors *
safetensors_new (void)
{
  AmkSafetensors *self = g_new0 (AmkSafetensors, 1);

  self->shards = g_ptr_array_new_with_free_func ((GDestroyNotify) shard_free);
  self->tensors = g_ptr_array_new_with_free_func ((GDestroyNotify) tensor_free);
  self->index = g_hash_table_new (g_str_hash, g_str_equal);
  self->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return self;
}

void
amk_safetensors_free (AmkSafetensors *self)
{
  if (self == NULL)
    return;
  g_hash_table_unref (self->index);
  g_ptr_array_unref (self->tensors);
  g_ptr_array_unref (self->shards);
  g_hash_table_unref (self->metadata);
  g_free (self);
}

AmkSafetensors *
amk_safetensors_open_bytes (GBytes      *bytes,
                            const char  *name,
                            GError     **error)
{
  g_autoptr(AmkSafetensors) self = NULL;

  g_return_val_if_fail (bytes != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = safetensors_new ();
  if (!add_file (self, bytes, name != NULL ? name : "(bytes)", error))
    return NULL;
  return g_steal_pointer (&self);
}

/* Maps `path`; a GFileError becomes the matching G_IO_ERROR. */
static GBytes *
map_file (const char *path, GError **error)
{
  g_autoptr(GMappedFile) mapped = NULL;
  GError *local = NULL;

  mapped = g_mapped_file_new (path, FALSE, &local);
  if (mapped == NULL)
    {
      g_set_error_literal (error, G_IO_ERROR, g_io_error_from_file_error (local->code), local->message);
      g_error_free (local);
      return NULL;
    }
  return g_mapped_file_get_bytes (mapped);
}

static gboolean
open_file (AmkSafetensors *self, const char *path, GError **error)
{
  g_autoptr(GBytes) bytes = map_file (path, error);
  g_autofree char *display = g_filename_display_name (path);

  return bytes != NULL && add_file (self, bytes, display, error);
}

static gint
compare_strings (gconstpointer a, gconstpointer b)
{
  return strcmp (*(const char * const *) a, *(const char * const *) b);
}

static gboolean
valid_shard_name (const char *name)
{
  return name[0] != '\0' && strcmp (name, ".") != 0 && strcmp (name, "..") != 0 &&
         strchr (name, '/') == NULL && strchr (name, '\\') == NULL;
}

static gboolean
open_index (AmkSafetensors *self, const char *dir, const char *index_path, GError **error)
{
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GPtrArray) shard_names = g_ptr_array_new ();
  g_autoptr(GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
  g_autofree char *display = g_filename_display_name (index_path);
  JsonNode *map_node;
  JsonObjectIter iter;
  const char *tensor;
  JsonNode *node;
  const char *text;
  gsize len;

  if ((bytes = map_file (index_path, error)) == NULL)
    return FALSE;
  text = g_bytes_get_data (bytes, &len);
  if (len > AMK_SAFETENSORS_MAX_HEADER)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, display,
                 _("the index is larger than the limit of %u bytes"), AMK_SAFETENSORS_MAX_HEADER);
  root = parse_json (text, len, display, TRUE, error);
  if (root == NULL)
    return FALSE;
  map_node = json_object_get_member (json_node_get_object (root), "weight_map");
  if (map_node == NULL || !JSON_NODE_HOLDS_OBJECT (map_node))
    return fail (error, AMK_MODEL_ERROR_CORRUPT, display, _("the index has no weight_map object"));

  json_object_iter_init (&iter, json_node_get_object (map_node));
  while (json_object_iter_next (&iter, &tensor, &node))
    {
      const char *shard;

      if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING ||
          !valid_shard_name (shard = json_node_get_string (node)))
        return fail (error, AMK_MODEL_ERROR_CORRUPT, display,
                     _("the weight_map entry of tensor “%s” is not a file name in the index's folder"), tensor);
      if (!g_hash_table_contains (seen, shard))
        {
          if (shard_names->len >= AMK_SAFETENSORS_MAX_SHARDS)
            return fail (error, AMK_MODEL_ERROR_CORRUPT, display,
                         _("the index names more than %d shards"), AMK_SAFETENSORS_MAX_SHARDS);
          g_hash_table_add (seen, (char *) shard);
          g_ptr_array_add (shard_names, (char *) shard);
        }
    }
  if (shard_names->len == 0)
    return fail (error, AMK_MODEL_ERROR_CORRUPT, display, _("the weight_map of the index is empty"));
  g_ptr_array_sort (shard_names, compare_strings);

  for (guint i = 0; i < shard_names->len; i++)
    {
      const char *shard = g_ptr_array_index (shard_names, i);
      g_autofree char *path = g_build_filename (dir, shard, NULL);
      g_autoptr(GError) local = NULL;

      if (!open_file (self, path, &local))
        {
          g_set_error (error, local->domain, local->code,
                       _("Cannot load shard “%s” named by the index “%s”: %s"),
                       shard, display, local->message);
          return FALSE;
        }
    }

  /* every tensor of the map must be in the shard the map names */
  json_object_iter_init (&iter, json_node_get_object (map_node));
  while (json_object_iter_next (&iter, &tensor, &node))
    {
      const AmkSafetensorsTensor *t = g_hash_table_lookup (self->index, tensor);
      g_autofree char *expected = g_build_filename (dir, json_node_get_string (node), NULL);
      g_autofree char *expected_display = g_filename_display_name (expected);

      if (t == NULL || strcmp (t->file, expected_display) != 0)
        return fail (error, AMK_MODEL_ERROR_CORRUPT, display,
                     _("the index puts tensor “%s” in shard “%s”, which does not hold it"),
                     tensor, json_node_get_string (node));
    }
  return TRUE;
}

AmkSafetensors *
amk_safetensors_open (const char  *path_or_dir,
                      GError     **error)
{
  g_autoptr(AmkSafetensors) self = NULL;

  g_return_val_if_fail (path_or_dir != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = safetensors_new ();
  if (g_file_test (path_or_dir, G_FILE_TEST_IS_DIR))
    {
      g_autofree char *index = g_build_filename (path_or_dir, "model.safetensors.index.json", NULL);
      g_autofree char *single = g_build_filename (path_or_dir, "model.safetensors", NULL);

      if (g_file_test (index, G_FILE_TEST_EXISTS))
        {
          if (!open_index (self, path_or_dir, index, error))
            return NULL;
        }
      else if (g_file_test (single, G_FILE_TEST_EXISTS))
        {
          if (!open_file (self, single, error))
            return NULL;
        }
      else
        {
          g_autofree char *display = g_filename_display_name (path_or_dir);
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                       _("The folder “%s” holds neither model.safetensors nor model.safetensors.index.json"),
                       display);
          return NULL;
        }
    }
  else if (!open_file (self, path_or_dir, error))
    return NULL;
  return g_steal_pointer (&self);
}

gsize
amk_safetensors_get_n_tensors (AmkSafetensors *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->tensors->len;
}

const AmkSafetensorsTensor *
amk_safetensors_get_tensor (AmkSafetensors *self,
                            gsize           index)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (index < self->tensors->len, NULL);
  return g_ptr_array_index (self->tensors, index);
}

const AmkSafetensorsTensor *
amk_safetensors_find_tensor (AmkSafetensors *self,
                             const char     *name)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return g_hash_table_lookup (self->index, name);
}

const char *
amk_safetensors_get_metadata (AmkSafetensors *self,
                              const char     *key)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (key != NULL, NULL);
  return g_hash_table_lookup (self->metadata, key);
}

GBytes *
amk_safetensors_tensor_ref_data (const AmkSafetensorsTensor *t)
{
  const guint8 *base;

  g_return_val_if_fail (t != NULL && t->bytes != NULL, NULL);

  base = g_bytes_get_data (t->bytes, NULL);
  return g_bytes_new_from_bytes (t->bytes, (gsize) (t->data - base), t->n_bytes);
}

AmkModelTensorType
amk_safetensors_dtype_to_model (AmkSafetensorsDType dtype)
{
  switch (dtype)
    {
    case AMK_SAFETENSORS_DTYPE_F32: return AMK_MODEL_TENSOR_F32;
    case AMK_SAFETENSORS_DTYPE_F16: return AMK_MODEL_TENSOR_F16;
    case AMK_SAFETENSORS_DTYPE_BF16: return AMK_MODEL_TENSOR_BF16;
    default: return AMK_MODEL_TENSOR_OTHER;
    }
}

gboolean
amk_safetensors_tensor_to_bf16 (const AmkSafetensorsTensor  *t,
                                guint16                     *out,
                                GError                     **error)
{
  g_return_val_if_fail (t != NULL, FALSE);
  g_return_val_if_fail (out != NULL || t->n_elements == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!amk_model_tensor_type_to_bf16 (amk_safetensors_dtype_to_model (t->dtype), t->data,
                                      (gsize) t->n_elements, out))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE,
                   _("Tensor “%s” of the safetensors file “%s” has dtype %s, which cannot be converted to bf16 (supported: BF16, F16, F32)"),
                   t->name, t->file, amk_safetensors_dtype_name (t->dtype));
      return FALSE;
    }
  return TRUE;
}

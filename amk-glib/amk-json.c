/* amk-json.c: the JSON readers of the model loaders (see amk-json-private.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <glib/gi18n-lib.h>

#include "amk-glib.h"
#include "amk-json-private.h"

JsonNode *
amk_json_parse_object (const char  *text,
                       gsize        len,
                       gsize        max_size,
                       guint        max_depth,
                       const char  *what,
                       GError     **error)
{
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) local = NULL;
  JsonNode *root;

  if (len > max_size)
    {
      /* TRANSLATORS: %s names a JSON text, such as “config.json” */
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("%s is larger than the limit of %zu bytes"), what, max_size);
      return NULL;
    }
  if (text == NULL)
    text = "";
  switch (amk_json_scan (text, len, max_depth))
    {
    case AMK_JSON_SCAN_NUL:
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("%s is not valid JSON: it holds a NUL byte"), what);
      return NULL;
    case AMK_JSON_SCAN_TOO_DEEP:
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("%s nests deeper than %u levels"), what, max_depth);
      return NULL;
    default:
      break;
    }
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, text, (gssize) len, &local))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("%s is not valid JSON: %s"), what, local->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                   _("%s is not a JSON object"), what);
      return NULL;
    }
  return json_node_ref (root);
}

void
amk_json_file_clear (AmkJsonFile *f)
{
  g_clear_pointer (&f->root, json_node_unref);
  g_clear_pointer (&f->file, g_free);
}

gboolean
amk_json_file_load (AmkJsonFile  *f,
                    const char   *dir,
                    const char   *name,
                    gboolean      required,
                    gsize         max_size,
                    guint         max_depth,
                    GError      **error)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  g_autofree char *what = NULL;
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
  what = g_strdup_printf ("“%s”", f->file);
  f->root = amk_json_parse_object (g_mapped_file_get_contents (mapped),
                                   g_mapped_file_get_length (mapped), max_size, max_depth,
                                   what, error);
  return f->root != NULL;
}

JsonObject *
amk_json_file_object (AmkJsonFile *f)
{
  return f->root != NULL ? json_node_get_object (f->root) : NULL;
}

gboolean
amk_json_fail (GError     **error,
               gint         code,
               const char  *file,
               const char  *field,
               const char  *detail)
{
  g_set_error (error, AMK_MODEL_ERROR, code, _("“%s”, field “%s”: %s"), file, field, detail);
  return FALSE;
}

JsonNode *
amk_json_member (JsonObject *o,
                 const char *name)
{
  JsonNode *node = o != NULL ? json_object_get_member (o, name) : NULL;

  return node != NULL && !JSON_NODE_HOLDS_NULL (node) ? node : NULL;
}

gboolean
amk_json_is_integer (JsonNode *node)
{
  return node != NULL && JSON_NODE_HOLDS_VALUE (node) &&
         json_node_get_value_type (node) == G_TYPE_INT64;
}

gboolean
amk_json_is_boolean (JsonNode *node)
{
  return node != NULL && JSON_NODE_HOLDS_VALUE (node) &&
         json_node_get_value_type (node) == G_TYPE_BOOLEAN;
}

gboolean
amk_json_is_string (JsonNode *node)
{
  return node != NULL && JSON_NODE_HOLDS_VALUE (node) &&
         json_node_get_value_type (node) == G_TYPE_STRING;
}

gboolean
amk_json_node_get_uint (JsonNode *node,
                        guint64  *value)
{
  gint64 v;

  if (!amk_json_is_integer (node) || (v = json_node_get_int (node)) < 0)
    return FALSE;
  *value = (guint64) v;
  return TRUE;
}

gboolean
amk_json_get_uint (JsonObject  *o,
                   const char  *name,
                   const char  *field,
                   gboolean     required,
                   guint64      min,
                   guint64      max,
                   guint64     *value,
                   const char  *file,
                   GError     **error)
{
  JsonNode *node = amk_json_member (o, name);
  g_autofree char *detail = NULL;
  guint64 v;

  if (field == NULL)
    field = name;
  if (node == NULL)
    return !required || amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, field,
                                       _("is missing"));
  if (!amk_json_node_get_uint (node, &v) || v < min || v > max)
    {
      detail = g_strdup_printf (_("must be an integer from %" PRIu64 " to %" PRIu64), min, max);
      return amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, field, detail);
    }
  *value = v;
  return TRUE;
}

gboolean
amk_json_get_u32 (JsonObject  *o,
                  const char  *name,
                  gboolean     required,
                  guint        min,
                  guint        max,
                  guint       *value,
                  const char  *file,
                  GError     **error)
{
  guint64 v = *value;

  if (!amk_json_get_uint (o, name, name, required, min, max, &v, file, error))
    return FALSE;
  *value = (guint) v;
  return TRUE;
}

gboolean
amk_json_get_float (JsonObject  *o,
                    const char  *name,
                    const char  *field,
                    gdouble      min,
                    gboolean     min_inclusive,
                    gdouble      max,
                    gfloat      *value,
                    const char  *file,
                    GError     **error)
{
  JsonNode *node = amk_json_member (o, name);
  g_autofree char *detail = NULL;
  gdouble v = 0;

  if (field == NULL)
    field = name;
  if (node == NULL)
    return TRUE;
  if (amk_json_is_integer (node))
    v = (gdouble) json_node_get_int (node);
  else if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_DOUBLE)
    v = json_node_get_double (node);
  else
    return amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, field,
                          _("must be a number"));
  if (!(min_inclusive ? v >= min : v > min) || !(v <= max))
    {
      detail = g_strdup_printf (_("must be a number from %g to %g"), min, max);
      return amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, field, detail);
    }
  *value = (gfloat) v;
  return TRUE;
}

gboolean
amk_json_get_bool (JsonObject  *o,
                   const char  *name,
                   gboolean    *value,
                   const char  *file,
                   GError     **error)
{
  JsonNode *node = amk_json_member (o, name);

  if (node == NULL)
    return TRUE;
  if (!amk_json_is_boolean (node))
    return amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, name,
                          _("must be true or false"));
  *value = json_node_get_boolean (node);
  return TRUE;
}

gboolean
amk_json_get_string (JsonObject   *o,
                     const char   *name,
                     const char   *field,
                     const char  **value,
                     const char   *file,
                     GError      **error)
{
  JsonNode *node = amk_json_member (o, name);

  if (field == NULL)
    field = name;
  *value = NULL;
  if (node == NULL)
    return TRUE;
  if (!amk_json_is_string (node))
    return amk_json_fail (error, AMK_MODEL_ERROR_INVALID_METADATA, file, field,
                          _("must be a string"));
  *value = json_node_get_string (node);
  return TRUE;
}

/* amk-json-private.h: the JSON readers of the model loaders (untrusted input): config.json
 * and its siblings of a Hugging Face folder, a safetensors header and its index.
 *
 * Every failure is an AMK_MODEL_ERROR: AMK_MODEL_ERROR_CORRUPT for text that is not a
 * JSON object, AMK_MODEL_ERROR_INVALID_METADATA for a field of the wrong type or out of
 * range. A field is named in messages by its dotted path ("rope_scaling.factor").
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef enum {
  AMK_JSON_SCAN_OK,
  AMK_JSON_SCAN_NUL,       /* a NUL byte */
  AMK_JSON_SCAN_TOO_DEEP,  /* more than max_depth levels of objects and arrays */
} AmkJsonScan;

/* The checks before untrusted JSON text reaches json-glib, whose parser recurses without
 * a limit: no NUL byte, and at most `max_depth` nested objects and arrays (brackets inside
 * strings do not count). */
static inline AmkJsonScan
amk_json_scan (const char *text,
               gsize       len,
               guint       max_depth)
{
  gboolean in_string = FALSE, escaped = FALSE;
  guint depth = 0;

  for (gsize i = 0; i < len; i++)
    {
      const char c = text[i];

      if (c == '\0')
        return AMK_JSON_SCAN_NUL;
      if (in_string)
        {
          if (escaped)
            escaped = FALSE;
          else if (c == '\\')
            escaped = TRUE;
          else if (c == '"')
            in_string = FALSE;
        }
      else if (c == '"')
        in_string = TRUE;
      else if ((c == '{' || c == '[') && ++depth > max_depth)
        return AMK_JSON_SCAN_TOO_DEEP;
      else if ((c == '}' || c == ']') && depth > 0)
        depth--;
    }
  return AMK_JSON_SCAN_OK;
}

/* Untrusted JSON text that must be an object of at most `max_size` bytes nesting at most
 * `max_depth` levels; `what` names it in messages ("“config.json”", "the header of ...").
 * Returns a new reference to the root. */
JsonNode   *amk_json_parse_object (const char   *text,
                                   gsize         len,
                                   gsize         max_size,
                                   guint         max_depth,
                                   const char   *what,
                                   GError      **error);

/* One JSON object file of a folder, for messages. */
typedef struct {
  JsonNode *root;       /* NULL while not loaded (or an optional file is absent) */
  char     *file;       /* display name */
} AmkJsonFile;

void        amk_json_file_clear   (AmkJsonFile  *f);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (AmkJsonFile, amk_json_file_clear)

/* Reads `name` of `dir` as a JSON object; a missing optional file leaves f->root NULL. A
 * file that cannot be read is a G_IO_ERROR. */
gboolean    amk_json_file_load    (AmkJsonFile  *f,
                                   const char   *dir,
                                   const char   *name,
                                   gboolean      required,
                                   gsize         max_size,
                                   guint         max_depth,
                                   GError      **error);
JsonObject *amk_json_file_object  (AmkJsonFile  *f);

/* Sets "“file”, field “field”: detail" in AMK_MODEL_ERROR `code` and returns FALSE. */
gboolean    amk_json_fail         (GError      **error,
                                   gint          code,
                                   const char   *file,
                                   const char   *field,
                                   const char   *detail);

/* A member that is there and not null (`o` may be NULL). */
JsonNode   *amk_json_member       (JsonObject   *o,
                                   const char   *name);
gboolean    amk_json_is_integer   (JsonNode     *node);
gboolean    amk_json_is_string    (JsonNode     *node);
gboolean    amk_json_is_boolean   (JsonNode     *node);
/* A non-negative integer node (node may be NULL). */
gboolean    amk_json_node_get_uint (JsonNode    *node,
                                    guint64     *value);

/* The field readers: an absent (or null) member leaves `value` as it is (a string:
 * NULL) unless `required`. `field` is the name in messages; NULL means `name`. */
gboolean    amk_json_get_uint     (JsonObject   *o,
                                   const char   *name,
                                   const char   *field,
                                   gboolean      required,
                                   guint64       min,
                                   guint64       max,
                                   guint64      *value,
                                   const char   *file,
                                   GError      **error);
gboolean    amk_json_get_u32      (JsonObject   *o,
                                   const char   *name,
                                   gboolean      required,
                                   guint         min,
                                   guint         max,
                                   guint        *value,
                                   const char   *file,
                                   GError      **error);
/* A finite number in (min, max] (min itself when min_inclusive). */
gboolean    amk_json_get_float    (JsonObject   *o,
                                   const char   *name,
                                   const char   *field,
                                   gdouble       min,
                                   gboolean      min_inclusive,
                                   gdouble       max,
                                   gfloat       *value,
                                   const char   *file,
                                   GError      **error);
gboolean    amk_json_get_bool     (JsonObject   *o,
                                   const char   *name,
                                   gboolean     *value,
                                   const char   *file,
                                   GError      **error);
/* Borrowed from the node. */
gboolean    amk_json_get_string   (JsonObject   *o,
                                   const char   *name,
                                   const char   *field,
                                   const char  **value,
                                   const char   *file,
                                   GError      **error);

G_END_DECLS

/* amk-loader-private.h: what the readers of untrusted model files share (amk-gguf.c,
 * amk-safetensors.c, amk-hf-model.c, amk-tokenizer.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib/gi18n-lib.h>
#include <gio/gio.h>

G_BEGIN_DECLS

static inline gboolean amk_loader_fail (GError     **error,
                                        gint         code,
                                        const char  *format_name,
                                        const char  *file,
                                        const char  *format,
                                        ...) G_GNUC_PRINTF (5, 6);

/* Sets a G_IO_ERROR `code` error "Cannot read the <format_name> file “file”: <detail>"
 * (the format's name as it is written, such as "GGUF") and returns FALSE. */
static inline gboolean
amk_loader_fail (GError     **error,
                 gint         code,
                 const char  *format_name,
                 const char  *file,
                 const char  *format,
                 ...)
{
  g_autofree char *detail = NULL;
  va_list args;

  va_start (args, format);
  detail = g_strdup_vprintf (format, args);
  va_end (args);
  /* TRANSLATORS: the first %s is a file format's name (GGUF, safetensors), the second
   * the file's name, the third what is wrong with it */
  g_set_error (error, G_IO_ERROR, code, _("Cannot read the %s file “%s”: %s"), format_name, file,
               detail);
  return FALSE;
}

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

G_END_DECLS

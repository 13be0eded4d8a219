/* amk-loader-private.h: what the readers of untrusted model files share (amk-gguf.c,
 * amk-safetensors.c, amk-tokenizer.c): the parse error and the JSON checks.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib/gi18n-lib.h>
#include <gio/gio.h>
#include "amk-glib.h"
#include "amk-json-private.h"

G_BEGIN_DECLS

static inline gboolean amk_loader_fail (GError     **error,
                                        gint         code,
                                        const char  *format_name,
                                        const char  *file,
                                        const char  *format,
                                        ...) G_GNUC_PRINTF (5, 6);

/* Sets an AMK_MODEL_ERROR `code` error "Cannot read the <format_name> file “file”:
 * <detail>" (the format's name as it is written, such as "GGUF") and returns FALSE. */
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
  g_set_error (error, AMK_MODEL_ERROR, code, _("Cannot read the %s file “%s”: %s"), format_name, file,
               detail);
  return FALSE;
}

G_END_DECLS

/* amk-i18n.c: binds the library's message catalogue when it is loaded.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <glib/gi18n-lib.h>

/* AMK_LOCALEDIR points the catalogue at a build folder, so tests can show translated
 * messages without installing. */
static void __attribute__((constructor))
amk_i18n_init (void)
{
#if ENABLE_NLS
  const char *dir = g_getenv ("AMK_LOCALEDIR");

  bindtextdomain (GETTEXT_PACKAGE, dir != NULL && *dir != '\0' ? dir : LOCALEDIR);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
#endif
}

#!/bin/sh
# Regenerates po/amk-glib-1.0.pot from the files in po/POTFILES.in and merges it into
# po/de.po, then prints the statistics. New or changed messages come out untranslated or
# fuzzy: translate them, remove the fuzzy flags and run this again until it reports
# "0 untranslated, 0 fuzzy". Run from anywhere inside the source tree.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

files=$(grep -v -e '^#' -e '^[[:space:]]*$' po/POTFILES.in)

# The keywords of meson's 'glib' preset, so this template matches the one
# `meson compile amk-glib-1.0-pot` writes.
xgettext --package-name=amk-glib --package-version=1.0 \
  --from-code=UTF-8 --add-comments --sort-by-file \
  --keyword=_ --keyword=N_ --keyword=C_:1c,2 --keyword=NC_:1c,2 \
  --keyword=g_dcgettext:2 --keyword=g_dngettext:2,3 --keyword=g_dpgettext2:2c,3 \
  --flag=N_:1:pass-c-format --flag=C_:2:pass-c-format --flag=NC_:2:pass-c-format \
  --flag=g_dngettext:2:pass-c-format --flag=g_strdup_printf:1:c-format \
  --flag=g_string_printf:2:c-format --flag=g_string_append_printf:2:c-format \
  --flag=g_error_new:3:c-format --flag=g_set_error:4:c-format \
  --flag=g_markup_printf_escaped:1:c-format --flag=g_log:3:c-format \
  --flag=g_print:1:c-format --flag=g_printerr:1:c-format \
  --flag=g_printf:1:c-format --flag=g_fprintf:2:c-format \
  --flag=g_sprintf:2:c-format --flag=g_snprintf:3:c-format \
  --flag=g_prefix_error:2:c-format \
  -o po/amk-glib-1.0.pot $files

if [ ! -f po/de.po ]; then
  msginit --no-translator --locale=de_DE.UTF-8 --input=po/amk-glib-1.0.pot --output-file=po/de.po
fi
msgmerge --quiet --update --backup=none --previous po/de.po po/amk-glib-1.0.pot
msgfmt --check --statistics -o /dev/null po/de.po

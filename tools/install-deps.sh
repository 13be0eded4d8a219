#!/bin/bash
# Installs what amk-glib needs to build and test on Debian 12 (run as root). The CUDA
# toolkit (nvcc) is expected at /usr/local/cuda; without it the library builds with the
# CPU executor only.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  meson ninja-build pkg-config gcc g++ libglib2.0-dev gobject-introspection \
  libgirepository1.0-dev gir1.2-glib-2.0 python3-gi python3-pytest python3-numpy \
  gjs valac gi-docgen gettext libjson-glib-dev clang libclang-rt-14-dev \
  python3-pip tmux libsoup-3.0-dev curl >/dev/null
# the test of `amk serve`'s chat page: headless Chromium driven over the DevTools
# protocol from Python, and a font for its screenshots
apt-get install -y -qq --no-install-recommends \
  chromium python3-websocket fonts-dejavu-core >/dev/null
# the openai client, for the test of `amk serve`, and llama.cpp's gguf reader, for the
# tests of `amk quantize` (Debian's Python has no package of either)
/usr/bin/python3 -m pip install -q --break-system-packages openai gguf >/dev/null
echo "amk-glib: build dependencies installed"

#!/bin/sh
# Runs pytest with the Python that has PyGObject. The GPU machine points
# AMK_TEST_PYTHON at its own interpreter; elsewhere Debian's /usr/bin/python3 has gi.
# SPDX-License-Identifier: LGPL-2.1-or-later
exec "${AMK_TEST_PYTHON:-/usr/bin/python3}" -m pytest -v -p no:cacheprovider "$@"

#!/bin/sh
# Runs a script with the Python that has PyGObject (see run-pytest.sh).
# SPDX-License-Identifier: LGPL-2.1-or-later
exec "${AMK_TEST_PYTHON:-/usr/bin/python3}" "$@"

#!/bin/bash
# Runs a pytest file with the Python that has PyGObject: AMK_TEST_PYTHON on the GPU
# machine (see shared/gpu/README.md), Debian's /usr/bin/python3 elsewhere.
exec "${AMK_TEST_PYTHON:-/usr/bin/python3}" -m pytest -v -p no:cacheprovider "$@"

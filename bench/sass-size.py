#!/usr/bin/env python3
"""sass-size.py: how much machine code each source function of a megakernel build takes,
from a cubin compiled with -lineinfo (each instruction counted at its innermost inlined
source line, the function being the definition around that line). A megakernel's ops
all live in one kernel; an op whose executed code outgrows the instruction caches waits
on instruction fetch from L2 (Nsight Compute's "no instruction" stall).

Usage:
    nvcc -O2 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Ikernels -cubin \\
         kernels/scheduler.cu -o /tmp/scheduler.cubin
    python3 bench/sass-size.py /tmp/scheduler.cubin amk_megakernel [TOP]

nvdisasm comes from the CUDA toolkit (or PyPI's nvidia-cuda-nvdisasm wheel): on PATH, in
/usr/local/cuda/bin, or named by NVDISASM.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import collections
import os
import re
import shutil
import subprocess
import sys


def nvdisasm():
    for path in (os.environ.get("NVDISASM"), shutil.which("nvdisasm"), "/usr/local/cuda/bin/nvdisasm"):
        if path and os.access(path, os.X_OK):
            return path
    sys.exit("nvdisasm not found: set NVDISASM")


def definitions(path, cache={}):
    """(line, name) of the function definitions of a source file (GNU style: the name at
    the start of a line, then ' (')."""
    if path not in cache:
        try:
            with open(path) as f:
                cache[path] = [(i, m.group(1)) for i, line in enumerate(f, 1)
                               if (m := re.match(r"^([a-z_][a-z0-9_]*) \(", line))]
        except OSError:
            cache[path] = []
    return cache[path]


def function_at(path, line):
    name = "?"
    for start, n in definitions(path):
        if start > line:
            break
        name = n
    return name


def main(cubin, kernel, top):
    listing = subprocess.run([nvdisasm(), "-g", cubin], capture_output=True, text=True, check=True).stdout
    inside, where, counts, total = False, None, collections.Counter(), 0
    for line in listing.splitlines():
        if line.startswith("//---------------------"):
            inside = f".text.{kernel} " in line
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            where = (m.group(1), int(m.group(2)))
        elif re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            total += 1
            counts[(os.path.basename(where[0]), function_at(*where)) if where else ("?", "?")] += 1
    if total == 0:
        sys.exit(f"no kernel {kernel} in {cubin}")
    print(f"{kernel}: {total} instructions, {total * 16 / 1024:.0f} KiB")
    for (source, function), n in counts.most_common(top):
        print(f"{n:7d} {n * 16 / 1024:7.1f} KiB  {source}:{function}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 30)

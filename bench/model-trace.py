#!/usr/bin/env python3
"""model-trace.py: the trace of one decode step of a whole model on the megakernel.

Loads the model (a GGUF file or a Hugging Face checkpoint folder) onto one queue per SM
with 512 threads and MATVEC's shared-memory ring (as `amk generate` runs it), generates
a few tokens with tracing on, and writes the trace of the last launch (one decode step)
as trace-event JSON (tools/amk-trace-to-png.py draws it).

Usage (GPU machine): bash .gpu/run.sh python3 bench/model-trace.py MODEL OUT.json"""
import collections
import json
import sys

import gi
gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402


def main(model_path, out):
    model = Amk.Model.new_from_file(model_path, None)
    launcher = Amk.Launcher(device=0)
    launcher.props.threads_per_block = 512
    launcher.props.dynamic_shared_memory = Amk.LAUNCHER_MATVEC_SHARED_MEMORY  # as amk generate
    launcher.props.trace = True
    generator = Amk.Generator.new(model, launcher)
    generator.generate("The capital of France is", 4, None)
    text = launcher.get_trace_json()
    with open(out, "w") as f:
        f.write(text)
    events = json.loads(text)["traceEvents"]
    end = max(e["ts"] + e["dur"] for e in events)
    counts = collections.Counter(e["name"] for e in events)
    print(f"one decode step of {model_path}: {len(events)} instructions on "
          f"{model.props.program.get_num_queues()} queues, {end:.1f} us from the first start "
          f"to the last end; {dict(counts)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

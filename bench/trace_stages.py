"""trace_stages.py: the stages of one layer in a megakernel trace (the events of
AmkLauncher.get_trace_json), shared by bench/model-step.py and bench/layer-trace.py.

SPDX-License-Identifier: LGPL-2.1-or-later
"""


def stage_table(events, n_layers, tail=1):
    """The stages of the middle layer in the order they start: instructions per stage,
    duration per instruction (median / max), the span from the stage's first start to its
    last end, and the hop from the previous stage's last end to this stage's first start
    (the latency between stages). A MATVEC stage is the k-th MATVEC of every queue that
    runs the usual number of them (the same per layer, then `tail` more: 1 for a model's
    LM head); the other ops are grouped by name, those that start within the layer (from
    its first MATVEC stage to the next layer's, or to the end)."""
    per_queue = {}
    for e in events:
        if e["name"] == "matvec":
            per_queue.setdefault(e["tid"], []).append(e)
    counts = [len(v) for v in per_queue.values()]
    usual = max(set(counts), key=counts.count) if counts else 0
    if usual <= tail or (usual - tail) % n_layers != 0:
        return ["(no regular MATVEC pattern: no stage table)"]
    per_layer = (usual - tail) // n_layers
    mid = n_layers // 2
    has_next = per_layer * (mid + 1) < usual   # a MATVEC after the layer: the next one's first
    stages = {}
    for evs in per_queue.values():
        if len(evs) != usual:
            continue
        evs.sort(key=lambda e: e["args"]["instruction"])
        for i in range(per_layer + int(has_next)):
            stages.setdefault(f"matvec {i + 1}", []).append(evs[per_layer * mid + i])
    t0 = min(e["ts"] for e in stages["matvec 1"])
    t1 = min(e["ts"] for e in stages[f"matvec {per_layer + 1}"]) if has_next else float("inf")
    for e in events:
        if e["name"] != "matvec" and t0 <= e["ts"] < t1:
            stages.setdefault(e["name"], []).append(e)
    if has_next:
        stages["matvec 1 (next layer)"] = stages.pop(f"matvec {per_layer + 1}")
    lines = [f"stages of layer {mid} of {n_layers}, per instruction (median / max), and the hop "
             f"from the previous stage's last end:"]
    prev_end = None
    for name, evs in sorted(stages.items(), key=lambda kv: min(e["ts"] for e in kv[1])):
        durs = sorted(e["dur"] for e in evs)
        first = min(e["ts"] for e in evs)
        last = max(e["ts"] + e["dur"] for e in evs)
        hop = f"{first - prev_end:5.1f} us" if prev_end is not None else "    -"
        lines.append(f"  {name:22s} {len(evs):4d} instructions {durs[len(durs) // 2]:6.1f} / "
                     f"{durs[-1]:5.1f} us  hop {hop}  ({first:.1f} .. {last:.1f} us)")
        prev_end = last
    return lines

#!/usr/bin/env python3
"""A round's joules split by op, on the GPU: runs `flide bench ... --replay-ops MS --json` while
NVML samples GPU 0's energy counter and SM clock every 10 ms, then reads bench's replay windows
(Ops::replay_ops: each op's CUDA graphs launched again and again alone; steady-clock times, which
time.monotonic reads too).

    python3 bench/energy_by_op.py [--settle S] -- FLIDE bench ... --replay-ops 1500 --json

Per window: the mean power and the median SM clock after its first S seconds (default 0.3, for
the power limit's clock control to settle), the time a round of the op takes, and the joules a
round: the mean power times that time. "above idle" subtracts the idle GPU's power (the "(none)"
window) over the same time. Under the power limit a round's time is its energy over the limit,
so an op's joules are what removing it would save; the ops' joules add up to about the "(all)"
window's, the whole round op by op. The times are the sharper measure: within one run they repeat
to 0.1-0.3%, a window's power to about 5% (it depends on what ran before it), so compare trees by
an op's ms a round and rank ops by their joules (bench/results/2026-12-01-energy-by-op.md).
Prints a table, then one JSON line.
"""

import argparse
import bisect
import json
import subprocess
import sys

import pynvml

from power_trace import run_traced


def energy_at(trace, times, t):
    """The energy counter at time t, linear between the samples around it."""
    i = min(max(bisect.bisect_left(times, t), 1), len(times) - 1)
    a, b = trace[i - 1], trace[i]
    if b.t <= a.t:
        return b.energy_j
    return a.energy_j + (b.energy_j - a.energy_j) * (t - a.t) / (b.t - a.t)


def measure(trace, times, w, settle):
    """The window's mean power and median clock after it settled; None if too short."""
    a = w["t0"] + min(settle, 0.5 * (w["t1"] - w["t0"]))
    if w["t1"] - a < 0.05:
        return None
    watts = (energy_at(trace, times, w["t1"]) - energy_at(trace, times, a)) / (w["t1"] - a)
    clocks = sorted(s.sm_mhz for s in trace if a <= s.t <= w["t1"])
    row = {"op": w["op"], "graphs": w["graphs_per_round"], "rounds": w["rounds"],
           "watts": watts, "sm_mhz": clocks[len(clocks) // 2] if clocks else 0}
    if w["rounds"]:
        row["ms_a_round"] = (w["t1"] - w["t0"]) / w["rounds"] * 1e3
        row["joules_a_round"] = watts * row["ms_a_round"] / 1e3
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--settle", type=float, default=0.3)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    run, _, _, trace = run_traced(command, handle, 0.01, stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"energy_by_op: the command failed (exit {run.returncode})")
    result = json.loads(run.stdout.strip().splitlines()[-1])
    times = [s.t for s in trace]
    report = {"workload": result["workload"], "batch": result["batch"],
              "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3, "runs": []}
    for r in result["runs"]:
        rows = [m for m in (measure(trace, times, w, args.settle) for w in r.get("replay", []))
                if m]
        idle = next((m["watts"] for m in rows if m["op"] == "(none)"), 0.0)
        ops = [m for m in rows if not m["op"].startswith("(")]
        for m in rows:
            if "joules_a_round" in m:
                m["joules_above_idle"] = m["joules_a_round"] - idle * m["ms_a_round"] / 1e3
        total = sum(m["joules_a_round"] for m in ops)
        print(f"\n{r['mode']} round, batch {result['batch']} ({result['workload']}); "
              f"idle {idle:.1f} W:")
        print(f"{'op':24} {'graphs':>6} {'ms a round':>11} {'W':>7} {'SM MHz':>7} "
              f"{'J a round':>10} {'above idle':>11} {'share':>7}")
        for m in sorted(ops, key=lambda m: -m["joules_a_round"]) + [
                m for m in rows if m["op"] == "(all)"]:
            share = f"{m['joules_a_round'] / total:7.1%}" if total and m in ops else ""
            print(f"{m['op']:24} {m['graphs']:6d} {m['ms_a_round']:11.3f} {m['watts']:7.1f} "
                  f"{m['sm_mhz']:7d} {m['joules_a_round']:10.3f} {m['joules_above_idle']:11.3f} "
                  f"{share}")
        print(f"{'sum of the ops':24} {'':6} {sum(m['ms_a_round'] for m in ops):11.3f} {'':7} "
              f"{'':7} {total:10.3f}")
        report["runs"].append({"mode": r["mode"], "idle_watts": idle, "ops_joules": total,
                               "windows": rows})
    print(json.dumps(report))


if __name__ == "__main__":
    main()

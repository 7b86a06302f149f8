#!/usr/bin/env python3
"""Runs a command while NVML samples GPU 0 every 50 ms (board power, SM clock, the energy counter,
the share of time a kernel was running) and reports the mean power, clock, energy and kernel
busy share over windows of the run: what a workload costs in joules when the H200 is held at
its power limit, where time alone stops telling.

    python3 bench/power_trace.py --csv trace.csv [--window NAME:FROM:TO ...] -- COMMAND ...

A window's FROM and TO are seconds since the command started; a negative value counts back from
its exit. Without windows, the middle 80% of the run. Prints one JSON line per window (after
the command's own output) and the power limit NVML enforces.
"""

import argparse
import collections
import json
import subprocess
import sys
import threading
import time

import pynvml


# One sample of GPU 0: time.monotonic(), the energy counter (J), board power (W), SM clock (MHz),
# the share of time a kernel was running (%).
Sample = collections.namedtuple("Sample", "t energy_j power_w sm_mhz busy_pct")


def sample(handle, trace, stop, period):
    while not stop.is_set():
        trace.append(Sample(time.monotonic(),
                            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3,
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                            pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        time.sleep(period)


def run_traced(command, handle, period, **run_args):
    """subprocess.run(command, **run_args) while GPU 0 is sampled every `period` s; returns the
    finished run, its start and end (time.monotonic) and the samples (bench/energy_by_op.py too)."""
    trace, stop = [], threading.Event()
    sampler = threading.Thread(target=sample, args=(handle, trace, stop, period))
    sampler.start()
    start = time.monotonic()
    run = subprocess.run(command, **run_args)
    end = time.monotonic()
    stop.set()
    sampler.join()
    return run, start, end, trace


def window(trace, start, end, name, lo, hi):
    a = start + lo if lo >= 0 else end + lo
    b = start + hi if hi >= 0 else end + hi
    inside = [s for s in trace if a <= s[0] <= b]
    if len(inside) < 2:
        return {"window": name, "error": f"no samples in [{a - start:.2f}, {b - start:.2f}] s"}
    seconds = inside[-1][0] - inside[0][0]
    joules = inside[-1][1] - inside[0][1]
    clocks = sorted(s[3] for s in inside)
    return {"window": name, "from_s": round(inside[0][0] - start, 2),
            "to_s": round(inside[-1][0] - start, 2), "samples": len(inside),
            "energy_j": round(joules, 2), "mean_w": round(joules / seconds, 1),
            "median_sample_w": sorted(s[2] for s in inside)[len(inside) // 2],
            "sm_mhz_median": clocks[len(clocks) // 2], "sm_mhz_min": clocks[0],
            "kernel_busy_pct_mean": round(sum(s[4] for s in inside) / len(inside), 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--window", action="append", default=[])
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    run, start, end, trace = run_traced(command, handle, 0.05)
    rc = run.returncode
    with open(args.csv, "w") as f:
        f.write("t_s,energy_j,power_w,sm_mhz,kernel_busy_pct\n")
        for t, e, p, c, u in trace:
            f.write(f"{t - start:.3f},{e:.3f},{p:.1f},{c},{u}\n")
    duration = end - start
    windows = args.window or [f"middle:{0.1 * duration}:{0.9 * duration}"]
    limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
    for spec in windows:
        name, lo, hi = spec.rsplit(":", 2)
        row = window(trace, start, end, name, float(lo), float(hi))
        row["power_limit_w"] = limit
        print(json.dumps(row), flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()

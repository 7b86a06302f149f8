"""The median time of a CUDA call, shared by the PyTorch baselines in bench/."""
import torch


def median_ms(call, reps, warmup):
    """call() WARMUP times, then the median of REPS calls, each timed by CUDA events (ms)."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]

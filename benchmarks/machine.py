"""The machine: CPU model and cores, versions, how loaded it was, and its memory bandwidth.

Load: ``os.getloadavg()`` before and after, and the CPU busy fraction from ``/proc/stat``
over the run (all cores), split into this process's share (from ``os.times()``) and the
rest (other processes: the reason two-thread OpenMP stalls when the machine is
oversubscribed).
"""
from __future__ import annotations

import datetime
import os
import platform
import time
from typing import Dict, Optional

import torch


def cpu_model() -> str:
    from runtime.kernels.compiler import cpu_fields
    return cpu_fields().get("model name") or platform.processor() or platform.machine()


def describe() -> Dict[str, object]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _proc_stat() -> Optional[tuple]:
    """(busy jiffies, total jiffies) over all cores, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
    total = sum(fields[:8])                                        # guest is inside user
    return total - idle, total


class LoadMonitor:
    """Samples the machine's load at ``start()`` and ``stop()``."""

    def start(self) -> "LoadMonitor":
        self.loadavg_before = os.getloadavg()
        self.stat_before = _proc_stat()
        self.times_before = os.times()
        self.t0 = time.monotonic()
        return self

    def stop(self) -> Dict[str, object]:
        loadavg_after = os.getloadavg()
        stat_after = _proc_stat()
        times_after = os.times()
        wall = time.monotonic() - self.t0
        cores = os.cpu_count() or 1
        result: Dict[str, object] = {
            "loadavg_before": [round(v, 2) for v in self.loadavg_before],
            "loadavg_after": [round(v, 2) for v in loadavg_after],
            "wall_s": round(wall, 1),
            "cores": cores,
        }
        if self.stat_before and stat_after:
            busy = stat_after[0] - self.stat_before[0]
            total = stat_after[1] - self.stat_before[1]
            busy_frac = busy / total if total else 0.0
            own_cpu = sum(a - b for a, b in zip(times_after[:4], self.times_before[:4]))
            own_frac = min(busy_frac, own_cpu / (wall * cores)) if wall > 0 else 0.0
            result.update(busy_fraction=round(busy_frac, 3),
                          own_fraction=round(own_frac, 3),
                          others_fraction=round(max(0.0, busy_frac - own_frac), 3))
        return result


def bandwidth(n: int = 1 << 24, repeats: int = 20) -> Dict[str, float]:
    """Memory bandwidth at ``n`` float32 elements: ``torch.add(x, y, out=z)`` (2 reads + 1
    write = 12 bytes per element) and ``z.copy_(x)`` (8 bytes); best of ``repeats``."""
    x = torch.randn(n)
    y = torch.randn(n)
    z = torch.empty(n)

    def best(fn) -> float:
        fn()
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    add_s = best(lambda: torch.add(x, y, out=z))
    copy_s = best(lambda: z.copy_(x))
    return {"elements": n,
            "add_gbs": 12 * n / add_s / 1e9,
            "copy_gbs": 8 * n / copy_s / 1e9,
            "bytes_per_element": 12}

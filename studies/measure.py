"""What every study measures with: machine load, device sync, peak memory of one call, free
memory, a log-log slope, and a Lightning `Trainer` that prints nothing.

Peak memory: on CUDA, `torch.cuda.max_memory_allocated` above the allocation before the call.
On CPU, the rise of the process's peak resident set size (Linux VmHWM, reset by writing 5 to
/proc/self/clear_refs after returning freed heap to the OS with malloc_trim) over one call: it
counts everything the call touches (activations, saved tensors, gradients, allocator slack) and
not the inputs allocated before it.
"""

import contextlib
import ctypes
import gc
import logging
import math
import statistics
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch


def load_average() -> float | None:
    """The 1-minute load average (other work on the machine slows every number measured)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
"""`cpu`: the process's CPU time, which other processes' load distorts far less than wall
time; meaningful for one thread on CPU only (it sums the threads' time, ignores a GPU's)."""


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (timings on CUDA are asynchronous otherwise)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """Peak extra memory of one call: `start()`, the call, then `stop()` (see the module
    docstring for the CPU method)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu_ok = Path("/proc/self/clear_refs").exists()
        try:
            self.libc = ctypes.CDLL("libc.so.6")
        except OSError:
            self.libc = None
        self.base = 0

    @staticmethod
    def _status_kb(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def start(self) -> None:
        if self.device.type == "cuda":
            sync(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        elif self.cpu_ok:
            gc.collect()
            if self.libc is not None:
                self.libc.malloc_trim(0)
            Path("/proc/self/clear_refs").write_text("5")
            self.base = self._status_kb("VmRSS") * 1024

    def stop(self) -> int | None:
        """Bytes above the level at `start`, or None when it cannot be measured."""
        if self.device.type == "cuda":
            sync(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.base
        if not self.cpu_ok:
            return None
        return max(0, self._status_kb("VmHWM") * 1024 - self.base)


def free_memory(device: torch.device) -> int:
    """Bytes free now: CUDA's free device memory, or Linux MemAvailable (8 GiB if unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def loglog_slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log y against log x: y ~ x^slope (points with x, y > 0)."""
    xs, ys = [math.log(x) for x, _ in points], [math.log(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's info lines and warnings (no logger, no validation loop, a plain DataLoader:
    all on purpose in a study) silenced inside the block."""
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        lightning_log.setLevel(level)

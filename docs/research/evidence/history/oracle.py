"""How noisy a file's value is under each noise model of benchmarks/history_accuracy.py, and the
best any per-file detector can do with a 3 % step at that noise: the single-change maximum-
likelihood cut, told that there is exactly one step, placed within +-1 file (Gaussian values).

    python docs/evidence/history/oracle.py
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from specguard.timeline.series import robust_value
from specguard.timeline.synthetic import Noise, synthetic_history

MODELS = {"study (default)": Noise(0.005, 0.0087, 0.005, 0.02), "earlier (1 %/1 %, no day, no stalls)": Noise(0.01, 0.01),
          "noisier (1 %/1 %, day, stalls)": Noise(0.01, 0.01, 0.005, 0.02)}


def file_sd(noise: Noise, reduce, histories: int = 200) -> float:
    """Pooled sd of log tok/s of eagle3's per-file values over unchanged 30-file histories."""
    devs = []
    for h in range(histories):
        values = []
        for doc in synthetic_history(30, 90_000 + h, noise=noise):
            runs = [r["output_throughput"] for r in doc["cells"][1]["runs"]]
            v = reduce(runs)
            if v is not None:
                values.append(math.log(v))
        devs += list(np.array(values) - np.mean(values))
    return float(np.sqrt(np.sum(np.square(devs)) / (len(devs) - histories)))


def oracle(step_sd: float, n: int = 30, trials: int = 20_000) -> float:
    rng, hits = np.random.default_rng(0), 0
    cuts = np.arange(1, n)
    for _ in range(trials):
        at = int(rng.integers(6, n - 4)) - 1  # as the benchmark: >= 5 files on each side
        x = rng.normal(0, 1, n)
        x[at:] -= step_sd
        s = np.cumsum(x)
        diff = s[cuts - 1] / cuts - (s[-1] - s[cuts - 1]) / (n - cuts)
        hits += abs(int(cuts[np.argmax(cuts * (n - cuts) * diff * diff)]) - at) <= 1
    return hits / trials


for name, noise in MODELS.items():
    median, mean = file_sd(noise, robust_value), file_sd(noise, statistics.fmean)
    print(f"{name}: a file's tok/s sd {median:.2%} (median, runs that disagree left out), {mean:.2%} (mean); "
          f"a 3 % step = {0.03 / median:.2f} sd: oracle within +-1 file {oracle(0.03 / median):.3f}")

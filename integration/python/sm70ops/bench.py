"""What the benches share (python -m sm70ops bench OP): the GPU check, CUDA-event medians, the
plugin-vs-generic table and the plot. The qsa_index bench is bench_index.py, qsa_attn's
bench_attn.py, nvfp4_moe's bench_moe.py.
"""
import statistics

WARMUP, REPS = 2, 11
EXIT_OK, EXIT_MISMATCH, EXIT_CANNOT_RUN = 0, 1, 2


def cuda_torch(command):
    """torch when it is importable and sees a CUDA GPU; else None, after saying why `command`
    cannot run (the caller exits with EXIT_CANNOT_RUN)."""
    try:
        import torch
    except ImportError:
        print(f"{command}: needs a CUDA GPU and torch (torch is not importable)")
        return None
    if not torch.cuda.is_available():
        print(f"{command}: needs a CUDA GPU and torch (none found)")
        return None
    return torch


def _check_cell(value, width):
    """A float as an error (1.23e-04), anything else as text, right-aligned in `width`."""
    return f"{value:{width}.2e}" if isinstance(value, float) else f"{value:>{width}}"


def print_comparison(keys, checks, rows, limit=None):
    """The plugin-vs-generic table of every bench: per row its `keys` cells ({header: (width,
    cell)}, cell(row) its value), plugin and generic ms, the speed-up and its `checks` cells
    (same form: a float error or a text verdict); a declined row (plugin_ms None) shows its note
    instead. Returns how many rows' first check exceeds `limit` (0 without one)."""
    print(" ".join(f"{h:>{w}}" for h, (w, _) in keys.items())
          + f" {'plugin ms':>10} {'generic ms':>11} {'speed-up':>9} "
          + " ".join(f"{h:>{w}}" for h, (w, _) in checks.items()))
    failed = 0
    for r in rows:
        cells = " ".join(f"{cell(r):>{w}}" for w, cell in keys.values())
        if r.plugin_ms is None:
            print(f"{cells} {'-':>10} {r.generic_ms:11.3f}  declined: {r.note}")
            continue
        values = [cell(r) for _, cell in checks.values()]
        failed += limit is not None and not values[0] <= limit
        print(f"{cells} {r.plugin_ms:10.3f} {r.generic_ms:11.3f} "
              f"{r.generic_ms / r.plugin_ms:8.2f}x "
              + " ".join(_check_cell(v, w) for (w, _), v in zip(checks.values(), values)))
    return failed


def median_ms(torch, fn, warmup=WARMUP, reps=REPS):
    """Median of `reps` CUDA-event timings of fn() on the current stream, after `warmup`."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return statistics.median(samples)


def plot_series(path, series, xlabel, title):
    """A log-log PNG of {label: (xs, median ms)}, written when matplotlib is importable and
    `path` is not empty."""
    if not path:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: skipped (matplotlib is not importable)")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (label, (xs, ys)), marker in zip(series.items(), "os^vD"):
        if xs:
            ax.loglog(xs, ys, marker + "-", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("median ms")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")

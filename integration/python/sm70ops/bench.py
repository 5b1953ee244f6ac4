"""What the benches share (python -m sm70ops bench OP): the GPU check, CUDA-event medians, the
roofline floor, the plugin-vs-generic table and the plot. The qsa_index bench is bench_index.py,
qsa_attn's bench_attn.py, nvfp4_moe's bench_moe.py.

The floor of a measurement is its useful FLOPs at the fp16 tensor-core rate or its compulsory
bytes at DRAM copy bandwidth, whichever takes longer; each bench says what it counts (its *_work
function). Every table shows it at the measured device's ceiling (when CEILINGS has one), the
share of it the plugin reached, and at a V100's ceiling: the V100 floor column.
"""
import dataclasses
import statistics

WARMUP, REPS = 2, 11
# python -m sm70ops's exit codes, every command's (__main__ says when each is given).
EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN, EXIT_USAGE = 0, 1, 2, 64


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """Peak rates a floor is computed from."""

    compute_capability: int
    device: str
    tflops: float  # fp16 tensor cores, fp32 accumulation
    tbytes_s: float  # DRAM, read + write
    source: str


CEILINGS = (
    Ceiling(90, "H200", 645.0, 3.97, "measured on the device machine: WMMA 16x16x16 fp16->fp32, "
            "copy kernel (toolchain notes)"),
    Ceiling(90, "H100", 645.0, 2.97, "the H200's WMMA rate (the same GH100 SMs and clocks); copy "
            "measured on the device machine by bench qsa_attn"),
    Ceiling(70, "V100-SXM2", 125.0, 0.85, "fp16 tensor peak; HBM2 bandwidth reached (toolchain "
            "notes)"),
)


def ceiling_for(compute_capability, name=""):
    """The Ceiling of a device of compute capability 90, 70, ...; where several devices have
    it, the one the device's `name` names. None when there is none."""
    same = [c for c in CEILINGS if c.compute_capability == compute_capability]
    if len(same) > 1:
        same = [c for c in same if c.device in name]
    return same[0] if same else None


V100 = ceiling_for(70)


@dataclasses.dataclass(frozen=True)
class Work:
    """A measurement's useful FLOPs and compulsory bytes; Works add up."""

    flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, other):
        return Work(self.flops + other.flops, self.bytes + other.bytes)


def floor_ms(work, ceiling):
    """The roofline floor of `work` at `ceiling`, ms."""
    return max(work.flops / ceiling.tflops, work.bytes / ceiling.tbytes_s) / 1e9


def floor_cells(work, ms, ceiling):
    """(TFLOP/s reached, floor ms, floor%, V100 floor ms) as text for a run of `ms`; "-" where
    there is no time or the device (`ceiling` None) no ceiling."""
    floor = None if ceiling is None else floor_ms(work, ceiling)
    return ("-" if not ms else f"{work.flops / ms / 1e9:.1f}",
            "-" if floor is None else f"{floor:.3f}",
            "-" if floor is None or not ms else f"{100 * floor / ms:.0f}%",
            f"{floor_ms(work, V100):.3f}")


FLOOR_HEADERS = {"TFLOP/s": 8, "floor ms": 9, "floor%": 7, "V100 floor ms": 14}


def floor_header():
    return " ".join(f"{h:>{w}}" for h, w in FLOOR_HEADERS.items())


def floor_text(work, ms, ceiling):
    """floor_cells in floor_header's columns."""
    cells = floor_cells(work, ms, ceiling)
    return " ".join(f"{c:>{w}}" for c, w in zip(cells, FLOOR_HEADERS.values()))


def floor_columns(ceiling):
    """print_comparison's check cells of the floor, from each row's `work` and `plugin_ms`."""
    return {h: (w, lambda r, i=i: floor_cells(r.work, r.plugin_ms, ceiling)[i])
            for i, (h, w) in enumerate(FLOOR_HEADERS.items())}


def device_ceiling(torch, device):
    """The Ceiling of a CUDA device, or None."""
    major, minor = torch.cuda.get_device_capability(device)
    return ceiling_for(major * 10 + minor, torch.cuda.get_device_name(device))


def ceilings_line(ceiling):
    """What the floor columns were computed from."""
    v100 = f"V100 column: {V100.tflops:.0f} TFLOP/s, {V100.tbytes_s:.2f} TB/s"
    if ceiling is None:
        return f"floors: no ceiling known for this device (bench.CEILINGS); {v100}"
    return (f"floors: {ceiling.device} {ceiling.tflops:.0f} TFLOP/s, {ceiling.tbytes_s:.2f} TB/s "
            f"({ceiling.source}); {v100}")


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


def nvfp4_experts(torch, experts, hidden, inter, seed, device):
    """Random NVFP4 experts (op 3's six checkpoint tensors as a dict): uniform e2m1 codes, e4m3
    scales 0.25 .. 3.75 (exponent field 5..8, any mantissa), and scale_2 that brings the weights
    to about 1/sqrt(fan-in) (a code times these scales has rms ~3)."""
    g = torch.Generator(device=device).manual_seed(seed)
    e, h, i = experts, hidden, inter

    def codes(*shape):
        return torch.randint(0, 256, shape, generator=g, device=device, dtype=torch.uint8)

    def scales(*shape):
        exponent = torch.randint(5, 9, shape, generator=g, device=device, dtype=torch.uint8)
        mantissa = torch.randint(0, 8, shape, generator=g, device=device, dtype=torch.uint8)
        return exponent * 8 + mantissa

    def scale_2(*shape, fan_in):
        return (torch.rand(shape, generator=g, device=device) + 0.5) / (3 * fan_in ** 0.5)

    return dict(w13=codes(e, 2 * i, h // 2), w13_scale=scales(e, 2 * i, h // 16),
                w13_scale_2=scale_2(e, 2, fan_in=h), w2=codes(e, h, i // 2),
                w2_scale=scales(e, h, i // 16), w2_scale_2=scale_2(e, fan_in=i))


class PluginCalls:
    """Calls of one op on the plugin, checked once, with one workspace on `device` of the largest
    size they ask: calling the object runs ctx.execute alone for each, in order, on the current
    stream. note: the first decline's "REASON: message", "" when the plugin takes every call."""

    def __init__(self, torch, ctx, op, calls, device):
        self.torch, self.ctx, self.op, self.calls = torch, ctx, op, calls
        self.decisions = [ctx.check(op, args) for args in calls]
        declined = [d for d in self.decisions if not d.accepted]
        self.note = f"{declined[0].reason}: {declined[0].message}" if declined else ""
        size = max(d.workspace_bytes for d in self.decisions)
        self.workspace = torch.empty(size, dtype=torch.uint8, device=device) if size else None

    def __call__(self):
        stream = self.torch.cuda.current_stream()
        for args, d in zip(self.calls, self.decisions):
            self.ctx.execute(self.op, args, stream, self.workspace, d.workspace_bytes)


def ms_cell(value):
    """A time as a table cell: 1.234, or "-" for one not taken (None)."""
    return "-" if value is None else f"{value:.3f}"


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

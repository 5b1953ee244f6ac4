"""The V100 model's bench: every op at the model's shapes on GPGPU-Sim's V100 in timing mode
(../shared/tools/v100sim), beside CUTLASS on the same model. tools/sim_bench.sh builds and calls
it; `python3 tools/sim_bench.py --help` lists the options.

A case is a GPU test's SimBench case (tests/gpu) or a library peer (tests/sim_bench/cutlass_peers)
run once under the simulator. It prints its useful FLOPs, its compulsory DRAM bytes and how many
times that work the whole op is (tests/sim_bench/report.h), brackets its timed launches, and
checks a sample of its output rows against the CPU reference. From the simulator's statistics of
the bracketed launches this script takes the cycles (at the calibrated 1.53 GHz), the DRAM bytes
moved and the L2 hit rate, and derives:

  floor        the SMs simulated at their roofs: FLOPs at 512 FMA a cycle an SM (the tensor
               units), or compulsory bytes at their share of the 870 GB/s, whichever is slower
  floor_share  floor / simulated cycles
  v100_ms      the whole op on a whole V100: the case's time x (the whole op's work / the case's)
               x (SMs simulated / 80), i.e. the case's time per unit of work per SM held for the
               whole op; its scaling is the case's `whole`
  peer time    the library peer's v100_ms over the case's (the same whole op; above 1: the
               plugin is faster)

A case passes when it ran to the end, exited 0 and its check passed. The run ends with
"N passed, N failed".
"""
import argparse
import concurrent.futures
import dataclasses
import os
import re
import subprocess
import sys
import threading
import time

CLOCK_HZ = 1.53e9  # run.sh's calibration: core, interconnect and L2
V100_SMS = 80
FLOP_PER_CYCLE_SM = 1024  # 512 FMA a cycle on the tensor units
DRAM_BYTES_PER_S = 870e9  # 32 HBM2 channels at 850 MHz, 16 bytes DDR: measured 849 GB/s read
SECTOR_BYTES = 32  # the simulator's DRAM and L2 count 32-byte sectors
SIM = "../shared/tools/v100sim"


@dataclasses.dataclass
class Case:
    op: str
    name: str
    binary: str  # under bazel-bin (--config=sim)
    args: tuple
    slice: int = 1  # V100SIM_SLICE: 1 / slice of the V100's SMs, channels and L2
    peer: str = ""  # the library peer case ("op/name") read beside this one

    @property
    def key(self):
        return f"{self.op}/{self.name}"

    @property
    def sms(self):
        return V100_SMS // self.slice

    @property
    def is_peer(self):
        """A library peer: its kernels are its own binary's, not the plugin's."""
        return self.binary == PEER_BINARY


def gtest(binary, case):
    return f"tests/gpu/{binary}", (f"--gtest_filter=SimBench/*/{case}",)


PEER_BINARY = "tests/sim_bench/cutlass_peers"


def peer(*args):
    return PEER_BINARY, tuple(str(a) for a in args)


# Every case: the model's shapes (ops.md v2, Qwen3.8-Flash-Next's TP4 rank), sized to fill the SMs
# simulated with at least one full wave of the op's largest kernel (the GPU tests' SimBench
# comments say how), on the whole V100 or a quarter of it (--scaling-check compares the two).
# The MoE's peers run CUTLASS's 64 x 128 tile (two threadblocks an SM, cutlass_peers.cu); E 4 at
# I 640 gives its gate/up GEMM three waves on a quarter V100.
CASES = [
    Case("cutlass_gemm", "calibration", *peer("gemm", 2560, 2048, 512)),  # 4 waves of 128 x 128
    Case("nvfp4_moe", "tp4", *gtest("nvfp4_moe_test", "tp4_e10"), slice=4,
         peer="cutlass_grouped/tp4"),
    Case("cutlass_grouped", "tp4", *peer("grouped", 10, 160, 2560, 160), slice=4),
    Case("nvfp4_moe", "tp1", *gtest("nvfp4_moe_test", "tp1_e10"), slice=4,
         peer="cutlass_grouped/tp1"),
    Case("cutlass_grouped", "tp1", *peer("grouped", 4, 160, 2560, 640), slice=4),
    Case("qsa_attn", "p64_128k", *gtest("qsa_attn_test", "p64_128k"), slice=4),
    Case("qsa_attn", "p16_128k", *gtest("qsa_attn_test", "p16_128k"), slice=4),
    Case("qsa_attn", "p64_8k", *gtest("qsa_attn_test", "p64_8k"), slice=4),
    Case("qsa_attn", "p64_128k_growing", *gtest("qsa_attn_test", "p64_128k_growing"), slice=4),
    # The whole V100: on the quarter the filter pass stopped in the simulator's deadlock detector
    # (no core committing for 97 K cycles; the kernel has no inter-block waits, only atomics).
    Case("qsa_index", "iid_128k", *gtest("qsa_index_test", "iid_128k")),
    Case("qsa_index", "pages_128k", *gtest("qsa_index_test", "pages_128k")),
    Case("qsa_index", "iid_8k", *gtest("qsa_index_test", "iid_8k")),
    Case("qsa_index", "pages_8k", *gtest("qsa_index_test", "pages_8k")),
]

# --scaling-check: one case on a quarter V100 and on the whole, the same work per SM: the MoE
# peer's 0.9 of a wave of gate/up tiles (36 on 40 resident, 144 on 160) and 6 waves of down tiles.
SCALING = [
    Case("cutlass_grouped", "tp4_quarter", *peer("grouped", 4, 160, 2560, 160), slice=4),
    Case("cutlass_grouped", "tp4_whole", *peer("grouped", 16, 160, 2560, 160), slice=1),
]


@dataclasses.dataclass
class Launch:
    kernel: str
    cycles: int
    dram_bytes: float
    l2_accesses: int
    l2_misses: int
    issue: dict  # scheduler cycles: issued, stalled (unit busy), waiting (operands), idle
    bank_conflicts: int  # shared-memory bank-conflict stall cycles
    l1_stalls: int  # cycles global accesses waited for L1 resources (MSHRs, lines)

    def bound(self, sms):
        """Where this launch's cycles went, from the simulator's counters."""
        total = sum(self.issue.values()) or 1
        share = {name: cycles / total for name, cycles in self.issue.items()}
        dram = self.dram_bytes / (self.cycles * DRAM_BYTES_PER_S / CLOCK_HZ * sms / V100_SMS)
        per_sm = lambda n: n / sms / max(self.cycles, 1)  # noqa: E731
        return (f"DRAM {dram:.0%} of its bandwidth; schedulers {share['issued']:.0%} issuing, "
                f"{share['stalled']:.0%} unit busy (tensor or LSU), {share['waiting']:.0%} "
                f"waiting on operands, {share['idle']:.0%} idle; shared-memory bank conflicts "
                f"{per_sm(self.bank_conflicts):.0%} and L1 resource stalls "
                f"{per_sm(self.l1_stalls):.0%} of an SM's cycles")


@dataclasses.dataclass
class Result:
    case: Case
    seconds: float = 0.0
    exit_code: int = -1
    flops: float = 0.0
    bytes: float = 0.0
    scale: float = 0.0
    whole: str = ""
    check: str = ""
    checked_ok: bool = False
    launches: list = dataclasses.field(default_factory=list)
    error: str = ""

    @property
    def passed(self):
        return self.exit_code == 0 and self.checked_ok and bool(self.launches) and not self.error

    @property
    def cycles(self):
        return sum(launch.cycles for launch in self.launches)

    @property
    def floor_cycles(self):
        compute = self.flops / (self.case.sms * FLOP_PER_CYCLE_SM)
        memory = self.bytes / (DRAM_BYTES_PER_S / CLOCK_HZ * self.case.sms / V100_SMS)
        return max(compute, memory)

    @property
    def floor_share(self):
        return self.floor_cycles / self.cycles if self.cycles else 0.0

    @property
    def v100_ms(self):
        return self.cycles / CLOCK_HZ * 1e3 * self.scale * self.case.sms / V100_SMS

    @property
    def dram_bytes(self):
        return sum(launch.dram_bytes for launch in self.launches)

    @property
    def l2_hit_rate(self):
        accesses = sum(launch.l2_accesses for launch in self.launches)
        misses = sum(launch.l2_misses for launch in self.launches)
        return 1 - misses / accesses if accesses else 0.0


_NUMBER = r"([0-9.eE+-]+)"
_STATS = {  # the simulator's cumulative counters, printed after every launch
    "reads": re.compile(r"^total dram reads = (\d+)"),
    "writes": re.compile(r"^total dram writes = (\d+)"),
    "bank_conflicts": re.compile(r"^gpgpu_n_shmem_bkconflict = (\d+)"),
    "l1_stalls": re.compile(r"^gpgpu_stall_shd_mem\[gl_mem\]\[resource_stall\] = (\d+)"),
    "stalled": re.compile(r"^Stall:(\d+)"),
    "idle": re.compile(r"^Stall:\d+\tW0_Idle:(\d+)"),
    "waiting": re.compile(r"^Stall:\d+\tW0_Idle:\d+\tW0_Scoreboard:(\d+)"),
    "issued": re.compile(r"^Stall:.*\tW32:(\d+)"),
    "l2_accesses": re.compile(r"^L2_total_cache_accesses = (\d+)"),
    "l2_misses": re.compile(r"^L2_total_cache_misses = (\d+)"),
}


def parse_log(case, text):
    """The Result of one case's log (the simulator's output and the case's own lines)."""
    r = Result(case)
    work = re.search(rf"^sim_bench_work: flops={_NUMBER} bytes={_NUMBER} scale={_NUMBER} "
                     r"whole=(.*)$", text, re.M)
    if work:
        r.flops, r.bytes, r.scale = (float(work.group(i)) for i in (1, 2, 3))
        r.whole = work.group(4)
    check = re.search(r"^sim_bench_check: rows=(\d+) ok=(\d) detail=(.*)$", text, re.M)
    if check:
        r.checked_ok = check.group(2) == "1"
        r.check = f"{check.group(1)} rows: {check.group(3)}"
    begin, end = text.find("sim_bench_timed: begin"), text.find("sim_bench_timed: end")
    if begin < 0 or end < begin:
        r.error = "no timed launches (the case stopped before its bracket closed)"
        return r
    r.launches = _launches(text[begin:end], _counters(text[:begin]))
    return r


def _launches(text, counters):
    """The launches whose statistics `text` holds; `counters` as they were before it. A launch's
    statistics end with its L2 totals, the last of the counters read."""
    launches, kernel, cycles, now = [], None, 0, dict(counters)
    for line in text.splitlines():
        if line.startswith("kernel_name = "):
            kernel = _demangle(line.split("=", 1)[1].strip())
        elif line.startswith("gpu_sim_cycle = "):
            cycles = int(line.split("=")[1])
        for name, pattern in _STATS.items():
            m = pattern.match(line)
            if m:
                now[name] = int(m.group(1))
        if kernel is not None and line.startswith("L2_total_cache_misses"):
            d = {name: now[name] - counters[name] for name in _STATS}
            launches.append(Launch(kernel, cycles, SECTOR_BYTES * (d["reads"] + d["writes"]),
                                   d["l2_accesses"], d["l2_misses"],
                                   {k: d[k] for k in ("issued", "stalled", "waiting", "idle")},
                                   d["bank_conflicts"], d["l1_stalls"]))
            counters, kernel = dict(now), None
    return launches


def _counters(text):
    """The last value of each cumulative counter in `text` (0 before the first launch)."""
    out = dict.fromkeys(_STATS, 0)
    for name, pattern in _STATS.items():
        found = re.findall(pattern.pattern, text, re.M)
        if found:
            out[name] = int(found[-1])
    return out


def _demangle(symbol):
    """A kernel's short name: its function name and template arguments, no namespaces, return
    type or parameter list."""
    try:
        name = subprocess.run(["c++filt", symbol], capture_output=True, text=True).stdout.strip()
    except OSError:
        return symbol
    if name.startswith("_Z"):  # c++filt gives up on some of CUTLASS's: its kernel and tile
        kernel = re.search(r"kernel\d+(Gemm\w*?)I", symbol)
        tile = re.search(r"GemmShapeILi(\d+)ELi(\d+)ELi(\d+)E", symbol)
        if kernel and tile:
            return f"{kernel.group(1)}<{'x'.join(tile.groups())}>"
        return symbol[:57] + "..." if len(symbol) > 60 else symbol
    name = re.sub(r"\(anonymous namespace\)::|sm70ops::\w+::|cutlass::|^void ", "", name)
    depth = 0
    for i in range(len(name) - 1, -1, -1):  # the parameter list: the last top-level (...)
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0 and name[i] == "(":
            name = name[:i]
            break
    return name if len(name) <= 60 else name[:57] + "..."


# ---- Running

def run_case(case, bin_dir, log_dir, progress):
    """One case under run.sh in timing mode; its log at log_dir/OP-NAME.log."""
    log = os.path.join(log_dir, f"{case.op}-{case.name}.log")
    env = dict(os.environ, V100SIM_MODE="timing", V100SIM_SLICE=str(case.slice))
    if not case.is_peer:  # the simulator takes the PTX of one file: the plugin the test dlopens
        plugin = os.path.join(bin_dir, "libsm70ops.so")
        env.update(SM70OPS_LIBRARY=plugin, PYTORCH_BIN=plugin)
    if case.slice == 4:  # IPOLY, as the whole V100: 8 channels x 2 L2 banks is one of its sizes
        env["V100SIM_OPTS"] = (env.get("V100SIM_OPTS", "") + "\n-gpgpu_memory_partition_indexing 2")
    start = time.time()
    progress.started(case)
    with open(log, "w") as out:
        code = subprocess.call([os.path.join(SIM, "run.sh"), os.path.join(bin_dir, case.binary),
                                *case.args], stdout=out, stderr=subprocess.STDOUT, env=env)
        out.write(f"\nsim_bench_run: exit={code} seconds={time.time() - start:.0f}\n")
    result = read_case(case, log)
    progress.finished(case, result)
    return result


def read_case(case, log):
    """The Result of the case whose log is `log`, with the exit code and wall time run_case wrote."""
    try:
        with open(log, errors="replace") as f:
            text = f.read()
    except OSError:
        result = Result(case)
        result.error = f"no log {log} (run the case first)"
        return result
    result = parse_log(case, text)
    run = re.search(r"^sim_bench_run: exit=(-?\d+) seconds=(\d+)$", text, re.M)
    if run:
        result.exit_code, result.seconds = int(run.group(1)), float(run.group(2))
    elif not result.error:
        result.error = "the run did not finish"
    return result


class Progress:
    """Which cases run and for how long, a line every `every` seconds and one as each ends."""

    def __init__(self, total, every):
        self.total, self.every, self.done = total, every, 0
        self.running = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self._tick, daemon=True).start()

    def started(self, case):
        with self.lock:
            self.running[case.key] = time.time()
            print(f"sim_bench: [{self.done}/{self.total}] start {case.key} "
                  f"({case.sms} SMs)", flush=True)

    def finished(self, case, result):
        with self.lock:
            self.running.pop(case.key, None)
            self.done += 1
            verdict = "passed" if result.passed else "FAILED"
            print(f"sim_bench: [{self.done}/{self.total}] {verdict} {case.key} in "
                  f"{_duration(result.seconds)} ({result.cycles} cycles)", flush=True)

    def _tick(self):
        while not self.stop.wait(self.every):
            with self.lock:
                now = time.time()
                running = ", ".join(f"{key} {_duration(now - t)}" for key, t in self.running.items())
                print(f"sim_bench: [{self.done}/{self.total}] running {running}", flush=True)


def _duration(seconds):
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


# ---- Reporting

def table(results):
    """The bench's table: a row a case, then its kernels."""
    by_key = {r.case.key: r for r in results}
    head = ("case", "SMs", "time us", "GFLOP", "MB comp.", "floor us", "share", "DRAM MB",
            "L2 hit", "V100 ms", "peer share", "peer time", "wall")
    rows = [head]
    for r in results:
        p = by_key.get(r.case.peer)
        rows.append((r.case.key, str(r.case.sms), f"{r.cycles / CLOCK_HZ * 1e6:.1f}",
                     f"{r.flops / 1e9:.3g}", f"{r.bytes / 1e6:.3g}",
                     f"{r.floor_cycles / CLOCK_HZ * 1e6:.1f}", f"{r.floor_share:.0%}",
                     f"{r.dram_bytes / 1e6:.4g}", f"{r.l2_hit_rate:.0%}",
                     f"{r.v100_ms:.3g}" if r.scale else "-",
                     f"{p.floor_share:.0%}" if p and p.passed else "-", _peer_time(r, p),
                     _duration(r.seconds)))
        for launch in r.launches:
            rows.append(("  " + launch.kernel, "", f"{launch.cycles / CLOCK_HZ * 1e6:.1f}", "", "",
                         "", "", f"{launch.dram_bytes / 1e6:.4g}",
                         f"{1 - launch.l2_misses / launch.l2_accesses:.0%}"
                         if launch.l2_accesses else "-", "", "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


def _peer_time(r, p):
    """The peer's V100 time over the case's (the same whole op): above 1, the peer is slower."""
    if not (p and p.passed and r.passed and r.v100_ms):
        return "-"
    return f"{p.v100_ms / r.v100_ms:.2f}x"


def lines(results):
    """One line a case that tools read: `sim_bench: OP CASE floor_share=F v100_ms=M [peer=...]`."""
    by_key = {r.case.key: r for r in results}
    out = []
    for r in results:
        if not r.passed:
            out.append(f"sim_bench: {r.case.op} {r.case.name} FAILED")
            continue
        line = (f"sim_bench: {r.case.op} {r.case.name} floor_share={r.floor_share:.3f} "
                f"v100_ms={r.v100_ms:.3f}")
        p = by_key.get(r.case.peer)
        if p and p.passed:
            line += f" peer={p.case.op} peer_floor_share={p.floor_share:.3f}"
        out.append(line)
    return out


def roofline(results, path):
    """Each case's point (per-SM rates scaled to a whole V100) under the tensor and DRAM roofs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peak = V100_SMS * FLOP_PER_CYCLE_SM * CLOCK_HZ
    fig, ax = plt.subplots(figsize=(8, 5.5))
    x = [10 ** (i / 20) for i in range(0, 100)]
    ax.plot(x, [min(peak, DRAM_BYTES_PER_S * i) / 1e12 for i in x], "k-", lw=1.5,
            label="roofs: 125 TFLOP/s tensor, 870 GB/s DRAM")
    for r in results:
        if not (r.passed and r.flops and r.bytes):
            continue
        intensity = r.flops / r.bytes
        rate = r.flops / (r.cycles / CLOCK_HZ) * V100_SMS / r.case.sms / 1e12
        ax.plot(intensity, rate, "s" if r.case.is_peer else "o", ms=7,
                mfc="none" if r.case.is_peer else None)
        ax.annotate(f"{r.case.key} ({r.floor_share:.0%})", (intensity, rate), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("useful FLOPs per compulsory DRAM byte")
    ax.set_ylabel("TFLOP/s (a whole V100: per-SM rate x 80)")
    ax.set_title("sm70ops on GPGPU-Sim's V100 (calibrated, 1.53 GHz); squares: CUTLASS")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def select(parser, cases, args):
    """The cases the ops and --cases name (all without either); an op's peers come with it."""
    unknown = set(args.ops) - {c.op for c in cases}
    named = {key for key in args.cases.split(",") if key}
    unknown |= named - {c.key for c in cases}
    if unknown:
        parser.error(f"unknown op or case {', '.join(sorted(unknown))}")
    if not args.ops and not named:
        return cases
    wanted = {c.key for c in cases if c.op in args.ops} | named
    if args.ops:
        wanted |= {c.peer for c in cases if c.key in wanted and c.peer}
    return [c for c in cases if c.key in wanted]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ops", nargs="*", help="ops to run (default: all): " +
                        ", ".join(sorted({c.op for c in CASES})))
    parser.add_argument("--bin", required=True, help="bazel-bin of the --config=sim build")
    parser.add_argument("--logs", default="/tmp/sm70ops-sim-bench")
    parser.add_argument("--jobs", type=int, default=2, help="simulators at once (one core each)")
    parser.add_argument("--plot", help="the roofline's file (default: docs/sim_bench_roofline.png "
                        "for every case, else roofline.png beside the logs)")
    parser.add_argument("--scaling-check", action="store_true",
                        help="the slice against the whole V100 instead of the bench")
    parser.add_argument("--every", type=float, default=60, help="seconds between progress lines")
    parser.add_argument("--cases", default="",
                        help="only these cases, comma-separated OP/NAME (e.g. qsa_attn/p64_128k)")
    parser.add_argument("--report", action="store_true",
                        help="simulate nothing: report the cases from the logs earlier runs left")
    args = parser.parse_args()
    cases = select(parser, SCALING if args.scaling_check else CASES, args)
    if args.report:
        results = [read_case(c, os.path.join(args.logs, f"{c.op}-{c.name}.log")) for c in cases]
    else:
        os.makedirs(args.logs, exist_ok=True)
        progress = Progress(len(cases), args.every)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda c: run_case(c, args.bin, args.logs, progress), cases))
        progress.stop.set()
    print()
    print(table(results))
    print()
    for r in results:
        if not r.passed:
            why = r.error or (f"exit {r.exit_code}" + (f", check: {r.check}" if r.check else ""))
            print(f"sim_bench: {r.case.key} failed ({why}): see {args.logs}/{r.case.op}-"
                  f"{r.case.name}.log")
        else:
            print(f"sim_bench: {r.case.key}: {r.check}; whole op: {r.whole} (x{r.scale:.4g})")
            longest = max(r.launches, key=lambda launch: launch.cycles)
            print(f"  longest kernel {longest.kernel} ({longest.cycles / r.cycles:.0%} of the "
                  f"case): {longest.bound(r.case.sms)}")
    if args.scaling_check and len(results) == 2 and all(r.passed for r in results):
        part, whole = results
        print(f"sim_bench: scaling check: the whole op projected from {part.case.sms} SMs "
              f"{part.v100_ms:.3f} ms, from {whole.case.sms} SMs {whole.v100_ms:.3f} ms "
              f"({part.v100_ms / whole.v100_ms - 1:+.1%})")
    for line in lines(results):
        print(line)
    if not args.scaling_check and any(r.passed for r in results):
        try:
            # Only the whole bench redraws the docs' picture; a part of it draws beside its logs.
            plot = args.plot or ("docs/sim_bench_roofline.png" if len(cases) == len(CASES)
                                 else os.path.join(args.logs, "roofline.png"))
            roofline(results, plot)
            print(f"sim_bench: roofline in {plot}")
        except ImportError:
            print("sim_bench: no matplotlib: no roofline drawn")
    passed = sum(r.passed for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

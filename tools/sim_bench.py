"""The V100 model's bench: every op at the model's shapes on GPGPU-Sim's V100 in timing mode
(../shared/tools/v100sim, built with this project's patches by tools/v100sim/build.sh), beside
CUTLASS on the same model. tools/sim_bench.sh builds and calls it; `python3 tools/sim_bench.py
--help` lists the options.

A case is a GPU test's SimBench case (tests/gpu) or a library peer (tests/sim_bench/cutlass_peers)
run once under the simulator. It prints its useful FLOPs, its compulsory DRAM bytes and how many
times that work the whole op is (tests/sim_bench/report.h), brackets its timed launches, and
checks a sample of its output rows against the CPU reference. Only the bracketed launches run in
the timing model, the rest functionally; a case may also time only the first waves of each
launch's blocks (its sample_waves: the simulator runs the rest functionally and the launch's
counts are projected to its whole grid). From the simulator's statistics of the bracketed
launches this script takes the cycles (at the calibrated 1.53 GHz), the DRAM bytes moved and the
L2 hit rate, and derives:

  floor        the SMs simulated at their roofs: FLOPs at 512 FMA a cycle an SM (the tensor
               units), or compulsory bytes at their share of the 870 GB/s, whichever is slower
  floor_share  floor / simulated cycles, of the whole op (its floor over v100_ms) where the case
               projects to one
  v100_ms      the whole op on a whole V100: the case's time x (the whole op's work / the case's)
               x (SMs simulated / 80), i.e. the case's time per unit of work per SM held for the
               whole op; its scaling is the case's `whole`. The launches' configured latency
               (5,000 cycles each) is a fixed cost: taken out before the scaling, and paid once
               per call of the whole op (a prefill chunk's)
  peer time    the library peer's v100_ms over the case's (the same whole op; above 1: the
               plugin is faster)

--validate runs each case's full counterpart (the whole V100, every block of every launch timed,
on the shared build) and compares the projections; --same-answers runs cases unsampled on both
builds and compares every statistic. The prefill table puts the ops' projections together for a
whole prompt on one TP4 rank, beside the seed's published times. A case passes when it ran to the
end, exited 0 and its check passed. The run ends with "N passed, N failed".
"""
import argparse
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
    # -v100sim_sample_waves: the timing model runs the first N waves of each launch's blocks,
    # the rest functionally (tools/v100sim/sample-waves.patch); 0: every block timed.
    sample_waves: int = 0
    # -v100sim_sample_kernels: which launches are sampled (mangled-name substrings, comma
    # separated; "": all). Launches of short CTAs are timed whole: their first wave is mostly
    # the memory pipeline filling, which their later waves overlap.
    sample_kernels: str = ""
    # --validate's reference: the same whole op run in full (the whole V100, every block timed),
    # when this case is a slice or a sample of it; None: this case itself, unsampled.
    full: "Case" = None

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
# comments say how), on the whole V100 or a quarter of it. A case on the quarter has its full run
# for --validate: the same op on the whole V100 with four times the blocks. The MoE's peers run
# CUTLASS's 64 x 128 tile (two threadblocks an SM, cutlass_peers.cu); E 4 at I 640 gives its
# gate/up GEMM three waves on a quarter V100.
def moe(name, case, full, peer="", sample_waves=1):
    """The GPU test's SimBench `case` on the quarter, the first wave of each GEMM launch timed
    (its blocks are alike: an expert's 160-row tile against a weight tile; the routing and the
    combine are timed whole); its `full` case on the whole V100."""
    return Case("nvfp4_moe", name, *gtest("nvfp4_moe_test", case), slice=4, peer=peer,
                sample_waves=sample_waves, sample_kernels="nvfp4_moe_gemm",
                full=Case("nvfp4_moe", full, *gtest("nvfp4_moe_test", full)))


def grouped(name, experts, rows, n, k):
    """CUTLASS's fp16 grouped GEMMs of the MoE on the quarter, 4x the experts in full. GemmGrouped
    is persistent (one wave of threadblocks walks every tile), so it is timed whole: its cases
    hold few experts, at 640 rows as many tiles as at 160 (3 experts at I 160: 90 gate/up and
    600 down tiles, as TP4's 10 at 160 rows; 1 at I 640: 100 and 200)."""
    return Case("cutlass_grouped", name, *peer("grouped", experts, rows, n, k), slice=4,
                full=Case("cutlass_grouped", name + "_whole",
                          *peer("grouped", 4 * experts, rows, n, k)))


def attn(name):
    """320 rows (20 tiles) on the quarter; in full, 1280 rows (80 tiles) on the whole V100."""
    return Case("qsa_attn", name, *gtest("qsa_attn_test", name), slice=4,
                full=Case("qsa_attn", name + "_whole", *gtest("qsa_attn_test", name + "_whole")))


def index(name):
    """On the whole V100 (on the quarter the 128K filter pass stopped in the simulator's deadlock
    detector), every block timed: a projection from the first wave of its short blocks failed
    its full run's check (docs/performance.md, "The instrument")."""
    return Case("qsa_index", name, *gtest("qsa_index_test", name))


CASES = [
    # 4 waves of 128 x 128 tiles, the first timed
    Case("cutlass_gemm", "calibration", *peer("gemm", 2560, 2048, 512), sample_waves=1),
    moe("tp4", "tp4_e10", "tp4_e40", peer="cutlass_grouped/tp4"),
    grouped("tp4", 10, 160, 2560, 160),
    moe("tp1", "tp1_e10", "tp1_e40", peer="cutlass_grouped/tp1"),
    grouped("tp1", 4, 160, 2560, 640),
    moe("tp4_t32k", "tp4_t32k", "tp4_t32k_e40", peer="cutlass_grouped/tp4_t32k"),
    grouped("tp4_t32k", 3, 640, 2560, 160),
    moe("tp1_t32k", "tp1_t32k", "tp1_t32k_e40", peer="cutlass_grouped/tp1_t32k"),
    grouped("tp1_t32k", 1, 640, 2560, 640),
    moe("tp4_zipf", "tp4_zipf", "tp4_zipf_e160", sample_waves=0),  # uneven tiles: all timed
    attn("p64_128k"),
    attn("p16_128k"),
    attn("p64_8k"),
    attn("p64_128k_growing"),
    index("iid_128k"),
    index("pages_128k"),
    index("iid_8k"),
    index("pages_8k"),
]
TOLERANCE = 0.05  # --validate: a projection within 5% of its full run's


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
    # (CTAs timed, CTAs of the grid, their thread instructions, the grid's) when the simulator
    # sampled the launch (-v100sim_sample_waves): every count above is then the timed CTAs' x
    # the grid's instructions / theirs.
    sampled: tuple = None

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
    calls: int = 0  # the whole op's calls: each pays the launches' latency once
    latency: int = 0  # the simulator's configured kernel launch latency, in cycles
    whole: str = ""
    check: str = ""
    checked_ok: bool = False
    launches: list = dataclasses.field(default_factory=list)
    error: str = ""
    cpu_seconds: float = 0.0  # the simulator's CPU time (two run at once: wall time is shared)

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
        """The whole op's floor over its projected time (the case's, for a case with no whole
        op): the launches' fixed latency counts as the whole op pays it, once a call."""
        if not self.cycles:
            return 0.0
        if not self.scale:
            return self.floor_cycles / self.cycles
        floor_ms = self.floor_cycles / CLOCK_HZ * 1e3 * self.scale * self.case.sms / V100_SMS
        return floor_ms / self.v100_ms

    @property
    def v100_ms(self):
        """The per-SM rate of the case's work held for the whole op, whose calls each pay the
        launches' fixed latency once (that part is not scaled with the work)."""
        fixed = len(self.launches) * self.latency
        work = (self.cycles - fixed) * self.scale * self.case.sms / V100_SMS
        return (work + fixed * self.calls) / CLOCK_HZ * 1e3

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
                     r"(?:calls=(\d+) )?whole=(.*)$", text, re.M)
    if work:
        r.flops, r.bytes, r.scale = (float(work.group(i)) for i in (1, 2, 3))
        r.calls, r.whole = int(work.group(4) or 0), work.group(5)
    check = re.search(r"^sim_bench_check: rows=(\d+) ok=(\d) detail=(.*)$", text, re.M)
    if check:
        r.checked_ok = check.group(2) == "1"
        r.check = f"{check.group(1)} rows: {check.group(3)}"
    begin, end = text.find("sim_bench_timed: begin"), text.find("sim_bench_timed: end")
    if begin < 0 or end < begin:
        r.error = "no timed launches (the case stopped before its bracket closed)"
        return r
    latency = re.search(r"^-gpgpu_kernel_launch_latency\s+(\d+)", text, re.M)
    r.latency = int(latency.group(1)) if latency else 0
    r.launches = _launches(text[begin:end], _counters(text[:begin]), r.latency)
    return r


_SAMPLED = re.compile(r"^v100sim_sampled: kernel_launch_uid = (\d+) timed (\d+) of (\d+) CTAs, "
                      r"(\d+) of (\d+) thread instructions")


def _launches(text, counters, latency):
    """The launches whose statistics `text` holds; `counters` as they were before it. A launch's
    statistics end with its L2 totals, the last of the counters read. A sampled launch's counts
    are projected to its whole grid by the thread instructions executed, x all / timed; its
    cycles less the launch `latency` (paid once a launch) likewise."""
    launches, kernel, cycles, uid, now = [], None, 0, None, dict(counters)
    sampled = {}  # uid -> (timed, total), printed before the launch's statistics
    for line in text.splitlines():
        m = _SAMPLED.match(line)
        if m:
            sampled[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 6))
        if line.startswith("kernel_name = "):
            kernel = _demangle(line.split("=", 1)[1].strip())
        elif line.startswith("kernel_launch_uid = "):
            uid = line.split("=")[1].strip()
        elif line.startswith("gpu_sim_cycle = "):
            cycles = int(line.split("=")[1])
        for name, pattern in _STATS.items():
            m = pattern.match(line)
            if m:
                now[name] = int(m.group(1))
        if kernel is not None and line.startswith("L2_total_cache_misses"):
            d = {name: now[name] - counters[name] for name in _STATS}
            sample = sampled.get(uid)
            x = sample[3] / sample[2] if sample else 1.0
            launches.append(Launch(kernel, round(latency + (cycles - latency) * x) if sample
                                   else cycles,
                                   SECTOR_BYTES * (d["reads"] + d["writes"]) * x,
                                   round(d["l2_accesses"] * x), round(d["l2_misses"] * x),
                                   {k: d[k] * x for k in ("issued", "stalled", "waiting", "idle")},
                                   d["bank_conflicts"] * x, d["l1_stalls"] * x, sample))
            counters, kernel, uid = dict(now), None, None
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

@dataclasses.dataclass(frozen=True)
class Mode:
    """How a case is simulated. fast (the bench): this project's build of the simulator
    (tools/v100sim), the case's sampling, and only the bracketed launches in the timing model,
    the rest functional (tests/sim_bench/report.h). full (--validate): the shared build, every
    block of every launch timed. unsampled and shared (--same-answers): the two builds, set up as
    the fast mode but with every block timed, whose statistics must be equal."""
    name: str
    prefix: str
    functional_setup: bool
    sampled: bool

    def log(self, log_dir, case):
        sub = "" if self.name == "fast" else self.name
        return os.path.join(log_dir, sub, f"{case.op}-{case.name}.log")


def run_case(case, mode, bin_dir, log_dir, progress):
    """One case under run.sh in timing mode; its log at mode.log(log_dir, case)."""
    log = mode.log(log_dir, case)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    env = dict(os.environ, V100SIM_MODE="timing", V100SIM_SLICE=str(case.slice),
               V100SIM_PREFIX=mode.prefix)
    env.pop("PTX_SIM_MODE_FUNC", None)
    if mode.functional_setup:
        env["PTX_SIM_MODE_FUNC"] = "1"
    if not case.is_peer:  # the simulator takes the PTX of one file: the plugin the test dlopens
        plugin = os.path.join(bin_dir, "libsm70ops.so")
        env.update(SM70OPS_LIBRARY=plugin, PYTORCH_BIN=plugin)
    # The per-PTX-line statistics feed only a file in run.sh's scratch directory, which it
    # deletes; off, they cost nothing (tools/v100sim/speed.patch) and no statistic moves.
    opts = ["-enable_ptx_file_line_stats 0", env.get("V100SIM_OPTS", "")]
    if case.slice == 4:  # IPOLY, as the whole V100: 8 channels x 2 L2 banks is one of its sizes
        opts.append("-gpgpu_memory_partition_indexing 2")
    if mode.sampled and case.sample_waves:
        opts.append(f"-v100sim_sample_waves {case.sample_waves}")
        if case.sample_kernels:
            opts.append(f"-v100sim_sample_kernels {case.sample_kernels}")
    env["V100SIM_OPTS"] = "\n".join(o for o in opts if o)
    start = time.time()
    progress.started(case)
    with open(log, "w") as out:
        child = subprocess.Popen([os.path.join(SIM, "run.sh"), os.path.join(bin_dir, case.binary),
                                  *case.args], stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)  # the child's own CPU time
        code = child.returncode = os.waitstatus_to_exitcode(status)
        out.write(f"\nsim_bench_run: exit={code} seconds={time.time() - start:.0f} "
                  f"cpu={usage.ru_utime + usage.ru_stime:.0f}\n")
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
    run = re.search(r"^sim_bench_run: exit=(-?\d+) seconds=(\d+)(?: cpu=(\d+))?$", text, re.M)
    if run:
        result.exit_code, result.seconds = int(run.group(1)), float(run.group(2))
        result.cpu_seconds = float(run.group(3) or run.group(2))
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
            name = launch.kernel + (f" [{launch.sampled[0]} of {launch.sampled[1]} CTAs]"
                                    if launch.sampled else "")
            rows.append(("  " + name, "", f"{launch.cycles / CLOCK_HZ * 1e6:.1f}", "", "",
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


# ---- A prompt's prefill

# One TP4 rank of the model (ops.md v2): 48 layers, QSA on every fourth; chunks of 8192 rows;
# the indexer's and the attention's token budget B 2048 over groups of c 4.
LAYERS, QSA_LAYERS, CHUNK, BUDGET, RATIO = 48, 12, 8192, 2048, 4
PROMPTS = (8192, 32768, 131072)

# The seed (shared/seeds: a vLLM fork on four V100-SXM2, TP4) and 1Cat-vLLM, as published.
SEED_ATTN_MS_PER_CHUNK = 55.151  # selected QSA, per layer and rank, its 8192-token capture
SEED_MOE_MS_PER_CHUNK = 6.702  # the NVFP4 MoE at T 8192, top-10, per layer and rank
ONECAT_MOE_MS_PER_CHUNK = 6.12
SEED_INDEX_MS = 3.118  # the complete cuBLAS indexer, 1024 rows at a 131072-token context
SEED_INDEX_SCORES = 1024 * 131072
SEED_PREFILL_S = {8192: 2.315786, 32768: 32768 / 4532.07, 131072: 131072 / 4108.16}


def set_tokens(n):
    """Tokens the attention of every row of an n-token prompt reads: min(L, B + L mod c)."""
    return sum(length if length // RATIO <= BUDGET // RATIO else BUDGET + length % RATIO
               for length in range(1, n + 1))


def index_scores(n):
    """Group scores of an n-token prompt's rows (each scores its complete groups, per head)."""
    return sum(length // RATIO for length in range(1, n + 1))


def prefill_rows(by_key):
    """[(prompt, plugin ms of index, attention, MoE over all layers, the seed's of the same
    ops, 1Cat's MoE, the seed's whole prefill in ms)]; None where a case is missing."""
    def ms(key):
        r = by_key.get(key)
        return r.v100_ms if r is not None and r.passed else None

    index = {8192: ms("qsa_index/iid_8k"), 131072: ms("qsa_index/iid_128k")}
    attn = {8192: ms("qsa_attn/p64_8k"), 131072: ms("qsa_attn/p64_128k")}
    # 32K from the 128K case's rate: per score for the index, per token read for the attention.
    if index[131072] is not None:
        index[32768] = index[131072] * index_scores(32768) / index_scores(131072)
    if attn[131072] is not None:
        attn[32768] = attn[131072] * set_tokens(32768) / set_tokens(131072)
    moe = ms("nvfp4_moe/tp4")
    rows = []
    for n in PROMPTS:
        chunks = n // CHUNK
        mine = (index.get(n), attn.get(n), moe)
        plugin = tuple(None if v is None else v * QSA_LAYERS for v in mine[:2])
        plugin += (None if moe is None else moe * LAYERS * chunks,)
        seed = (SEED_INDEX_MS * n * (n + 1) / 2 / SEED_INDEX_SCORES * QSA_LAYERS,
                SEED_ATTN_MS_PER_CHUNK * chunks * QSA_LAYERS,
                SEED_MOE_MS_PER_CHUNK * chunks * LAYERS)
        rows.append((n, plugin, seed, ONECAT_MOE_MS_PER_CHUNK * chunks * LAYERS,
                     SEED_PREFILL_S[n] * 1e3))
    return rows


def prefill_table(results):
    """The plugin's three ops over a whole prompt's prefill on one TP4 rank, beside the seed's
    and 1Cat-vLLM's published times for the same ops and the seed's whole prefill."""
    by_key = {r.case.key: r for r in results}
    fmt = lambda v: "-" if v is None else f"{v / 1e3:.2f}"  # noqa: E731
    head = ("prompt", "index s", "attn s", "MoE s", "sm70ops s", "seed: index", "attn", "MoE",
            "3 ops s", "1Cat MoE s", "seed prefill s", "3 ops' share", "sm70ops / seed")
    out = [head]
    for n, plugin, seed, onecat, prefill in prefill_rows(by_key):
        total = None if None in plugin else sum(plugin)
        out.append((f"{n // 1024}K", *map(fmt, plugin), fmt(total), *map(fmt, seed),
                    fmt(sum(seed)), fmt(onecat), fmt(prefill), f"{sum(seed) / prefill:.0%}",
                    "-" if total is None else f"{total / sum(seed):.2f}"))
    notes = (
        "sim_bench: prefill of one TP4 rank (48 layers, QSA in 12; chunks of 8192 rows): the\n"
        "  plugin's times are the V100 model's projections (index and attention: the 8K and 128K\n"
        "  cases; 32K scaled from 128K by scores and by tokens read; MoE: the T 8192 case x 48 x\n"
        "  chunks). Seed (shared/seeds): selected attention 55.151 ms a chunk and layer; MoE\n"
        "  6.702 ms a chunk and layer (1Cat-vLLM 6.12); indexer 3.118 ms for 1024 rows at 131072\n"
        "  tokens, scaled by the rows' context; whole prefill at 4532 tok/s (32K) and 4108 (131K),\n"
        "  and 2.316 s for 8K (an earlier commit's TTFT).")
    return _columns(out) + "\n" + notes


def last_cpu(log):
    """The CPU seconds the run that left `log` took (run_case's last line), 0 if none did."""
    try:
        with open(log, errors="replace") as f:
            found = re.findall(r"^sim_bench_run: .* cpu=(\d+)$", f.read(), re.M)
    except OSError:
        return 0
    return int(found[-1]) if found else 0


def simulate(cases, mode, args):
    """Runs `cases` in `mode`, args.jobs at a time, with progress lines; their Results, in the
    cases' order. The longest start first, as their last runs in args.logs took (cases never run
    there keep their order, after those): a long case started last would run alone at the end.
    At most one case on the whole V100 runs at a time: an index case there holds 15-21 GB of
    host memory, and two of them exceed this machine's 24 (the kernel's out-of-memory killer
    stopped both)."""
    progress = Progress(len(cases), args.every)
    pending = sorted(cases, key=lambda c: -last_cpu(mode.log(args.logs, c)))
    running, results, errors = [], {}, []
    changed = threading.Condition()

    def worker():
        while True:
            with changed:
                while pending and (case := next_case(pending, running)) is None:
                    changed.wait()
                if not pending:
                    return
                pending.remove(case)
                running.append(case)
            try:
                results[case.key] = run_case(case, mode, args.bin, args.logs, progress)
            except BaseException as e:  # re-raised below, once the other cases have ended
                errors.append(e)
            finally:
                with changed:
                    running.remove(case)
                    changed.notify_all()

    workers = [threading.Thread(target=worker) for _ in range(max(args.jobs, 1))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    progress.stop.set()
    if errors:
        raise errors[0]
    return [results[c.key] for c in cases]


def next_case(pending, running):
    """The first of `pending` that may start beside `running`: any case but a second one on the
    whole V100; None when only those wait."""
    whole_running = any(c.slice == 1 for c in running)
    return next((c for c in pending if not (whole_running and c.slice == 1)), None)


def report(results, args, everything):
    """The bench's table, each case's verdict and bound, its lines, the roofline."""
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
    for line in lines(results):
        print(line)
    if any(r.passed for r in results):
        try:
            # Only the whole bench redraws the docs' picture; a part of it draws beside its logs.
            plot = args.plot or ("docs/sim_bench_roofline.png" if everything
                                 else os.path.join(args.logs, "roofline.png"))
            roofline(results, plot)
            print(f"sim_bench: roofline in {plot}")
        except ImportError:
            print("sim_bench: no matplotlib: no roofline drawn")


def validate(cases, args, fast_mode, full_mode):
    """Each case's projection against its full run's (the whole V100, every block, every launch
    timed, the shared simulator): a table, and a result a case, passed within TOLERANCE."""
    fast = [read_case(c, fast_mode.log(args.logs, c)) for c in cases]
    missing = [r.case for r in fast if not r.passed]
    if missing:
        print(f"sim_bench: validate: running {len(missing)} fast case(s) first")
        ran = {r.case.key: r for r in simulate(missing, fast_mode, args)}
        fast = [ran.get(r.case.key, r) for r in fast]
    full = simulate([c.full or c for c in cases], full_mode, args)
    rows = [("case", "fast SMs", "fast ms", "full run", "full SMs", "full ms", "difference",
             "fast cpu", "full cpu")]
    verdicts = []
    for f, g in zip(fast, full):
        ok = f.passed and g.passed and abs(f.v100_ms / g.v100_ms - 1) <= TOLERANCE
        verdicts.append(ok)
        diff = f"{f.v100_ms / g.v100_ms - 1:+.1%}" if f.passed and g.passed else "-"
        rows.append((f.case.key, str(f.case.sms), f"{f.v100_ms:.3f}", g.case.key,
                     str(g.case.sms), f"{g.v100_ms:.3f}", diff, _duration(f.cpu_seconds),
                     _duration(g.cpu_seconds)))
        print(f"sim_bench: validate {f.case.op} {f.case.name} fast_ms={f.v100_ms:.3f} "
              f"full_ms={g.v100_ms:.3f} {'ok' if ok else 'FAILED'}")
    print()
    print(_columns(rows))
    return verdicts


def same_answers(cases, args, ours, shared):
    """Each case unsampled on this project's simulator build and on the shared one, set up as the
    bench's: every statistic the simulator prints must be equal, launch for launch."""
    simulate(cases, ours, args)
    results = simulate(cases, shared, args)
    verdicts = []
    for r in results:
        mine, theirs = (statistics(m.log(args.logs, r.case)) for m in (ours, shared))
        differ = [(a, b) for a, b in zip(mine, theirs) if a != b]
        ok = r.passed and bool(mine) and len(mine) == len(theirs) and not differ
        verdicts.append(ok)
        detail = (f"{len(theirs)} statistics, all equal" if ok else
                  f"{len(mine)} against {len(theirs)} statistics, first difference: "
                  f"{differ[0] if differ else 'their number'}")
        print(f"sim_bench: same answers {r.case.key}: {detail}")
    return verdicts


# Lines of a log that depend on the host (wall time, rates, addresses), not on the simulation.
_HOST_DEPENDENT = re.compile(r"simulation_time|simulation_rate|sim_rate|silicon_slowdown|elapsed|"
                             r"0x[0-9a-f]{8,}|^kernel_stream_id|^sim_bench_run:")
_STATISTIC = re.compile(r"^([A-Za-z_][\w\[\]\.()]* ?= |Stall:|sim_bench_)")


def statistics(log):
    """The simulator's statistics in a log, in order, with the host-dependent ones left out."""
    try:
        with open(log, errors="replace") as f:
            return [line.rstrip("\n") for line in f
                    if _STATISTIC.match(line) and not _HOST_DEPENDENT.search(line)]
    except OSError:
        return []


def _columns(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ops", nargs="*", help="ops to run (default: all): " +
                        ", ".join(sorted({c.op for c in CASES})))
    parser.add_argument("--bin", required=True, help="bazel-bin of the --config=sim build")
    parser.add_argument("--prefix", required=True,
                        help="this project's simulator build (tools/v100sim/build.sh)")
    parser.add_argument("--shared-prefix", required=True,
                        help="the shared simulator build (../shared/tools/v100sim/setup.sh)")
    parser.add_argument("--logs", default="/tmp/sm70ops-sim-bench")
    parser.add_argument("--jobs", type=int, default=2, help="simulators at once (one core each)")
    parser.add_argument("--plot", help="the roofline's file (default: docs/sim_bench_roofline.png "
                        "for every case, else roofline.png beside the logs)")
    parser.add_argument("--every", type=float, default=60, help="seconds between progress lines")
    parser.add_argument("--cases", default="",
                        help="only these cases, comma-separated OP/NAME (e.g. qsa_attn/p64_128k)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--report", action="store_true",
                      help="simulate nothing: report the cases from the logs earlier runs left")
    what.add_argument("--validate", action="store_true",
                      help="each case against its full run (hours): the validation table")
    what.add_argument("--same-answers", action="store_true",
                      help="the cases unsampled on both builds: the same statistics?")
    args = parser.parse_args()
    cases = select(parser, CASES, args)
    fast = Mode("fast", args.prefix, True, True)
    start = time.time()
    if args.validate:
        verdicts = validate(cases, args, fast, Mode("full", args.shared_prefix, False, False))
    elif args.same_answers:
        verdicts = same_answers(cases, args, Mode("unsampled", args.prefix, True, False),
                                Mode("shared", args.shared_prefix, True, False))
    else:
        results = ([read_case(c, fast.log(args.logs, c)) for c in cases] if args.report
                   else simulate(cases, fast, args))
        report(results, args, len(cases) == len(CASES))
        print()
        print(prefill_table(results))
        verdicts = [r.passed for r in results]
    print(f"sim_bench: {_duration(time.time() - start)} of wall time"
          f"{' (simulated nothing)' if args.report else ''}")
    print(f"{sum(verdicts)} passed, {len(verdicts) - sum(verdicts)} failed")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

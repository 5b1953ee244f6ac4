"""python -m sm70ops bench qsa_index: the plugin against the host's paths in one run.

Shapes: the model's index by default (a key per 4 tokens, weight-free, B 2048, 64-token pages),
contract version 1's with --shapes v1 (a key per token, per-head weights); --compress-ratio and
--page override c and P. One request; CUDA-event medians.

Without --data: 1024 rows (the last of the prompt) against 1K..128K tokens of i.i.d. keys, the
plugin against the generic torch path.

With --data NAME or all (issue 21): each generator of sm70ops.data at each size (1024 rows x 8K,
32K and 128K tokens; whole 32K and 128K prefills in chunks of 8192 rows, summed), the plugin's
ms and its ratio to i.i.d. data at the same size, the generic path's and the Triton baseline's ms
(triton_index: fused paged logits, torch.topk, expansion in torch) and adjacent rows' page
overlap.

Either way the plugin's token sets are judged on CHECKED_ROWS rows of each case (of the last
chunk) against the top groups of fp64 scores, by ops.md's near-tie rule (gates.judge_index), and
every case shows its roofline floor (index_work; bench.py).
"""
import dataclasses

from . import data, gates, generic, model, ops
from .bench import (EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, PluginCalls, Work, ceilings_line,
                    cuda_torch, device_ceiling, floor_columns, floor_header, floor_text, median_ms,
                    ms_cell, plot_series, print_comparison)
from .dlpack import uint64_dtype
from .plugin import Plugin

DEVICE = "cuda"  # where the cases run (a test runs tiny ones elsewhere)
ROWS = 1024
SWEEP_TOKENS = tuple(1024 << i for i in range(8))  # 1K .. 128K
TABLE_TOKENS = (8192, 32768, 131072)
PREFILLS = (32768, 131072)
CHECKED_ROWS = 64
PREFILL_REPS = 3


@dataclasses.dataclass(frozen=True)
class Setting:
    """The index's sizes in this run."""

    compress_ratio: int
    page_size: int
    topk: int
    weighted: bool

    def describe(self):
        weights = "per-head weights" if self.weighted else "weight-free"
        return (f"B {self.topk}, c {self.compress_ratio}, {self.page_size}-token pages, "
                f"{weights}")


def index_work(s, heads, dim, rows, end):
    """The floor's work of one call of `rows` rows ending at position end - 1: FLOPs, every row's
    `heads` x `dim` query against each complete group it sees; bytes, q (and the weights) read,
    the context's keys read once, topk_idx and the selection written."""
    groups = sum((end - rows + 1 + i) // s.compress_ratio for i in range(rows))
    nb = generic.selection_width(s.topk, s.compress_ratio, s.page_size, end)
    q_bytes = rows * heads * (dim * 2 + (4 if s.weighted else 0))
    out_bytes = rows * ((s.topk + s.compress_ratio - 1) * 4 + nb * 12 + 4)
    return Work(flops=2.0 * groups * heads * dim,
                bytes=q_bytes + end // s.compress_ratio * dim * 2 + out_bytes)


def case_work(s, case):
    """index_work summed over the case's chunks."""
    heads, dim = case.problem.q.shape[1:]
    return sum((index_work(s, heads, dim, rows, end) for end, rows in case.chunks), Work())


def setting(opts):
    m = model.MODELS[opts.shapes]
    return Setting(opts.compress_ratio or m.compress_ratio, opts.page, m.index_topk,
                   m.index_weighted)


@dataclasses.dataclass
class Case:
    """One problem and the chunks (end position, rows) a run executes."""

    label: str
    tokens: int
    problem: data.IndexProblem
    chunks: list


def _problem(torch, s, name, tokens, rows, seed):
    return data.generate(name, torch, seq_len=tokens, rows=rows, seed=seed,
                         compress_ratio=s.compress_ratio, page_size=s.page_size, budget=s.topk,
                         weighted=s.weighted, device=DEVICE)


def single(torch, s, name, tokens, seed):
    """The last ROWS rows of a `tokens`-token prompt, one call."""
    return Case(f"{ROWS} x {tokens // 1024}K", tokens,
                _problem(torch, s, name, tokens, ROWS, seed), [(tokens, ROWS)])


def prefill(torch, s, name, tokens, seed):
    """A whole `tokens`-token prompt in chunks of the model's CHUNK_ROWS rows."""
    step = model.CHUNK_ROWS
    chunks = [(min(first + step, tokens), min(step, tokens - first))
              for first in range(0, tokens, step)]
    return Case(f"prefill {tokens // 1024}K", tokens,
                _problem(torch, s, name, tokens, tokens, seed), chunks)


@dataclasses.dataclass
class Result:
    label: str
    tokens: int
    data: str
    plugin_ms: float  # None when the plugin declined
    generic_ms: float
    triton_ms: float = None  # None when not run
    work: Work = Work()
    overlap: float = float("nan")
    differing: int = 0  # checked rows whose token sets differ
    excused: int = 0  # of those, near ties ops.md allows
    note: str = ""


class PluginRun(PluginCalls):
    """The plugin's calls over a case's chunks, outputs allocated once for the largest."""

    def __init__(self, torch, ctx, s, case):
        p, rows = case.problem, max(r for _, r in case.chunks)
        nb = generic.selection_width(s.topk, s.compress_ratio, s.page_size, p.seq_len)
        self.topk_idx = torch.empty((rows, s.topk + s.compress_ratio - 1), dtype=torch.int32,
                                    device=DEVICE)
        self.sel = (torch.empty((rows, nb), dtype=torch.int32, device=DEVICE),
                    torch.empty((rows, nb), dtype=uint64_dtype(), device=DEVICE),
                    torch.empty((rows,), dtype=torch.int32, device=DEVICE))
        super().__init__(torch, ctx, "qsa_index",
                         [self._args(s, p.chunk(end, r), end, r) for end, r in case.chunks], DEVICE)

    def _args(self, s, inputs, end, rows):
        blocks, masks, count = self.sel
        return ops.qsa_index(**inputs, topk=s.topk, compress_ratio=s.compress_ratio,
                             max_seq_len=end, max_query_len=rows, topk_idx=self.topk_idx[:rows],
                             sel_blocks=blocks[:rows], sel_mask=masks[:rows],
                             sel_count=count[:rows])


def _triton_baseline():
    """triton_index, or None (and why) where Triton is missing."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return None, "triton is not importable"
    from . import triton_index

    return triton_index, ""


def check_rows(torch, s, case, topk_idx):
    """(differing, excused) of CHECKED_ROWS rows spread over the last chunk, the plugin's token
    sets against the reference's, each row scored in fp64 as a request of its own."""
    p, (end, rows) = case.problem, case.chunks[-1]
    picks = torch.linspace(0, rows - 1, min(CHECKED_ROWS, rows), device=DEVICE).long().unique()
    lengths = end - rows + 1 + picks
    inputs = p.chunk(end, rows)
    count = picks.numel()
    one_each = dict(q=inputs["q"][picks],
                    weights=None if inputs["weights"] is None else inputs["weights"][picks],
                    k_index=p.k_index,
                    query_start_loc=torch.arange(count + 1, dtype=torch.int32, device=DEVICE),
                    seq_lens=lengths.int(),
                    block_table=inputs["block_table"].expand(count, -1))
    scores = generic.qsa_index_scores(**one_each, compress_ratio=s.compress_ratio, precise=True)
    want = generic.token_set(generic.topk_positions(scores, torch.isfinite(scores),
                                                    s.topk // s.compress_ratio),
                             lengths, s.compress_ratio)
    return gates.judge_index(topk_idx[:rows][picks], want, scores, lengths, s.compress_ratio)


def measure(torch, ctx, s, case, triton_index):
    p = case.problem
    timing = dict(warmup=1, reps=PREFILL_REPS) if len(case.chunks) > 1 else {}
    nb = generic.selection_width(s.topk, s.compress_ratio, s.page_size, p.seq_len)

    def run_generic():
        for end, rows in case.chunks:
            generic.qsa_index(**p.chunk(end, rows), topk=s.topk, nb=nb,
                              compress_ratio=s.compress_ratio)

    result = Result(case.label, case.tokens, p.name, None,
                    median_ms(torch, run_generic, **timing), work=case_work(s, case))
    if triton_index is not None:
        def run_triton():
            for end, rows in case.chunks:
                x = p.chunk(end, rows)
                triton_index.qsa_index(x["q"], x["weights"], p.k_index, p.block_table[0], end,
                                       s.topk, s.compress_ratio, nb)

        result.triton_ms = median_ms(torch, run_triton, **timing)
    plugin = PluginRun(torch, ctx, s, case)
    if plugin.note:
        result.note = plugin.note
        return result
    plugin()
    result.differing, result.excused = check_rows(torch, s, case, plugin.topk_idx)
    rows = case.chunks[-1][1]
    result.overlap = data.neighbour_overlap(plugin.sel[0][:rows], plugin.sel[2][:rows])
    result.plugin_ms = median_ms(torch, plugin, **timing)
    return result


def check_text(r):
    if r.differing == 0:
        return "same"
    failed = r.differing - r.excused
    return f"{r.excused} near-tie rows" + (f", {failed} MISMATCH" if failed else "")


def print_table(results, ceiling):
    """The data x size table; the plugin's ratio to i.i.d. data at the same size, its floor."""
    iid = {r.label: r.plugin_ms for r in results if r.data == "iid"}
    print(f"{'data':11} {'size':13} {'plugin ms':>10} {'vs iid':>7} {'generic ms':>11} "
          f"{'triton ms':>10} {'overlap':>8} {floor_header()}  check")
    for r in results:
        base = iid.get(r.label)
        ratio = f"{r.plugin_ms / base:6.2f}x" if r.plugin_ms and base else "-"
        tail = check_text(r) if r.plugin_ms is not None else f"declined: {r.note}"
        print(f"{r.data:11} {r.label:13} {ms_cell(r.plugin_ms):>10} {ratio:>7} "
              f"{ms_cell(r.generic_ms):>11} {ms_cell(r.triton_ms):>10} {r.overlap:8.2f} "
              f"{floor_text(r.work, r.plugin_ms, ceiling)}  {tail}")


def verdict(results):
    timed = [r for r in results if r.plugin_ms is not None]
    failed = sum(r.differing - r.excused for r in timed)
    excused = sum(r.excused for r in timed)
    if not timed:
        print("check: not run (the plugin declined every case)")
    elif failed:
        print(f"check: MISMATCH: {failed} checked rows differ beyond ops.md's near-tie rule")
    else:
        print(f"check: the plugin's token sets equal the fp64 reference's on {CHECKED_ROWS} rows "
              "of every case" + (f", except {excused} near-tie rows ops.md allows"
                                 if excused else ""))
    return EXIT_FAILED if failed else EXIT_OK


def run_table(torch, ctx, s, names, ceiling=None):
    triton_index, why = _triton_baseline()
    if triton_index is None:
        print(f"triton baseline: not run ({why})")
    sizes = [(single, n) for n in TABLE_TOKENS] + [(prefill, n) for n in PREFILLS]
    results = []
    for seed, name in enumerate(names):
        for make, tokens in sizes:
            results.append(measure(torch, ctx, s, make(torch, s, name, tokens, seed),
                                   triton_index))
            torch.cuda.empty_cache()
    print_table(results, ceiling)
    return verdict(results)


def run_sweep(torch, ctx, s, plot, device_name, ceiling):
    results = [measure(torch, ctx, s, single(torch, s, "iid", n, 0), None) for n in SWEEP_TOKENS]
    print_comparison({"tokens": (8, lambda r: r.tokens)},
                     {"token set check": (15, check_text), **floor_columns(ceiling)}, results)
    timed = [r for r in results if r.plugin_ms is not None]
    faster = [str(r.tokens) for r in timed if r.plugin_ms < r.generic_ms]
    if timed:
        print(f"crossover: plugin faster at {', '.join(faster)} tokens" if faster
              else "crossover: the generic path is faster at every size")
    series = {"generic (torch)": ([r.tokens for r in results], [r.generic_ms for r in results]),
              "sm70ops": ([r.tokens for r in timed], [r.plugin_ms for r in timed])}
    plot_series(plot, series, "tokens (context length)",
                f"qsa_index, {ROWS} rows x tokens, {s.describe()}, {device_name}")
    return verdict(results)


def main(opts):
    torch = cuda_torch("bench")
    if torch is None:
        return EXIT_CANNOT_RUN
    s = setting(opts)
    device = torch.cuda.current_device()
    name, ceiling = torch.cuda.get_device_name(device), device_ceiling(torch, device)
    print(f"bench qsa_index: device {device} ({name}), {s.describe()}; one request; medians of "
          f"CUDA-event timings")
    print(ceilings_line(ceiling))
    with Plugin(opts.library) as plugin, plugin.context(device) as ctx:
        if opts.data is None:
            return run_sweep(torch, ctx, s, opts.plot, name, ceiling)
        names = list(data.GENERATORS) if opts.data == "all" else [opts.data]
        if "iid" not in names:
            names.insert(0, "iid")  # every cell's ratio is to i.i.d. data at its size
        return run_table(torch, ctx, s, names, ceiling)

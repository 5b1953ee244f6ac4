"""python -m sm70ops demo: one QSA layer of Qwen3.8-Flash-Next (shared/spec/ops.md v2) over a
prompt, the plugin against the generic torch path, optionally tensor-parallel over NCCL.

What is the model's: every shape (H 2560, 24/2 heads of 256, the 4 x 128 weight-free indexer, c
4, B 2048, 512 experts top-10 of I 640, the 640-wide shared expert) and the layer's structure and
formulas, per the model's public reference code:
    h = rmsnorm(x)                                    zero-centred RMSNorms: x / rms(x) * (1 + w)
    q | gate = h Wq (per head: D query dims, D gate dims); k = h Wk; v = h Wv
    q, k = rope(rmsnorm(q)), rope(rmsnorm(k))         per head, RoPE on 64 of 256 dims
    index q | index k = h Wi (4 heads x 128, one shared key head of 128)
    index q = rope(rmsnorm(index q))                  RoPE on 64 of 128 dims
    index cache <- the host's writer: per group of 4 tokens the fp32 mean of their raw index
        keys, cast, normed, roped at the group's first token, at the KV cache's page size
    sel = qsa_index(c 4, B 2048, no weights); o = qsa_attn(gate fused: o *= sigmoid(gate))
    x1 = x + allreduce(o Wo)
    h2 = rmsnorm(x1); the top-10 experts of h2 Wr, softmax over the ten
    x2 = x1 + allreduce(nvfp4_moe(h2) + sigmoid(h2 ws) * shared(h2))   shared: fp16 SiLU MLP
What is random: every weight (fixed seeds, so every rank and every TP size builds the same layer;
the experts are random NVFP4 codes and e4m3 scales, the norms' w small random numbers), the
prompt's hidden states, and the RoPE base (indexer.ROPE_BASE, assumed; it changes no op's cost).

Per rank, TP splits the attention heads (a KV head is replicated where TP exceeds 2), every
expert's and the shared expert's intermediate size; the indexer and the router are replicated. A
prompt runs as chunks of 8192 rows (vLLM's chunked prefill), each seeing the prompt so far. Both
paths call the torch custom ops torch.ops.sm70ops.* (library.py) through torch_ops.TorchOps. The
generic path is what a host without the plugin runs (TorchOps with no context): generic.qsa_index,
generic.qsa_attn, and generic.moe_dense on an fp16 copy of the experts made at load (the fastest
fallback, when memory allows). CUDA events per op, summed over the chunks.
"""
import dataclasses
import os

from . import generic, indexer, model
from .bench import EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, EXIT_USAGE, nvfp4_experts, plot_series
from .torch_ops import TorchOps

SEED = 2026
DEVICE = "cuda"  # where the layer runs (a test may run a tiny one elsewhere)
CHUNK = model.CHUNK_ROWS
FULL = model.shape(tp=1)
PHASES = ("qsa_index", "qsa_attn", "nvfp4_moe", "allreduce", "dense")
ATTN_GATE, MOE_GATE = 2e-3, 5e-3  # ops.md, ops 2 and 3: the TP run against the TP=1 run
# Past B + c - 1 tokens the plugin and generic.qsa_index select differently where scores nearly
# tie (the generic path rounds them to fp16), so their layers differ by more than the gates.
UNGATED = ("informational, not gated (the two paths select different tokens where scores "
           "nearly tie)")


def tp_sizes_ok(tp):
    """Why `tp` cannot split the model, or None."""
    m = FULL
    if m.q_heads % tp or m.expert_inter % tp or m.shared_inter % tp:
        return (f"TP {tp} must divide the {m.q_heads} query heads, I = {m.expert_inter} and the "
                f"shared expert's {m.shared_inter}")
    if m.kv_heads % tp and tp % m.kv_heads:
        return f"TP {tp} and the {m.kv_heads} KV heads must divide one another"
    return None


@dataclasses.dataclass
class Shard:
    """One rank's slice: query heads [q0, q0 + hq), KV heads [kv0, kv0 + hkv), inter slice i."""

    tp: int
    rank: int

    @property
    def hq(self):
        return FULL.q_heads // self.tp

    @property
    def q0(self):
        return self.rank * self.hq

    @property
    def hkv(self):
        return max(1, FULL.kv_heads // self.tp)

    @property
    def kv0(self):
        return self.q0 // (FULL.q_heads // FULL.kv_heads)

    @property
    def inter(self):
        return FULL.expert_inter // self.tp

    @property
    def shared_inter(self):
        return FULL.shared_inter // self.tp


def _randn(torch, shape, seed, scale):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(shape, generator=g, device=DEVICE) * scale).half()


def random_experts(torch, shard):
    """This rank's NVFP4 experts, sliced from the TP=1 checkpoint (regenerated from its seed)."""
    m = FULL
    full = nvfp4_experts(torch, m.experts, m.hidden, m.expert_inter, SEED + 100, DEVICE)
    i, lo, n = m.expert_inter, shard.rank * shard.inter, shard.inter
    halves = lambda t: torch.cat([t[:, lo:lo + n], t[:, i + lo:i + lo + n]], dim=1)  # noqa: E731
    return dict(w13=halves(full["w13"]), w13_scale=halves(full["w13_scale"]),
                w13_scale_2=full["w13_scale_2"],
                w2=full["w2"][:, :, lo // 2:(lo + n) // 2].contiguous(),
                w2_scale=full["w2_scale"][:, :, lo // 16:(lo + n) // 16].contiguous(),
                w2_scale_2=full["w2_scale_2"])


def _norm_weight(torch, size, seed):
    """A zero-centred norm's w: small, so that 1 + w stays near 1."""
    return _randn(torch, (size,), seed, 0.1)


def build_layer(torch, shard):
    """This rank's weights: dense fp16 projections, norms, NVFP4 experts, the shared expert."""
    m, d = FULL, FULL.head_dim
    # q_proj's columns hold, per head, its D query dims then its D gate dims.
    wq = _randn(torch, (m.hidden, m.q_heads * 2 * d), SEED + 1, m.hidden ** -0.5)
    wk = _randn(torch, (m.hidden, m.kv_heads * d), SEED + 2, m.hidden ** -0.5)
    wv = _randn(torch, (m.hidden, m.kv_heads * d), SEED + 3, m.hidden ** -0.5)
    wo = _randn(torch, (m.q_heads * d, m.hidden), SEED + 4, (m.q_heads * d) ** -0.5)
    shared_up = _randn(torch, (m.hidden, 2 * m.shared_inter), SEED + 10, m.hidden ** -0.5)
    shared_down = _randn(torch, (m.shared_inter, m.hidden), SEED + 11, m.shared_inter ** -0.5)
    qs = slice(shard.q0 * 2 * d, (shard.q0 + shard.hq) * 2 * d)
    kvs = slice(shard.kv0 * d, (shard.kv0 + shard.hkv) * d)
    lo, n = shard.rank * shard.shared_inter, shard.shared_inter
    return dict(
        wq=wq[:, qs].contiguous(), wk=wk[:, kvs].contiguous(), wv=wv[:, kvs].contiguous(),
        wo=wo[shard.q0 * d:(shard.q0 + shard.hq) * d].contiguous(),
        wi=_randn(torch, (m.hidden, (m.index_heads + 1) * m.index_dim), SEED + 5,
                  m.hidden ** -0.5),
        router=_randn(torch, (m.hidden, m.experts), SEED + 8, m.hidden ** -0.5),
        shared_gate_up=torch.cat([shared_up[:, lo:lo + n],
                                  shared_up[:, m.shared_inter + lo:m.shared_inter + lo + n]],
                                 dim=1).contiguous(),
        shared_down=shared_down[lo:lo + n].contiguous(),
        shared_gate=_randn(torch, (m.hidden, 1), SEED + 12, m.hidden ** -0.5),
        norms={name: _norm_weight(torch, size, SEED + 20 + i) for i, (name, size) in enumerate(
            (("input", m.hidden), ("post_attention", m.hidden), ("q", d), ("k", d),
             ("index_q", m.index_dim), ("index_k", m.index_dim)))},
        experts=random_experts(torch, shard))


class Phases:
    """CUDA-event time per phase, summed over a prompt's chunks."""

    def __init__(self, torch):
        self.torch = torch
        self.marks = []

    def timed(self, phase, fn, *args, **kwargs):
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        result = fn(*args, **kwargs)
        end.record()
        self.marks.append((phase, start, end))
        return result

    def totals_ms(self):
        self.torch.cuda.synchronize()
        out = dict.fromkeys(PHASES, 0.0)
        for phase, start, end in self.marks:
            out[phase] += start.elapsed_time(end)
        return out


class Layer:
    """One rank's layer and its caches for one prompt; `ops` picks plugin or generic paths."""

    def __init__(self, torch, shard, weights, ops, prompt, page_size, group=None):
        self.torch, self.shard, self.w, self.ops, self.group = torch, shard, weights, ops, group
        m = FULL
        self.page = page_size
        pages = -(-prompt // page_size)
        g = torch.Generator(device=DEVICE).manual_seed(SEED + 9)
        self.block_table = torch.randperm(pages, generator=g, device=DEVICE).int().view(1, -1)
        cache = (pages, page_size, shard.hkv, m.head_dim)
        self.k_cache = torch.empty(cache, dtype=torch.float16, device=DEVICE)
        self.v_cache = torch.empty(cache, dtype=torch.float16, device=DEVICE)
        self.k_index = torch.empty((pages, page_size // m.compress_ratio, m.index_dim),
                                   dtype=torch.float16, device=DEVICE)
        self.index_keys = None  # the prompt's compressed-key writer, new at each prefill
        self.prepared = ops.prepare(weights["experts"])
        self.dense_experts = None
        if ops.ctx is None:  # the host's fallback keeps an fp16 copy of its experts
            self.dense_experts = generic.dequantize_experts(**weights["experts"])

    def _allreduce(self, t):
        if self.group is not None:
            self.torch.distributed.all_reduce(t, group=self.group)
        return t

    def _store(self, positions, k, v):
        """Writes the rows' keys and values into the paged KV cache."""
        page = self.page
        slot = self.block_table[0, positions // page].long() * page + positions % page
        self.k_cache.view(-1, *self.k_cache.shape[2:])[slot] = k
        self.v_cache.view(-1, *self.v_cache.shape[2:])[slot] = v

    def _project(self, h, positions):
        """(q, gate, index q) of the chunk, its K/V and index keys written to the caches."""
        m, w, s, norms = FULL, self.w, self.shard, self.w["norms"]
        rows, d = h.shape[0], m.head_dim
        qg = (h @ w["wq"]).view(rows, s.hq, 2 * d)
        q = indexer.rope(indexer.rms_norm(qg[..., :d], norms["q"]), positions)
        k = indexer.rope(indexer.rms_norm((h @ w["wk"]).view(rows, s.hkv, d), norms["k"]),
                         positions)
        self._store(positions, k, (h @ w["wv"]).view(rows, s.hkv, d))
        index = (h @ w["wi"]).view(rows, m.index_heads + 1, m.index_dim)
        self.index_keys.append(index[:, -1])
        iq = indexer.index_query(index[:, :-1], positions, norms["index_q"])
        return q, qg[..., d:], iq

    def _attention(self, phases, x, first):
        """x + allreduce(o Wo) for rows at positions first.. (the chunk)."""
        torch, m, w = self.torch, FULL, self.w
        rows, end = x.shape[0], first + x.shape[0]
        positions = first + torch.arange(rows, device=DEVICE)
        h = phases.timed("dense", indexer.rms_norm, x, w["norms"]["input"])
        q, gate, iq = phases.timed("dense", self._project, h, positions)
        meta = dict(query_start_loc=torch.tensor([0, rows], dtype=torch.int32, device=DEVICE),
                    seq_lens=torch.tensor([end], dtype=torch.int32, device=DEVICE),
                    block_table=self.block_table)
        bounds = dict(max_seq_len=end, max_query_len=rows)
        sel = phases.timed("qsa_index", self.ops.qsa_index, iq, None, self.k_index, **meta,
                           topk=m.index_topk, compress_ratio=m.compress_ratio, **bounds)
        o = phases.timed("qsa_attn", self.ops.qsa_attn, q, self.k_cache, self.v_cache, **meta,
                         sel=sel, sm_scale=m.head_dim ** -0.5, gate=gate, **bounds)
        attn = phases.timed("dense", lambda: o.view(rows, -1) @ w["wo"])
        attn = phases.timed("allreduce", self._allreduce, attn)
        return x + attn, attn

    def _shared_expert(self, h):
        """sigmoid(h ws) * silu(h W_gate) * (h W_up) W_down: this rank's slice of the sum."""
        torch, w = self.torch, self.w
        gate_up = h @ w["shared_gate_up"]
        inter = gate_up.shape[1] // 2
        y = (torch.nn.functional.silu(gate_up[:, :inter]) * gate_up[:, inter:]) @ w["shared_down"]
        return y * torch.sigmoid(h @ w["shared_gate"])

    def _moe(self, phases, x):
        torch, w = self.torch, self.w
        h = phases.timed("dense", indexer.rms_norm, x, w["norms"]["post_attention"])

        def route():
            logits = h.float() @ w["router"].float()  # fp32, as engines route
            top, ids = logits.topk(FULL.expert_topk, dim=-1)
            return ids.int(), torch.softmax(top, dim=-1)

        ids, weights = phases.timed("dense", route)
        y = phases.timed("nvfp4_moe", self.ops.nvfp4_moe, h, ids, weights, self.w["experts"],
                         self.prepared, self.dense_experts)
        y = phases.timed("dense", lambda: y + self._shared_expert(h))
        y = phases.timed("allreduce", self._allreduce, y)
        return x + y, y, ids

    def prefill(self, x):
        """Runs the prompt x [P, H] chunk by chunk: (out, attention part, MoE part, expert ids,
        phase times in ms)."""
        phases, outs = Phases(self.torch), []
        self.index_keys = indexer.CompressedKeyWriter(self.k_index, self.block_table[0],
                                                      FULL.compress_ratio,
                                                      self.w["norms"]["index_k"])
        for first in range(0, x.shape[0], CHUNK):
            x1, attn = self._attention(phases, x[first:first + CHUNK], first)
            x2, moe, ids = self._moe(phases, x1)
            outs.append((x2, attn, moe, ids))
        cat = [self.torch.cat(parts) for parts in zip(*outs)]
        return (*cat, phases.totals_ms())


def prompt_states(torch, prompt):
    """The layer's input hidden states [prompt, H] fp16, the same on every rank."""
    return _randn(torch, (prompt, FULL.hidden), SEED, 1.0)


def rel_l2(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@dataclasses.dataclass
class Run:
    path: str  # "plugin" or "generic"
    tp: int
    prompt: int
    ms: dict  # per phase, the median run's
    total_ms: float
    paths: dict = dataclasses.field(default_factory=dict)  # op -> what ran

    @property
    def tokens_per_s(self):
        return self.prompt / (self.total_ms / 1e3)


def run_rank(torch, shard, ctx, prompt, page_size, reps, group=None):
    """(Run, out, attn, moe, ids) of this rank's layer over the prompt; the median of `reps`
    timed runs after one untimed run."""
    ops = TorchOps(ctx)
    layer = Layer(torch, shard, build_layer(torch, shard), ops, prompt, page_size, group)
    x = prompt_states(torch, prompt)
    layer.prefill(x)  # warm-up: cuBLAS handles, NCCL communicators, allocator
    runs = []
    for _ in range(reps):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        result = layer.prefill(x)
        end.record()
        torch.cuda.synchronize()
        runs.append((start.elapsed_time(end), result))
    runs.sort(key=lambda r: r[0])
    total, (out, attn, moe, ids, ms) = runs[len(runs) // 2]
    taken = {}
    for op, why in ops.paths:
        taken[op] = "; ".join(filter(None, (taken.get(op), why)))
    return Run("plugin" if ctx is not None else "generic", shard.tp, prompt, ms, total,
               taken), out, attn, moe, ids


def format_runs(runs):
    lines = [f"{'path':8} {'TP':>3} {'prompt':>7} {'layer ms':>9} {'tokens/s':>10}  "
             + "  ".join(f"{p:>9}" for p in PHASES) + "  (share of the layer)"]
    for r in runs:
        shares = "  ".join(f"{100 * r.ms[p] / r.total_ms:8.1f}%" for p in PHASES)
        lines.append(f"{r.path:8} {r.tp:>3} {r.prompt:>7} {r.total_ms:9.1f} "
                     f"{r.tokens_per_s:10.0f}  {shares}")
    return "\n".join(lines)


def compare(name, got, want, ids_got, ids_want, gated=True):
    """(within the gates, one line): rel-L2 of the attention and MoE parts against a reference
    run. A token routed to other experts (rounding can flip a near tie of the router) is left
    out of the MoE comparison and counted; more than 1% of them fails. gated False: the line
    reports the numbers only, and ok is True."""
    same = (ids_got.sort(dim=-1).values == ids_want.sort(dim=-1).values).all(dim=-1)
    rerouted = int((~same).sum())
    attn, moe = rel_l2(got[0], want[0]), rel_l2(got[1][same], want[1][same])
    ok = attn <= ATTN_GATE and moe <= MOE_GATE and rerouted <= 0.01 * same.numel()
    gate = (lambda limit: f" (gate {limit:g})") if gated else (lambda limit: "")
    verdict = ("match" if ok else "MISMATCH") if gated else UNGATED
    return ok or not gated, (
        f"{name}: attention rel-L2 {attn:.2e}{gate(ATTN_GATE)}, MoE rel-L2 {moe:.2e}"
        f"{gate(MOE_GATE)} over the {int(same.sum())} tokens routed alike, {rerouted} routed "
        f"differently: {verdict}")


def _tp_worker(rank, tp, prompts, page_size, reps, library, port, result_dir):
    """One process per GPU: the plugin path at TP `tp`; rank 0 saves its results."""
    import torch
    import torch.distributed as dist

    from .plugin import Plugin

    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=tp, device_id=torch.device("cuda", rank))
    shard = Shard(tp, rank)
    with Plugin(library) as plugin, plugin.context(rank) as ctx:
        for prompt in prompts:
            run, out, attn, moe, ids = run_rank(torch, shard, ctx, prompt, page_size, reps,
                                                dist.group.WORLD)
            if rank == 0:
                torch.save(dict(run=dataclasses.asdict(run), attn=attn.cpu(), moe=moe.cpu(),
                                ids=ids.cpu()), os.path.join(result_dir, f"tp{tp}-{prompt}.pt"))
    dist.destroy_process_group()


def run_tp(torch, tp, prompts, page_size, reps, library):
    """The plugin path at TP `tp`, one process per GPU: {prompt: (Run, attn, moe, ids)}."""
    import socket
    import tempfile

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as result_dir:
        mp.spawn(_tp_worker, args=(tp, prompts, page_size, reps, library, port, result_dir),
                 nprocs=tp)
        out = {}
        for prompt in prompts:
            saved = torch.load(os.path.join(result_dir, f"tp{tp}-{prompt}.pt"))
            out[prompt] = (Run(**saved["run"]), saved["attn"], saved["moe"], saved["ids"])
    return out


def _report_paths(runs):
    seen = {}
    for r in runs:
        for op, why in r.paths.items():
            seen.setdefault((r.path, r.tp, op), why)
    for (path, tp, op), why in sorted(seen.items()):
        print(f"  {path} run, TP {tp}, {op}: {why}")


def main(opts):
    from .bench import cuda_torch
    from .plugin import Plugin

    bad = tp_sizes_ok(opts.tp)
    if bad:
        print(f"demo: {bad}")
        return EXIT_USAGE
    torch = cuda_torch("demo")
    if torch is None:
        return EXIT_CANNOT_RUN
    if opts.tp > torch.cuda.device_count():
        print(f"demo: TP {opts.tp} needs {opts.tp} GPUs, this machine has "
              f"{torch.cuda.device_count()}")
        return EXIT_CANNOT_RUN
    m = FULL
    print(f"demo: one QSA layer of {m.name} (H {m.hidden}, {m.q_heads}/{m.kv_heads} gated heads "
          f"of {m.head_dim}, index {m.index_heads} x {m.index_dim} with c {m.compress_ratio} and "
          f"B {m.index_topk}, {m.experts} NVFP4 experts top-{m.expert_topk} of I "
          f"{m.expert_inter}, shared expert {m.shared_inter}; random weights) on "
          f"{torch.cuda.get_device_name(0)}; {opts.page}-token pages; chunks of {CHUNK} rows; "
          f"median of {opts.reps} runs")
    runs, failed, one = [], 0, Shard(1, 0)
    with Plugin(opts.library) as plugin, plugin.context(0) as ctx:
        library = plugin.path
        reference = {}
        for prompt in opts.prompts:
            plug, _, attn, moe, ids = run_rank(torch, one, ctx, prompt, opts.page, opts.reps)
            gen, _, g_attn, g_moe, g_ids = run_rank(torch, one, None, prompt, opts.page,
                                                    opts.reps)
            runs += [plug, gen]
            reference[prompt] = (attn.cpu(), moe.cpu(), ids.cpu())
            selects_all = prompt <= m.index_topk + m.compress_ratio - 1
            ok, line = compare(f"{prompt} tokens, plugin vs generic", (attn, moe),
                               (g_attn, g_moe), ids, g_ids, gated=selects_all)
            failed += not ok
            print(line)
            torch.cuda.empty_cache()
    if opts.tp > 1:
        for prompt, (run, attn, moe, ids) in run_tp(torch, opts.tp, opts.prompts, opts.page,
                                                    opts.reps, library).items():
            runs.append(run)
            want = reference[prompt]
            ok, line = compare(f"{prompt} tokens, TP {opts.tp} vs TP 1 (plugin)", (attn, moe),
                               want[:2], ids, want[2])
            failed += not ok
            print(line)
    print("\nwhat ran:")
    _report_paths(runs)
    print()
    print(format_runs(runs))
    _plot(opts.plot, runs, torch.cuda.get_device_name(0))
    return EXIT_FAILED if failed else EXIT_OK


def _plot(path, runs, device):
    series = {}
    for r in runs:
        xs, ys = series.setdefault(f"{r.path}, TP {r.tp}", ([], []))
        xs.append(r.prompt)
        ys.append(r.total_ms)
    plot_series(path, series, "prompt tokens", f"one QSA layer of {FULL.name}, prefill, {device}")

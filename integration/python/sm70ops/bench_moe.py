"""python -m sm70ops bench nvfp4_moe: the plugin against the generic torch path and cuBLAS in one
run, with the roofline floor.

The model's routed experts (E 512, top-10, H 2560) at the TP4 (I 160) and TP1 (I 640) ranks, or
with --shapes v1 contract version 1's (H 2048, I 128 and 512); T tokens with random routing. The
plugin runs on prepared weights (op 4 is timed once per rank, on its second call, as a host runs it
at load: check, allocation, repack), and on the checkpoint layout for comparison, its args, check,
workspace and output made once per case so that the timing covers ctx.execute alone (as
bench_index's and bench_attn's); the generic path is generic.moe_dense on the fp16 copy of the
experts a host without the plugin makes at load (3.6x the NVFP4 bytes). Both are compared with
generic.nvfp4_moe (fp32 on the dequantized weights); the plugin's error is held to ops.md's gate.

cuBLAS: both fp16 GEMMs of every expert with rows on that fp16 copy, one torch.mm (cuBLAS) per
expert and GEMM (cuBLAS has no grouped GEMM of unequal sizes), the rows already gathered (no
gather, SiLU, router weight or combine), the loop replayed as one CUDA graph to take the launch
overhead out: a lower bound of a cuBLAS MoE.

Floor (moe_work): the FLOPs of both GEMMs; the bytes an ideal fused op moves: the routed experts'
NVFP4 weights once, x, out, ids and router weights (workspace round trips are the
implementation's, not the floor's).
"""
import dataclasses

from . import generic, model, ops
from .bench import (EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_OK, PluginCalls, Work, ceilings_line,
                    cuda_torch, device_ceiling, floor_columns, median_ms, ms_cell, nvfp4_experts,
                    print_comparison)
from .plugin import Plugin
from .torch_ops import TorchOps

TOKENS = (512, 2048, 8192, 32768)
TP_SIZES = (4, 1)
GATE = 5e-3  # ops.md, op 3
SEED = 2026


@dataclasses.dataclass
class Row:
    inter: int
    tokens: int
    plugin_ms: float  # None when the plugin declined
    generic_ms: float
    plugin_rel_l2: float
    generic_rel_l2: float
    work: Work = Work()  # the floor's
    checkpoint_ms: float = None  # the plugin on the checkpoint layout; None: not on the plugin
    cublas_ms: float = None
    note: str = ""


def nvfp4_bytes(m):
    """The NVFP4 checkpoint bytes of every expert of a rank: W13 [2I, H] and W2 [H, I] as 4-bit
    codes and an e4m3 scale per 16 weights."""
    return m.experts * 3 * m.expert_inter * m.hidden * 9 // 16


def moe_work(m, tokens, experts_used):
    """The floor's work of `tokens` tokens routed to `experts_used` distinct experts."""
    pairs = tokens * m.expert_topk
    return Work(flops=6.0 * pairs * m.hidden * m.expert_inter,
                bytes=nvfp4_bytes(m) * experts_used / m.experts + tokens * m.hidden * 4 + pairs * 8)


def _routing(torch, m, tokens, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((tokens, m.hidden), generator=g, device="cuda").half()
    logits = torch.randn((tokens, m.experts), generator=g, device="cuda")
    top, ids = logits.topk(m.expert_topk, dim=-1)
    return x, ids.int(), torch.softmax(top, dim=-1)


def _graph_ms(torch, fn):
    """Median ms of fn's kernels replayed as one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # cuBLAS picks its kernels outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):  # where the warm-up made cuBLAS's workspace
        fn()
    return median_ms(torch, graph.replay, warmup=2, reps=9)


def grouped_gemms(torch, dense, counts):
    """(fn, y): fn() runs both fp16 GEMMs of every expert e on its counts[e] rows of x (ones),
    gate/up = x W13_e^T, then y = gate/up[:, :I] W2_e^T (the down GEMM's input is read in place,
    as an engine's fused SiLU-and-mul would leave it)."""
    w13, w2 = dense  # [E, 2I, H], [E, H, I]
    inter = w2.shape[2]
    x = torch.ones((sum(counts), w13.shape[2]), dtype=w13.dtype, device=w13.device)
    gate_up, y = x.new_empty((x.shape[0], 2 * inter)), torch.empty_like(x)

    def gemms():
        first = 0
        for e, n in enumerate(counts):
            rows = slice(first, first + n)
            torch.mm(x[rows], w13[e].t(), out=gate_up[rows])
            torch.mm(gate_up[rows, :inter], w2[e].t(), out=y[rows])
            first += n

    return gemms, y


def cublas_ms(torch, dense, ids):
    """The cuBLAS baseline (module docstring) of routing `ids` on the fp16 copy `dense`; None if
    the capture or replay failed (it says why)."""
    counts = torch.bincount(ids.flatten().long(), minlength=dense[0].shape[0]).tolist()
    gemms, _ = grouped_gemms(torch, dense, counts)
    try:
        return _graph_ms(torch, gemms)
    except RuntimeError as e:
        print(f"  cuBLAS: capture or replay failed ({e})")
        return None


def _prepare(torch, ctx, experts):
    """Op 4's bytes (None when declined), after printing how long it took. Timed on the second
    call: a process's first call of a torch custom op imports torch's dispatch machinery
    (dynamo, sympy: seconds on a fresh machine), whatever the op. The second call's output
    reuses the first's freed block (torch's caching allocator), so no cudaMalloc is timed."""
    host, held = TorchOps(ctx), []

    def prepare():  # the previous call's bytes are freed first: one prepared copy at a time
        held.clear()
        held.append(host.prepare(experts))

    ms = median_ms(torch, prepare, warmup=1, reps=1)
    if held[0] is None:
        why = [w for (op, w) in host.paths if op == "nvfp4_moe_prepare"]
        print(f"  prepare: {'; '.join(why)}: op 3 reads the checkpoint layout")
    else:
        print(f"  prepare (one-time, with its check and allocation): {ms:.3f} ms, "
              f"{held[0].numel() / 1e6:.1f} MB")
    return held[0]


class PluginMoe(PluginCalls):
    """Op 3 on the plugin for one routing, its output allocated once. prepared None: the
    checkpoint layout."""

    def __init__(self, torch, ctx, x, ids, weights, experts, prepared=None):
        self.out = torch.empty_like(x)  # [T, H] fp16
        super().__init__(torch, ctx, "nvfp4_moe",
                         [ops.nvfp4_moe(x, ids, weights, experts, self.out, prepared)], x.device)

    def __call__(self):
        super().__call__()
        return self.out


def _measure(torch, ctx, m, experts, dense, prepared, tokens):
    x, ids, weights = _routing(torch, m, tokens, tokens)
    want = generic.nvfp4_moe(x, ids, weights, **experts).float()
    rel_l2 = lambda out: float((out.float() - want).norm() / want.norm())  # noqa: E731
    generic_run = lambda: generic.moe_dense(x, ids, weights, *dense)  # noqa: E731
    row = Row(m.expert_inter, tokens, None, median_ms(torch, generic_run, 1, 3), float("nan"),
              rel_l2(generic_run()), moe_work(m, tokens, int(ids.unique().numel())),
              cublas_ms=cublas_ms(torch, dense, ids))
    plugin = PluginMoe(torch, ctx, x, ids, weights, experts, prepared)
    if plugin.note:
        row.note = plugin.note
        return row
    row.plugin_rel_l2 = rel_l2(plugin())
    row.plugin_ms = median_ms(torch, plugin)
    checkpoint = PluginMoe(torch, ctx, x, ids, weights, experts)
    row.checkpoint_ms = None if checkpoint.note else median_ms(torch, checkpoint)
    return row


def _measure_rank(torch, ctx, m):
    """Every T of TOKENS at one rank's shapes `m`."""
    print(f"TP{m.tp}: I {m.expert_inter}")
    experts = nvfp4_experts(torch, m.experts, m.hidden, m.expert_inter,
                            SEED + m.expert_inter, "cuda")
    dense = generic.dequantize_experts(**experts)
    prepared = _prepare(torch, ctx, experts)
    rows = [_measure(torch, ctx, m, experts, dense, prepared, t) for t in TOKENS]
    del experts, dense, prepared
    torch.cuda.empty_cache()
    return rows


def main(opts):
    torch = cuda_torch("bench")
    if torch is None:
        return EXIT_CANNOT_RUN
    device = torch.cuda.current_device()
    whole, ceiling = model.MODELS[opts.shapes], device_ceiling(torch, device)
    print(f"bench nvfp4_moe: device {device} ({torch.cuda.get_device_name(device)}), {whole.name}: "
          f"E {whole.experts}, top-{whole.expert_topk}, H {whole.hidden}, I "
          f"{', '.join(str(whole.expert_inter // tp) for tp in TP_SIZES)} (TP "
          f"{', '.join(map(str, TP_SIZES))}); plugin on prepared NVFP4 weights vs generic fp16 "
          f"copy (per-expert GEMMs); rel-L2 against fp32 on the dequantized weights")
    rows = []
    with Plugin(opts.library) as plugin, plugin.context(device) as ctx:
        for tp in TP_SIZES:
            rows += _measure_rank(torch, ctx, model.shape(tp=tp, model=whole))
    failed = print_comparison(
        {"I": (4, lambda r: r.inter), "tokens": (7, lambda r: r.tokens)},
        {"plugin rel-L2": (14, lambda r: r.plugin_rel_l2),
         "generic rel-L2": (15, lambda r: r.generic_rel_l2),
         "checkpoint ms": (14, lambda r: ms_cell(r.checkpoint_ms)),
         "cuBLAS ms": (10, lambda r: ms_cell(r.cublas_ms)), **floor_columns(ceiling)}, rows, GATE)
    print(ceilings_line(ceiling))
    print("check: " + (f"MISMATCH: {failed} cases beyond rel-L2 {GATE}" if failed
                       else f"plugin output within rel-L2 {GATE} of fp32 in every case run"))
    return EXIT_FAILED if failed else EXIT_OK

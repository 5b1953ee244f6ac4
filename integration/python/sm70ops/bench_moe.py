"""python -m sm70ops bench nvfp4_moe: the plugin against the generic torch path in one run.

ops.md's experts (E 512, top-10, H 2048) at the TP4 (I 128) and TP1 (I 512) shards, T tokens
with random routing. The plugin runs on prepared weights; the generic path is generic.moe_dense
on the fp16 copy of the experts a host without the plugin makes at load (3.6x the NVFP4 bytes).
Both are compared with generic.nvfp4_moe (fp32 on the dequantized weights); the plugin's error is
held to ops.md's gate.
"""
import dataclasses

from . import demo, generic
from .bench import EXIT_CANNOT_RUN, EXIT_MISMATCH, EXIT_OK, cuda_torch, median_ms, print_comparison
from .plugin import Plugin
from .torch_ops import TorchOps

TOKENS = (512, 2048, 8192)
TP_SIZES = (4, 1)
GATE = 5e-3  # ops.md, op 3


@dataclasses.dataclass
class Row:
    tp: int
    tokens: int
    plugin_ms: float  # None when the plugin declined
    generic_ms: float
    plugin_rel_l2: float
    generic_rel_l2: float
    note: str = ""


def _routing(torch, tokens, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((tokens, demo.FULL.hidden), generator=g, device="cuda").half()
    logits = torch.randn((tokens, demo.FULL.experts), generator=g, device="cuda")
    top, ids = logits.topk(demo.FULL.expert_topk, dim=-1)
    return x, ids.int(), torch.softmax(top, dim=-1)


def _measure(torch, ctx, tp, experts, dense, tokens):
    x, ids, weights = _routing(torch, tokens, tokens)
    want = generic.nvfp4_moe(x, ids, weights, **experts).float()
    generic_ms = median_ms(torch, lambda: generic.moe_dense(x, ids, weights, *dense), 1, 3)
    generic_err = float((generic.moe_dense(x, ids, weights, *dense).float() - want).norm()
                        / want.norm())
    ops = TorchOps(ctx)
    prepared = ops.prepare(experts)
    out = ops.nvfp4_moe(x, ids, weights, experts, prepared)
    why = [w.removeprefix("generic: ") for (op, w) in ops.paths if op == "nvfp4_moe"
           and w != "plugin"]
    if why:
        return Row(tp, tokens, None, generic_ms, float("nan"), generic_err, "; ".join(why))
    plugin_err = float((out.float() - want).norm() / want.norm())
    plugin_ms = median_ms(torch, lambda: ops.nvfp4_moe(x, ids, weights, experts, prepared))
    return Row(tp, tokens, plugin_ms, generic_ms, plugin_err, generic_err)


def main(opts):
    torch = cuda_torch("bench")
    if torch is None:
        return EXIT_CANNOT_RUN
    device = torch.cuda.current_device()
    m = demo.FULL
    print(f"bench nvfp4_moe: device {device} ({torch.cuda.get_device_name(device)}), E "
          f"{m.experts}, top-{m.expert_topk}, H {m.hidden}; plugin on prepared NVFP4 weights vs "
          f"generic fp16 copy (per-expert GEMMs); rel-L2 against fp32 on the dequantized weights")
    rows = []
    with Plugin(opts.library) as plugin, plugin.context(device) as ctx:
        for tp in TP_SIZES:
            experts = demo.random_experts(torch, demo.Shard(tp, 0))
            dense = generic.dequantize_experts(**experts)
            rows += [_measure(torch, ctx, tp, experts, dense, t) for t in TOKENS]
            del experts, dense
            torch.cuda.empty_cache()
    failed = print_comparison(
        {"I": (4, lambda r: m.expert_inter // r.tp), "tokens": (7, lambda r: r.tokens)},
        {"plugin rel-L2": (14, lambda r: r.plugin_rel_l2),
         "generic rel-L2": (15, lambda r: r.generic_rel_l2)}, rows, GATE)
    print("check: " + (f"MISMATCH: {failed} cases beyond rel-L2 {GATE}" if failed
                       else f"plugin output within rel-L2 {GATE} of fp32 in every case run"))
    return EXIT_MISMATCH if failed else EXIT_OK

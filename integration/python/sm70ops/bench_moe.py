"""python -m sm70ops bench nvfp4_moe: the plugin against the generic torch path in one run.

The model's routed experts (E 512, top-10, H 2560) at the TP4 (I 160) and TP1 (I 640) ranks, or
with --shapes v1 contract version 1's (H 2048, I 128 and 512); T tokens with random routing. The
plugin runs on prepared weights; the generic path is generic.moe_dense on the fp16 copy of the
experts a host without the plugin makes at load (3.6x the NVFP4 bytes). Both are compared with
generic.nvfp4_moe (fp32 on the dequantized weights); the plugin's error is held to ops.md's gate.
"""
import dataclasses

from . import generic, model
from .bench import EXIT_CANNOT_RUN, EXIT_MISMATCH, EXIT_OK, cuda_torch, median_ms, print_comparison
from .plugin import Plugin
from .torch_ops import TorchOps

TOKENS = (512, 2048, 8192)
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
    note: str = ""


def _experts(torch, m):
    """Random NVFP4 experts of one rank (`m` = model.shape(...)): uniform codes, e4m3 scales
    0.25 .. 3.75 (exponent field 5..8, any mantissa), and scale_2 that brings the weights to about
    1/sqrt(fan-in) (a code times these scales has rms ~3)."""
    g = torch.Generator(device="cuda").manual_seed(SEED + m.expert_inter)
    e, h, i = m.experts, m.hidden, m.expert_inter

    def codes(*shape):
        return torch.randint(0, 256, shape, generator=g, device="cuda", dtype=torch.uint8)

    def scales(*shape):
        exponent = torch.randint(5, 9, shape, generator=g, device="cuda", dtype=torch.uint8)
        mantissa = torch.randint(0, 8, shape, generator=g, device="cuda", dtype=torch.uint8)
        return exponent * 8 + mantissa

    def scale_2(*shape, fan_in):
        return (torch.rand(shape, generator=g, device="cuda") + 0.5) / (3 * fan_in ** 0.5)

    return dict(w13=codes(e, 2 * i, h // 2), w13_scale=scales(e, 2 * i, h // 16),
                w13_scale_2=scale_2(e, 2, fan_in=h), w2=codes(e, h, i // 2),
                w2_scale=scales(e, h, i // 16), w2_scale_2=scale_2(e, fan_in=i))


def _routing(torch, m, tokens, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((tokens, m.hidden), generator=g, device="cuda").half()
    logits = torch.randn((tokens, m.experts), generator=g, device="cuda")
    top, ids = logits.topk(m.expert_topk, dim=-1)
    return x, ids.int(), torch.softmax(top, dim=-1)


def _measure(torch, ctx, m, experts, dense, tokens):
    x, ids, weights = _routing(torch, m, tokens, tokens)
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
        return Row(m.expert_inter, tokens, None, generic_ms, float("nan"), generic_err,
                   "; ".join(why))
    plugin_err = float((out.float() - want).norm() / want.norm())
    plugin_ms = median_ms(torch, lambda: ops.nvfp4_moe(x, ids, weights, experts, prepared))
    return Row(m.expert_inter, tokens, plugin_ms, generic_ms, plugin_err, generic_err)


def main(opts):
    torch = cuda_torch("bench")
    if torch is None:
        return EXIT_CANNOT_RUN
    device = torch.cuda.current_device()
    whole = model.MODELS[opts.shapes]
    print(f"bench nvfp4_moe: device {device} ({torch.cuda.get_device_name(device)}), {whole.name}: "
          f"E {whole.experts}, top-{whole.expert_topk}, H {whole.hidden}, I "
          f"{', '.join(str(whole.expert_inter // tp) for tp in TP_SIZES)} (TP "
          f"{', '.join(map(str, TP_SIZES))}); plugin on prepared NVFP4 weights vs generic fp16 "
          f"copy (per-expert GEMMs); rel-L2 against fp32 on the dequantized weights")
    rows = []
    with Plugin(opts.library) as plugin, plugin.context(device) as ctx:
        for tp in TP_SIZES:
            m = model.shape(tp=tp, model=whole)
            experts = _experts(torch, m)
            dense = generic.dequantize_experts(**experts)
            rows += [_measure(torch, ctx, m, experts, dense, t) for t in TOKENS]
            del experts, dense
            torch.cuda.empty_cache()
    failed = print_comparison(
        {"I": (4, lambda r: r.inter), "tokens": (7, lambda r: r.tokens)},
        {"plugin rel-L2": (14, lambda r: r.plugin_rel_l2),
         "generic rel-L2": (15, lambda r: r.generic_rel_l2)}, rows, GATE)
    print("check: " + (f"MISMATCH: {failed} cases beyond rel-L2 {GATE}" if failed
                       else f"plugin output within rel-L2 {GATE} of fp32 in every case run"))
    return EXIT_MISMATCH if failed else EXIT_OK

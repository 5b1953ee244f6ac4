"""python -m sm70ops: the plugin's identity, its decisions on the model's shapes (as the C tool
`sm70ops info|check`), benchmarks against the host's paths with roofline floors, and a one-layer
prefill demo (this package's alone).

Exit codes: 0 done, 1 the plugin could not be loaded or queried, or a bench or demo check failed,
2 cannot run here (no CUDA GPU, or no torch for bench and demo), 64 usage error (0, 1 and 64 as
the C tool's).
"""
import argparse
import sys

from . import _abi, data, model
from .bench import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from .plugin import Plugin, Sm70opsError

HEADER = ("op", "TP", "page", "prefill", "rows x keys", "decision", "route", "workspace", "reason",
          "message")
ALL = "all"  # a plan cell whose value does not change the op's descriptor


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def format_bytes(n):
    """"640 B", "12.0 MiB": the C tool's cli_format_bytes."""
    if n < 1024:
        return f"{n} B"
    value, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    unit = 0
    while value >= 1024 and unit + 1 < len(units):
        value, unit = value / 1024, unit + 1
    return f"{value:.1f} {units[unit]}"


def format_table(rows):
    """Left-aligned columns two spaces apart, the last one unpadded (the C tool's table)."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)]
        lines.append("  ".join(cells + [row[-1]]))
    return "\n".join(lines)


def decision_rows(ctx, device, tp=None, page_size=None):
    """[(Case, work, Decision)] for every case of the model's plan (model.plan)."""
    out = []
    for case in model.plan(tp, page_size):
        args, work = model.case_call(case, device)
        out.append((case, work, ctx.check(case.op, args)))
    return out


def plan_cells(case):
    """The op, TP, page and prefill cells of a plan row."""
    def cell(value, text=str):
        return ALL if value is None else text(value)

    return (_abi.OP_NAMES[case.op], cell(case.tp), cell(case.page_size),
            cell(case.prefill, prompt_label))


def prompt_label(tokens):
    """"8K" where 1024 divides the length, else the length (the C tool's label)."""
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def joined(values, separator=", ", last=", "):
    """The C tool's print_list: "1, 2, 4, 8", or with "-, " and "- and " "16-, 32- and 64"."""
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else separator.join(items[:-1]) + last + items[-1]


def summary(decisions):
    """"40 of 48 accepted: 8 declined (UNSUPPORTED_SHAPE 8)"."""
    declined = [d.reason for d in decisions if not d.accepted]
    text = f"{len(decisions) - len(declined)} of {len(decisions)} accepted"
    if declined:
        counts = ", ".join(f"{r} {declined.count(r)}" for r in dict.fromkeys(declined))
        text += f": {len(declined)} declined ({counts})"
    return text


def _log_to_stderr(level, message):
    """The C tool's format: "[warn] message"."""
    name = level.name.lower() if isinstance(level, _abi.LogLevel) else "log"
    print(f"[{name}] {message}", file=sys.stderr)


def run_check(opts):
    # The plugin warns at context creation about what declines every op or what a plan cannot
    # see (no device; no code in this build for the GPU): that explains the table, as in the C
    # tool's check.
    plugin = Plugin(opts.library)
    with plugin, plugin.context(opts.device, opts.cc, log=_log_to_stderr,
                                log_level=_abi.LogLevel.WARN) as ctx:
        found = decision_rows(ctx, opts.device, opts.tp, opts.page)
    m = model.QWEN38_FLASH_NEXT
    tps = joined(model.TP_SIZES if opts.tp is None else (opts.tp,))
    pages = joined(model.PAGE_SIZES if opts.page is None else (opts.page,), "-, ", "- and ")
    print(f"plugin:  {plugin.path}")
    print(f"shapes:  {m.name} per rank at TP {tps}; {pages}-token pages; the last chunk of "
          f"each prompt, one request, device {opts.device}")
    if opts.cc:
        print(f"arch:    compute capability {opts.cc // 10}.{opts.cc % 10} (--cc, CUDA not asked)")
    else:
        print("arch:    as the CUDA runtime reports it")
    rows = [HEADER]
    for case, work, d in found:
        rows.append((*plan_cells(case), work, "accept" if d.accepted else "decline",
                     d.route if d.accepted else "-",
                     format_bytes(d.workspace_bytes) if d.accepted else "-", d.reason, d.message))
    print()
    print(format_table(rows))
    print()
    print(summary([d for *_, d in found]))
    return EXIT_OK


def run_info(opts):
    with Plugin(opts.library) as plugin:
        ident = plugin.identity()
        print(f"{'plugin:':14}{plugin.path}")
        print(f"{'name:':14}{ident.name} {'.'.join(map(str, ident.version))}")
        print(f"{'git revision:':14}{ident.git_revision}")
        print(f"{'ABI:':14}plugin {ident.abi_major}.{ident.abi_minor}, host {_abi.ABI_MAJOR}."
              f"{_abi.ABI_MINOR}, negotiated {plugin.abi_major}.{plugin.abi_minor}")
        print(f"{'SASS:':14}{ident.sm_list}")
        count = plugin.device_count()
        print(f"{'devices:':14}{count if count else 'no CUDA device'}")
        for i in range(count):
            info = plugin.device_info(i)
            cc = info.compute_capability
            print(f"device {i}:     {info.name}, compute capability {cc // 10}.{cc % 10}, "
                  f"{info.multiprocessors} SMs, {format_bytes(info.global_memory_bytes)}")
    return EXIT_OK


def run_bench(opts):
    from . import bench_attn, bench_index, bench_moe

    return {"qsa_index": bench_index.main, "qsa_attn": bench_attn.main,
            "nvfp4_moe": bench_moe.main}[opts.op](opts)


def run_demo(opts):
    from . import demo

    return demo.main(opts)


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse(argv):
    library = _Parser(add_help=False)
    library.add_argument("--library", metavar="PATH", default=argparse.SUPPRESS,
                         help="the plugin (default: $SM70OPS_LIBRARY, else the bundled plugin "
                         "that fits the device, else libsm70ops.so through the dynamic loader)")
    parser = _Parser(prog="python -m sm70ops", parents=[library],
                     description="Inspects libsm70ops.so and asks its capability check about "
                     "the model's shapes.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("info", parents=[library], help="identity, ABI, CUDA devices")
    check = commands.add_parser(
        "check", parents=[library],
        help=f"the decision for every op on the model's per-rank shapes at TP "
        f"{joined(model.TP_SIZES, ', ', ' and ')} with "
        f"{joined(model.PAGE_SIZES, '-, ', '- and ')}-token pages, at prompts of "
        f"{joined(map(prompt_label, model.PREFILL_LENGTHS), ', ', ' and ')} (the last "
        f"{model.CHUNK_ROWS}-row chunk of each; integration/python/sm70ops/models.txt)")
    check.add_argument("--cc", type=int, default=0,
                       help="plan for compute capability N (70: V100) without asking CUDA")
    check.add_argument("--tp", type=int, choices=model.TP_SIZES, default=None,
                       help="only this tensor-parallel size (default: all)")
    check.add_argument("--page", type=int, choices=model.PAGE_SIZES, default=None,
                       help="only this KV page size (default: all)")
    check.add_argument("--device", type=int, default=0)
    bench = commands.add_parser("bench", parents=[library],
                                help="plugin vs the host's paths, with roofline floors (needs a "
                                "CUDA GPU and torch)")
    bench.add_argument("op", choices=["qsa_index", "qsa_attn", "nvfp4_moe"])
    bench.add_argument("--shapes", choices=sorted(model.MODELS), default="model",
                       help="the model's shapes (default) or contract version 1's")
    bench.add_argument("--compress-ratio", type=int, choices=(1, 2, 4), default=None,
                       help="qsa_index: tokens per index key (default: the shapes', 4 for the "
                       "model)")
    bench.add_argument("--page", type=int, choices=(16, 32, 64), default=model.PAGE_SIZE,
                       help=f"qsa_index: KV page size in tokens (default {model.PAGE_SIZE})")
    bench.add_argument("--data", choices=["all", *data.GENERATORS], default=None,
                       help="qsa_index: the table of data generators x sizes against i.i.d. "
                       "data and both baselines, for one generator or all (sm70ops.data)")
    bench.add_argument("--selection", choices=["all", *data.SELECTIONS], default="runs",
                       help="qsa_attn: the token sets' generator (sm70ops.data), or all")
    bench.add_argument("--plot", default="sm70ops_qsa_index_crossover.png",
                       help="qsa_index: PNG of the crossover (when matplotlib is importable)")
    demo = commands.add_parser(
        "demo", parents=[library],
        help="one sparse-attention MoE layer over a prompt, plugin vs generic, tokens/s; "
        "with --tp N also tensor-parallel over NCCL on N GPUs, checked against TP 1")
    demo.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size (default 1)")
    demo.add_argument("--prompts", type=_positive, nargs="+", default=[8192, 32768],
                      metavar="TOKENS", help="prompt lengths (default 8192 32768)")
    demo.add_argument("--reps", type=_positive, default=3, help="timed runs per case (median)")
    demo.add_argument("--page", type=int, choices=model.PAGE_SIZES, default=model.PAGE_SIZE,
                      help=f"KV page size in tokens, the index cache's too (default "
                      f"{model.PAGE_SIZE})")
    demo.add_argument("--plot", default="sm70ops_layer_prefill.png",
                      help="PNG of layer time vs prompt length (when matplotlib is importable)")
    opts = parser.parse_args(argv)
    opts.library = getattr(opts, "library", None)
    return opts


def main(argv=None):
    opts = parse(sys.argv[1:] if argv is None else argv)
    run = {"info": run_info, "check": run_check, "bench": run_bench,
           "demo": run_demo}[opts.command]
    try:
        return run(opts)
    except Sm70opsError as e:
        print(f"sm70ops: {e.last_error or e.status_name}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())

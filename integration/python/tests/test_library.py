"""torch.ops.sm70ops (sm70ops.library): the four ops as torch custom ops. On CPU (the generic
path: ops.md's tensors are kDLCUDA, so the plugin declines CPU tensors): registration, fake
implementations against the real outputs on odd sizes, torch.library.opcheck, torch.compile with
fullgraph, the decline reasons counted, int64 metadata falling back. On a CUDA GPU the plugin
accepts (on the H200: SM70OPS_ALLOW_ARCH=90): opcheck, torch.compile (also "reduce-overhead"),
CUDA-graph capture and the demo's layer, each on the plugin path (checked in library.paths).
Skipped, with the reason printed, without torch, without a GPU, or where the plugin declines the
device (ARCH, NO_DEVICE); any other decline fails."""
import collections
import math

import pytest

from sm70ops import generic
from sm70ops.dlpack import uint64_dtype

OPS = ("qsa_index", "qsa_attn", "nvfp4_moe_prepare", "nvfp4_moe")


@pytest.fixture(scope="module")
def lib(torch):
    from sm70ops import library

    return library


class Problem:
    """One layer's inputs on `device`: two requests of `rows` rows over contexts `seq_lens` on
    scattered pages of `page` tokens; the indexer (4 x 128, compress ratio c, budget topk), the
    attention (heads = (Hq, Hkv), head dim `dim`, gated) and the MoE (moe = (E, top-k, H, I)),
    random from `seed`."""

    def __init__(self, torch, device, rows=(7, 12), seq_lens=(50, 99), page=16, c=4, topk=32,
                 heads=(6, 1), dim=128, moe=(6, 3, 32, 48), seed=11):
        self.torch, self.device = torch, device
        self.g = torch.Generator(device=device).manual_seed(seed)
        self.ints = dict(topk=topk, max_seq_len=max(seq_lens), max_query_len=max(rows),
                         compress_ratio=c)
        t = sum(rows)
        table, pool = self._table(seq_lens, page)
        self.meta = dict(query_start_loc=self._i32([0, rows[0], t]),
                         seq_lens=self._i32(seq_lens), block_table=table)
        self.q_index = self._randn(t, 4, 128)
        self.k_index = self._randn(pool, page // c, 128)
        self.q, self.gate = self._randn(t, heads[0], dim), self._randn(t, heads[0], dim)
        self.k_cache, self.v_cache = (self._randn(pool, page, heads[1], dim) for _ in range(2))
        self._moe(t, *moe)

    def _i32(self, values):
        return self.torch.tensor(values, dtype=self.torch.int32, device=self.device)

    def _randn(self, *shape):
        return self.torch.randn(shape, generator=self.g, device=self.device).half()

    def _bytes(self, *shape, lo=0, hi=256):
        return self.torch.randint(lo, hi, shape, generator=self.g, device=self.device,
                                  dtype=self.torch.uint8)

    def _table(self, seq_lens, page):
        pages = [math.ceil(n / page) for n in seq_lens]
        order = self.torch.randperm(sum(pages), generator=self.g, device=self.device).int()
        table = self.torch.zeros((len(pages), max(pages)), dtype=self.torch.int32,
                                 device=self.device)
        for r, n in enumerate(pages):
            table[r, :n] = order[sum(pages[:r]):sum(pages[:r]) + n]
        return table, sum(pages)

    def _moe(self, tokens, experts, topk, hidden, inter):
        torch, g, device = self.torch, self.g, self.device
        self.experts = dict(
            w13=self._bytes(experts, 2 * inter, hidden // 2),
            w13_scale=self._bytes(experts, 2 * inter, hidden // 16, lo=0x30, hi=0x40),
            w13_scale_2=torch.rand((experts, 2), generator=g, device=device) * 0.02 + 0.01,
            w2=self._bytes(experts, hidden, inter // 2),
            w2_scale=self._bytes(experts, hidden, inter // 16, lo=0x30, hi=0x40),
            w2_scale_2=torch.rand((experts,), generator=g, device=device) * 0.02 + 0.01)
        self.x = torch.randn((tokens, hidden), generator=g, device=device).half()
        self.topk_ids = torch.stack([torch.randperm(experts, generator=g, device=device)[:topk]
                                     for _ in range(tokens)]).int()
        self.topk_weights = torch.rand((tokens, topk), generator=g, device=device)

    def args(self, op, sel=None, prepared=None):
        """The positional arguments of torch.ops.sm70ops.<op> (qsa_attn takes qsa_index's
        output `sel`, nvfp4_moe nvfp4_moe_prepare's)."""
        m, n = self.meta, self.ints
        metadata = (m["query_start_loc"], m["seq_lens"], m["block_table"])
        experts = tuple(self.experts.values())
        return {
            "qsa_index": lambda: (self.q_index, None, self.k_index, *metadata, n["topk"],
                                  n["max_seq_len"], n["max_query_len"], n["compress_ratio"]),
            "qsa_attn": lambda: (self.q, self.k_cache, self.v_cache, *metadata, *sel,
                                 self.q.shape[-1] ** -0.5, n["max_seq_len"], n["max_query_len"],
                                 self.gate),
            "nvfp4_moe_prepare": lambda: experts,
            "nvfp4_moe": lambda: (self.x, self.topk_ids, self.topk_weights, *experts, prepared),
        }[op]()


STEP_OPS = ("qsa_index", "qsa_attn", "nvfp4_moe")


def step(torch, p, prepared):
    """qsa_index -> qsa_attn, and the MoE on `prepared` (made at load), as a model's forward
    calls them: (sel_blocks, sel_mask, sel_count, attention out, MoE out)."""
    o = torch.ops.sm70ops
    sel = o.qsa_index(*p.args("qsa_index"))
    out = o.qsa_attn(*p.args("qsa_attn", sel))
    return (*sel, out, o.nvfp4_moe(*p.args("nvfp4_moe", prepared=prepared)))


def layer(torch, p):
    """`step` on the weights nvfp4_moe_prepare repacks in the same call."""
    return step(torch, p, torch.ops.sm70ops.nvfp4_moe_prepare(*p.args("nvfp4_moe_prepare")))


def counted(lib, fn):
    """(fn(), the decisions it added to library.paths)."""
    before = collections.Counter(lib.paths)
    result = fn()
    return result, lib.paths - before


def tensors(result):
    """An op's output as a tuple of tensors."""
    return result if isinstance(result, tuple) else (result,)


def same(torch, got, want, tolerance=0.0):
    """Equal shapes and dtypes, and values (fp16 within `tolerance` of rel-L2)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype == torch.float16:
        err = (got.float() - want.float()).norm() / want.float().norm().clamp(min=1e-30)
        return bool(err <= tolerance)
    bits = torch.int64 if got.element_size() == 8 else got.dtype  # uint64: compare its bits
    return torch.equal(got.view(bits), want.view(bits))


# CPU: the generic path -------------------------------------------------------------------------


def test_the_four_ops_are_registered_functional(torch, lib):
    for op in OPS:
        schema = getattr(torch.ops.sm70ops, op).default._schema
        assert not any(a.alias_info for a in schema.arguments), schema  # nothing mutated
    assert "Tensor? weights" in str(torch.ops.sm70ops.qsa_index.default._schema)


@pytest.mark.parametrize("rows, seq_lens, page, c, topk", [((7, 12), (50, 99), 16, 4, 32),
                                                           ((1, 19), (1, 989), 64, 2, 18),
                                                           ((5, 3), (33, 77), 32, 1, 7)])
def test_fake_outputs_match_the_generic_paths(torch, lib, rows, seq_lens, page, c, topk):
    """Fake tensors run the fake implementations: the same shapes and dtypes as the real
    (generic) outputs, on odd sizes; nvfp4_moe_prepare's size is unbacked (known at run time: 0
    here, where the plugin declines)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    p = Problem(torch, "cpu", rows, seq_lens, page, c, topk, heads=(3, 1), dim=256,
                moe=(5, 2, 48, 80))
    o = torch.ops.sm70ops
    sel = o.qsa_index(*p.args("qsa_index"))
    real = dict(qsa_index=sel, qsa_attn=o.qsa_attn(*p.args("qsa_attn", sel)),
                nvfp4_moe_prepare=o.nvfp4_moe_prepare(*p.args("nvfp4_moe_prepare")),
                nvfp4_moe=o.nvfp4_moe(*p.args("nvfp4_moe")))
    nb = generic.selection_width(topk, c, page, max(seq_lens))
    assert sel[0].shape == (sum(rows), nb) and sel[1].dtype == uint64_dtype()
    assert real["nvfp4_moe_prepare"].shape == (0,)
    mode = FakeTensorMode(shape_env=ShapeEnv())

    def fake(args):
        return [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]

    fake_sel = fake(sel)
    for op, want in real.items():
        args = fake(p.args(op, fake_sel))
        with mode:
            got = tensors(getattr(o, op)(*args))
        assert len(got) == len(tensors(want)), op
        for g, w in zip(got, tensors(want)):
            assert isinstance(g, torch._subclasses.FakeTensor) and g.dtype == w.dtype, op
            if op == "nvfp4_moe_prepare":
                assert g.dim() == 1 and isinstance(g.shape[0], torch.SymInt), g.shape
            else:
                assert g.shape == w.shape, op


@pytest.mark.parametrize("op", OPS)
def test_opcheck_on_cpu(torch, lib, op):
    p = Problem(torch, "cpu")
    sel = torch.ops.sm70ops.qsa_index(*p.args("qsa_index"))
    torch.library.opcheck(getattr(torch.ops.sm70ops, op), p.args(op, sel))


def compile_layer(torch, p):
    """torch.compile(fullgraph=True) of `layer`: inductor, else aot_eager where inductor cannot
    build here (no C++ compiler)."""
    for backend in ("inductor", "aot_eager"):
        torch._dynamo.reset()
        try:
            return backend, torch.compile(layer, fullgraph=True, backend=backend)(torch, p)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            print(f"torch.compile backend {backend} failed here: {e}")
    pytest.fail("no torch.compile backend compiled the layer")


def test_a_compiled_layer_matches_eager(torch, lib):
    p = Problem(torch, "cpu")
    backend, compiled = compile_layer(torch, p)
    print(f"compiled with {backend}")
    for got, want in zip(compiled, layer(torch, p)):
        assert same(torch, got, want)


def test_each_decision_is_counted_with_its_reason(torch, lib, plugin):
    p = Problem(torch, "cpu")
    _, added = counted(lib, lambda: layer(torch, p))
    assert added == {(op, lib.NO_CONTEXT): 1 for op in OPS}  # CPU tensors: no context
    scoped = collections.Counter()
    with plugin.context(compute_capability=70) as ctx:
        previous = lib.register_context(ctx)  # device 0's: CPU calls still have none
        try:
            _, unrouted = counted(lib, lambda: layer(torch, p))
            with lib.using(ctx, scoped):  # this one is asked, and declines CPU tensors
                _, added = counted(lib, lambda: layer(torch, p))
        finally:
            lib.reset_context(ctx.device)
            if previous is not None:
                lib.register_context(previous)
    assert unrouted == {(op, lib.NO_CONTEXT): 1 for op in OPS}
    assert added == scoped == {(op, "generic: INVALID_ARGUMENT"): 1 for op in OPS}


def test_int64_metadata_falls_back_instead_of_raising(torch, lib, plugin):
    """int64 seq_lens (op 1) and topk_ids (op 3) are the plugin's to decline, never a TypeError
    of the binding: the generic path answers."""
    p = Problem(torch, "cpu")
    want = (torch.ops.sm70ops.qsa_index(*p.args("qsa_index")),
            torch.ops.sm70ops.nvfp4_moe(*p.args("nvfp4_moe")))
    p.meta["seq_lens"], p.topk_ids = p.meta["seq_lens"].long(), p.topk_ids.long()
    with plugin.context(compute_capability=70) as ctx, lib.using(ctx):
        got, added = counted(lib, lambda: (torch.ops.sm70ops.qsa_index(*p.args("qsa_index")),
                                           torch.ops.sm70ops.nvfp4_moe(*p.args("nvfp4_moe"))))
    assert all(same(torch, g, w) for g, w in zip((*got[0], got[1]), (*want[0], want[1])))
    assert added == {("qsa_index", "generic: INVALID_ARGUMENT"): 1,
                     ("nvfp4_moe", "generic: INVALID_ARGUMENT"): 1}


@pytest.fixture
def fresh_routing():
    """routing.py as a new process has it (no context for any device, no fallback logged yet);
    what the test changed is undone after it."""
    from sm70ops import routing

    saved = dict(routing._contexts), dict(routing._no_context), set(routing._logged)
    routing.reset_context()
    routing._logged.clear()
    yield routing
    routing.reset_context()
    routing._contexts.update(saved[0])
    routing._no_context.update(saved[1])
    routing._logged.clear()
    routing._logged.update(saved[2])


def test_a_call_on_a_cuda_device_creates_its_context_and_logs_the_fallback_once(
        torch, lib, fresh_routing, library, caplog, monkeypatch):
    """The decision of a qsa_attn call routed to CUDA device 0 with no context registered: the
    first call creates the plugin's context, which declines (CPU tensors, or no device on this
    machine), the reason is counted and logged once for two calls."""
    from sm70ops import ops

    monkeypatch.setenv("SM70OPS_LIBRARY", library)
    p = Problem(torch, "cpu")
    sel = torch.ops.sm70ops.qsa_index(*p.args("qsa_index"))
    q, k, v, qsl, seq_lens, table, blocks, mask, count, scale, max_l, max_t, gate = p.args(
        "qsa_attn", sel)
    args = ops.qsa_attn(q, k, v, qsl, seq_lens, table, blocks, mask, count, torch.empty_like(q),
                        sm_scale=scale, max_seq_len=max_l, max_query_len=max_t, gate=gate)
    before = collections.Counter(lib.paths)
    assert lib._accepted("qsa_attn", torch.device("cuda", 0), args) is None
    created = fresh_routing._contexts[0]
    assert lib._accepted("qsa_attn", torch.device("cuda", 0), args) is None
    assert created is not None and fresh_routing._contexts[0] is created
    (path, calls), = (lib.paths - before).items()
    assert calls == 2 and path[0] == "qsa_attn"
    assert path[1] in ("generic: NO_DEVICE", "generic: INVALID_ARGUMENT")
    warned = [r.getMessage() for r in caplog.records if "qsa_attn falls back" in r.getMessage()]
    assert len(warned) == 1 and f"({path[1][len('generic: '):]}): " in warned[0]


# CUDA: the plugin path -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu(cuda_torch, plugin, lib):
    """The plugin's context registered for the current device, and a model-like problem there:
    the TP4 rank's indexer (c 4, no weights) and gated attention (6 / 1 heads of 256) on 16-token
    pages, 16 experts top-10 of H 256, I 160."""
    device = cuda_torch.cuda.current_device()
    with plugin.context(device) as ctx:
        lib.register_context(ctx)
        yield Problem(cuda_torch, "cuda", rows=(129, 128), seq_lens=(3001, 2000), topk=512,
                      dim=256, moe=(16, 10, 256, 160))
        lib.reset_context(device)


@pytest.mark.parametrize("op", OPS)
def test_opcheck_on_cuda(cuda_torch, lib, gpu, require_plugin, op):
    o = cuda_torch.ops.sm70ops
    sel = o.qsa_index(*gpu.args("qsa_index"))
    prepared = o.nvfp4_moe_prepare(*gpu.args("nvfp4_moe_prepare"))
    _, added = counted(lib, lambda: cuda_torch.library.opcheck(
        getattr(o, op), gpu.args(op, sel, prepared)))
    require_plugin(added, (op,))


def test_a_compiled_layer_matches_eager_on_the_plugin(cuda_torch, lib, gpu, require_plugin):
    torch = cuda_torch
    want, added = counted(lib, lambda: layer(torch, gpu))
    require_plugin(added, OPS)
    torch._dynamo.reset()
    got, added = counted(lib, lambda: torch.compile(layer, fullgraph=True)(torch, gpu))
    assert set(added) == {(op, lib.PLUGIN) for op in OPS}
    for g, w in zip(got, want, strict=True):
        assert same(torch, g, w, tolerance=1e-3)


def new_inputs(torch, p):
    """Fresh values, in place, in the tensors a step reads per token."""
    for name in ("q", "gate", "q_index", "x"):
        getattr(p, name).copy_(torch.randn_like(getattr(p, name).float()).half())


def test_reduce_overhead_compilation_matches_eager_on_the_plugin(cuda_torch, lib, gpu,
                                                                 require_plugin):
    """torch.compile(mode="reduce-overhead") of `step` (cudagraph trees: a warm-up run, a
    recording, then replays; each plugin call's workspace comes from the graph's pool) computes
    what eager calls do, on new inputs each time, without skipping the CUDA graph."""
    torch = cuda_torch
    prepared, added = counted(lib, lambda: torch.ops.sm70ops.nvfp4_moe_prepare(
        *gpu.args("nvfp4_moe_prepare")))
    require_plugin(added, ("nvfp4_moe_prepare",))
    _, added = counted(lib, lambda: step(torch, gpu, prepared))
    require_plugin(added, STEP_OPS)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, mode="reduce-overhead")
    skips = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
    for _ in range(4):
        new_inputs(torch, gpu)
        got, added = counted(lib, lambda: [t.clone() for t in compiled(torch, gpu, prepared)])
        assert set(added) <= {(op, lib.PLUGIN) for op in STEP_OPS}
        for g, w in zip(got, step(torch, gpu, prepared), strict=True):
            assert same(torch, g, w, tolerance=1e-3)
    assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == skips


def test_a_captured_cuda_graph_replays_like_eager(cuda_torch, lib, gpu, require_plugin):
    """The layer captured in a CUDA graph (after a warm-up call on a side stream, as
    torch.cuda.graph's documentation asks) replays on new inputs copied into its static ones as
    eager calls compute them."""
    torch = cuda_torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _, added = counted(lib, lambda: layer(torch, gpu))
    torch.cuda.current_stream().wait_stream(side)
    require_plugin(added, OPS)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = layer(torch, gpu)
    new_inputs(torch, gpu)
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(static, layer(torch, gpu), strict=True):
        assert same(torch, got, want, tolerance=1e-3)


def test_the_demo_layer_runs_on_the_torch_ops(cuda_torch, lib, plugin, require_plugin):
    """demo.run_rank (the model's TP1 layer over a 1500-token prompt) goes through TorchOps,
    a thin layer over torch.ops.sm70ops: library.paths counts its plugin calls."""
    from sm70ops import demo

    with plugin.context(cuda_torch.cuda.current_device()) as ctx:
        (run, *_), added = counted(lib, lambda: demo.run_rank(cuda_torch, demo.Shard(1, 0), ctx,
                                                              1500, 64, 1))
    require_plugin(added, OPS)
    assert run.paths == {op: lib.PLUGIN for op in OPS}

"""The plugin's qsa_index on every kind of data of sm70ops.data (issue 21), on a CUDA GPU: contexts
4097, 32768 and 131072, budgets 512 and 2048, a key per token (c 1, per-head weights, 64-token
pages) and the model's key per 4 tokens (weight-free, 16- and 64-token pages). The token sets of
CHECKED rows are held to the fp64 reference by ops.md's near-tie rule (near ties counted and
printed; none allowed where every score is equal), the expansion exactly to the plugin's own
token sets, on poisoned outputs. Skipped without torch.cuda, or where the plugin declines (on the
H200 set SM70OPS_ALLOW_ARCH=90)."""
import pytest

from sm70ops import bench_index, data, generic, ops

CONTEXTS = (4097, 32768, 131072)
BUDGETS = (512, 2048)
LAYOUTS = [(1, 64), (4, 16), (4, 64)]  # (c, P)
ROWS = 256  # the last rows of the context, one call


@pytest.fixture(scope="module")
def ctx(cuda_torch, plugin):
    with plugin.context(cuda_torch.cuda.current_device()) as c:
        yield c


def poisoned(torch, shape, dtype, value):
    return torch.full(shape, value, dtype=dtype, device="cuda")


@pytest.mark.parametrize("c, page", LAYOUTS)
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name", list(data.GENERATORS))
def test_plugin_is_exact_on_every_kind_of_data(cuda_torch, ctx, name, context, budget, c, page):
    torch = cuda_torch
    setting = bench_index.Setting(compress_ratio=c, page_size=page, topk=budget, weighted=c == 1)
    problem = data.generate(name, torch, seq_len=context, rows=ROWS, compress_ratio=c,
                            page_size=page, budget=budget, weighted=setting.weighted,
                            seed=context + budget + c)
    nb = generic.selection_width(budget, c, page, context)
    out = dict(topk_idx=poisoned(torch, (ROWS, budget + c - 1), torch.int32, -7),
               sel_blocks=poisoned(torch, (ROWS, nb), torch.int32, -7),
               sel_mask=poisoned(torch, (ROWS, nb), torch.int64, 7),
               sel_count=poisoned(torch, (ROWS,), torch.int32, -7))
    args = ops.qsa_index(**problem.last_rows(), **out, topk=budget, compress_ratio=c,
                         max_seq_len=context, max_query_len=ROWS)
    d = ctx.check("qsa_index", args)
    if not d.accepted:
        pytest.skip(f"the plugin declines qsa_index here: {d.reason}: {d.message}")
    workspace = torch.empty(max(d.workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    ctx.execute("qsa_index", args, torch.cuda.current_stream(), workspace)
    case = bench_index.Case(name, context, problem, [(context, ROWS)])
    differing, excused = bench_index.check_rows(torch, setting, case, out["topk_idx"])
    print(f"qsa_index {name} L {context} B {budget} c {c} P {page}: {differing} of "
          f"{bench_index.CHECKED_ROWS} checked rows differ, {excused} near ties")
    assert differing == excused
    if name == "equal":  # every score of a row equal: the lowest groups, exactly
        assert differing == 0
    blocks, masks, counts = generic.expand_selection(out["topk_idx"], nb, page)
    assert torch.equal(out["sel_blocks"], blocks) and torch.equal(out["sel_count"], counts)
    assert torch.equal(out["sel_mask"], masks.view(torch.int64))

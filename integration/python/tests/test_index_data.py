"""The index data generators (sm70ops.data), ops.md's near-tie gate (sm70ops.gates), the Triton
baseline (sm70ops.triton_index, in Triton's interpreter) and the bench's table, on CPU with
tiny sizes; the plugin's side runs on the device (test_gpu_index_data.py). Skipped without
torch."""
import os
import subprocess
import sys
import types

import pytest

from conftest import package_env
from sm70ops import bench_index, data, gates, generic


def problem(torch, name, c=4, page=16, seq_len=2053, rows=40, budget=256, weighted=False,
            seed=1):
    return data.generate(name, torch, seq_len=seq_len, rows=rows, compress_ratio=c,
                         page_size=page, budget=budget, weighted=weighted, seed=seed,
                         device="cpu")


def reference(torch, p, budget):
    inputs = p.last_rows()
    scores = generic.qsa_index_scores(**inputs, compress_ratio=p.compress_ratio, precise=True)
    lengths = p.seq_len - p.q.shape[0] + 1 + torch.arange(p.q.shape[0])
    result = generic.qsa_index(**inputs, topk=budget, compress_ratio=p.compress_ratio)
    return result, scores, lengths


@pytest.mark.parametrize("name", list(data.GENERATORS))
@pytest.mark.parametrize("c, page", [(1, 64), (4, 16)])
def test_generators_give_well_formed_problems(torch, name, c, page):
    p = problem(torch, name, c, page)
    assert p.q.shape == (40, 4, 128) and p.q.dtype == torch.float16
    assert p.k_index.shape == (-(-2053 // page), page // c, 128) and p.page_size == page
    assert sorted(p.block_table[0].tolist()) == list(range(p.k_index.shape[0]))
    assert torch.isfinite(p.q.float()).all() and torch.isfinite(p.k_index.float()).all()
    assert p.q.float().abs().mean() > 0.1 and p.k_index.float().std() > 0.1  # never zeros
    again = problem(torch, name, c, page)
    assert torch.equal(p.q, again.q) and torch.equal(p.k_index, again.k_index)


def test_the_generators_shape_the_selection_as_they_say(torch):
    budget = 256
    rising, _, _ = reference(torch, problem(torch, "rising"), budget)
    falling, _, _ = reference(torch, problem(torch, "falling"), budget)
    equal, _, _ = reference(torch, problem(torch, "equal"), budget)
    hot, scores, _ = reference(torch, problem(torch, "hot"), budget)
    groups = budget // 4
    last_group = 2053 // 4  # of the last row
    assert rising.topk_idx[-1, groups * 4 - 4].item() > 4 * (last_group - 2 * groups)
    assert falling.topk_idx[-1, groups * 4 - 1].item() < 4 * 2 * groups
    assert equal.topk_idx[:, : groups * 4].tolist() == [list(range(groups * 4))] * 40
    region = hot.topk_idx[-1, : groups * 4].view(groups, 4)[:, 0] // 4
    assert (region[1:] - region[:-1] == 1).all()  # one contiguous region of B/c groups


def test_drifting_queries_keep_most_pages_of_the_row_before(torch):
    drift, _, _ = reference(torch, problem(torch, "drift", seq_len=8192, budget=512), 512)
    iid, _, _ = reference(torch, problem(torch, "iid", seq_len=8192, budget=512), 512)
    near, far = (data.neighbour_overlap(r.sel_blocks, r.sel_count) for r in (drift, iid))
    assert 0.5 < near < 0.95 and far < 0.3, (near, far)


def test_compressed_keys_are_the_hosts_means_normed_and_roped(torch):
    p = problem(torch, "compressed", seq_len=256, rows=8)
    keys = p.k_index[p.block_table[0].long()].flatten(0, 1).float()
    rms = keys[:, 64:].pow(2).mean(dim=1).sqrt()  # the dims RoPE leaves: the norm's scale
    assert (keys[:, 64:].norm(dim=1) > 0).all() and rms.std() < rms.mean()
    neighbours = torch.stack([keys[:-1, 64:].flatten(), keys[1:, 64:].flatten()])
    assert torch.corrcoef(neighbours)[0, 1] > 0.3  # neighbouring groups alike


def test_the_gate_takes_equal_sets_and_near_ties_only(torch):
    p = problem(torch, "iid", seq_len=4097, rows=30, budget=512)
    want, scores, lengths = reference(torch, p, 512)
    assert gates.judge_index(want.topk_idx, want.topk_idx, scores, lengths, 4) == (0, 0)
    groups = generic.topk_positions(scores, torch.isfinite(scores), 128)
    order = scores[0].topk(129).indices
    kth, after = order[127].item(), order[128].item()
    swapped = groups[0].clone()
    swapped[swapped == kth] = after
    got = want.topk_idx.clone()
    got[0] = generic.token_set(swapped.sort().values.unsqueeze(0), lengths[:1], 4)[0]
    far_apart = scores.clone()
    far_apart[0, after] = far_apart[0, kth] * 0.9
    assert gates.judge_index(got, want.topk_idx, far_apart, lengths, 4) == (1, 0)
    tied = scores.clone()
    tied[0, after] = tied[0, kth] * (1 - 1e-4)
    assert gates.judge_index(got, want.topk_idx, tied, lengths, 4) == (1, 1)
    no_tail = got.clone()
    no_tail[0, int((no_tail[0] >= 0).sum()) - 1] = -1  # row 0's L = 4068 leaves a tail
    assert gates.judge_index(no_tail, want.topk_idx, tied, lengths, 4) == (1, 0)
    dropped = want.topk_idx.clone()  # one group too few: the tied group left out, not swapped
    kept = groups[0][groups[0] != kth].unsqueeze(0)
    row = generic.token_set(kept, lengths[:1], 4)[0]
    dropped[0] = -1
    dropped[0, : row.numel()] = row
    assert gates.judge_index(dropped, want.topk_idx, tied, lengths, 4) == (1, 0)


def run_interpreted(name):
    """Runs this module's function `name` in a fresh interpreter whose Triton kernels run on the
    CPU (TRITON_INTERPRET is read when triton is first imported)."""
    pytest.importorskip("triton", reason="triton is not importable here")
    tests = os.path.dirname(__file__)
    env = dict(os.environ, TRITON_INTERPRET="1", **package_env(tests))
    done = subprocess.run([sys.executable, "-c", f"import {__name__} as t; t.{name}()"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_triton_baseline_scores_like_the_reference(torch):
    run_interpreted("triton_baseline_checks")


def triton_baseline_checks():
    import torch

    from sm70ops import triton_index

    budget = 256
    for c, page, weighted in ((4, 16, False), (1, 64, True), (4, 64, False)):
        p = problem(torch, "pages-0.7", c, page, seq_len=1503, rows=37, budget=budget,
                    weighted=weighted)
        want, scores, lengths = reference(torch, p, budget)
        logits = triton_index.paged_logits(p.q, p.weights, p.k_index, p.block_table[0],
                                           p.seq_len, c)
        seen = torch.isfinite(scores)
        assert torch.equal(torch.isfinite(logits), seen)
        assert torch.allclose(logits[seen], scores[seen].float(), rtol=1e-5, atol=1e-4)
        nb = generic.selection_width(budget, c, page, p.seq_len)
        got = triton_index.qsa_index(p.q, p.weights, p.k_index, p.block_table[0], p.seq_len,
                                     budget, c, nb)
        differing, excused = gates.judge_index(got.topk_idx, want.topk_idx, scores, lengths, c)
        assert differing == excused, (c, page, differing, excused)


class GenericAsPlugin:
    """A context whose 'plugin' is generic.qsa_index writing into the call's outputs: it runs
    the bench's plumbing (calls, checks, table) without a GPU; its timings mean nothing."""

    def check(self, op, args):
        return types.SimpleNamespace(accepted=True, workspace_bytes=16, reason="ACCEPTED",
                                     message="")

    def execute(self, op, args, stream, workspace, workspace_bytes):
        views = {name: view.owner if view is not None else None
                 for name, view in args._keep.items()}
        s = args.struct
        out = generic.qsa_index(**{n: views[n] for n in ("q", "weights", "k_index",
                                                         "query_start_loc", "seq_lens",
                                                         "block_table")},
                                topk=s.topk, nb=views["sel_blocks"].shape[1],
                                compress_ratio=s.compress_ratio)
        for name, value in out._asdict().items():
            views[name].copy_(value.view(views[name].dtype))


def test_the_data_table_runs_every_size_on_cpu(torch):
    lines = run_interpreted("data_table_on_cpu").splitlines()
    assert lines[0].split()[:2] == ["data", "size"]
    rows = [line.split() for line in lines[1:5]]
    assert [r[:3] for r in rows] == [["iid", "24", "x"], ["iid", "prefill", "0K"],
                                     ["drift", "24", "x"], ["drift", "prefill", "0K"]]
    assert all(r[-1] == "same" for r in rows), lines
    assert lines[-1].startswith("check: the plugin's token sets equal"), lines


def data_table_on_cpu():
    """bench_index.run_table at tiny sizes: 24 rows x 1500 tokens and a 700-token prefill in
    chunks of 256 rows (the last one short), both baselines, GenericAsPlugin for the plugin."""
    import torch

    bench_index.DEVICE = "cpu"
    bench_index.median_ms = lambda torch, fn, **_: fn() or 1.0
    torch.cuda.current_stream = lambda *_: None
    torch.cuda.empty_cache = lambda: None
    bench_index.ROWS, bench_index.TABLE_TOKENS, bench_index.PREFILLS = 24, (1500,), (700,)
    bench_index.model.CHUNK_ROWS = 256
    s = bench_index.Setting(compress_ratio=4, page_size=16, topk=128, weighted=False)
    assert bench_index.run_table(torch, GenericAsPlugin(), s, ["iid", "drift"]) == 0

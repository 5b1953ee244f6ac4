"""The prefill demo (sm70ops.demo): the model it describes, its tensor-parallel split, its
command line, and a tiny layer of the same structure on CPU; the model-sized layer runs on a GPU
(`python -m sm70ops demo`, test_gpu_demo below)."""
import pytest

from sm70ops import demo, model
from sm70ops.torch_ops import TorchOps


def test_the_demo_layer_is_the_models():
    m = demo.FULL
    assert (m.name, m.hidden, m.q_heads, m.kv_heads, m.head_dim) == ("Qwen3.8-Flash-Next", 2560,
                                                                    24, 2, 256)
    assert m.attention_gate and not m.index_weighted
    assert (m.index_heads, m.index_dim, m.compress_ratio, m.index_topk) == (4, 128, 4, 2048)
    assert (m.experts, m.expert_topk, m.expert_inter, m.shared_inter) == (512, 10, 640, 640)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_shards_cover_every_head_and_slice_once(tp):
    assert demo.tp_sizes_ok(tp) is None
    m = demo.FULL
    heads, inter, shared = [], 0, 0
    for rank in range(tp):
        s = demo.Shard(tp, rank)
        heads += range(s.q0, s.q0 + s.hq)
        group = m.q_heads // m.kv_heads
        assert all(s.kv0 <= h // group < s.kv0 + s.hkv for h in range(s.q0, s.q0 + s.hq))
        inter += s.inter
        shared += s.shared_inter
    assert heads == list(range(m.q_heads)) and inter == m.expert_inter == shared


@pytest.mark.parametrize("tp", [3, 5, 16, 32])
def test_sizes_that_do_not_split_are_refused(tp):
    assert "must divide" in demo.tp_sizes_ok(tp)


@pytest.mark.parametrize("args", [["--tp", "3"], ["--tp", "0"], ["--reps", "0"],
                                  ["--prompts", "0"]])
def test_demo_usage_errors_exit_64(run_module, args):
    code, output = run_module("demo", *args)
    assert code == 64, output


def test_demo_without_a_gpu_exits_2(run_module, library, no_cuda_gpu):
    for args in (["demo"], ["bench", "nvfp4_moe"]):
        code, output = run_module(*args, "--library", library)
        assert code == 2 and "needs a CUDA GPU" in output, output


class Untimed:
    """demo.Phases without CUDA events."""

    def __init__(self, torch):
        pass

    def timed(self, phase, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def totals_ms(self):
        return {}


TINY = model.Model(name="tiny", hidden=64, q_heads=4, kv_heads=2, head_dim=64,
                   attention_gate=True, index_heads=4, index_dim=128, index_weighted=False,
                   compress_ratio=4, index_topk=16, experts=6, expert_topk=2, expert_inter=32,
                   shared_inter=48, max_context=64)


def tiny_prefill(torch, monkeypatch, chunk, prompt=45, tp=1, rank=0):
    """The demo's layer at TINY's sizes on CPU, generic paths, chunks of `chunk` rows."""
    monkeypatch.setattr(demo, "DEVICE", "cpu")
    monkeypatch.setattr(demo, "FULL", model.shape(1, 16, TINY))
    monkeypatch.setattr(demo, "CHUNK", chunk)
    monkeypatch.setattr(demo, "Phases", Untimed)
    shard = demo.Shard(tp, rank)
    layer = demo.Layer(torch, shard, demo.build_layer(torch, shard), TorchOps(None), prompt, 16)
    return layer, layer.prefill(demo.prompt_states(torch, prompt))


def test_a_tiny_layer_gives_the_same_prefill_in_chunks_that_split_groups(torch, monkeypatch):
    """Chunks of 7 rows cut index groups of 4 tokens: the compressed-key writer holds their raw
    keys until the group is whole, so every chunking sees the same index cache and output."""
    whole_layer, whole = tiny_prefill(torch, monkeypatch, chunk=64)
    split_layer, split = tiny_prefill(torch, monkeypatch, chunk=7)
    groups = torch.arange(45 // 4)  # the complete ones; the last 1 token waits in the writer
    written = [layer.k_index[layer.block_table[0, groups // 4].long(), groups % 4].float()
               for layer in (whole_layer, split_layer)]
    assert torch.allclose(*written, rtol=1e-2, atol=1e-2) and written[0].std() > 0.5
    assert whole_layer.index_keys.pending.shape == split_layer.index_keys.pending.shape == (1, 128)
    assert torch.equal(whole[3], split[3])  # the routed experts
    for a, b in zip(whole[:3], split[:3]):  # out, attention, MoE
        assert a.shape == (45, 64) and torch.isfinite(a.float()).all()
        assert torch.allclose(a.float(), b.float(), rtol=2e-3, atol=2e-3)


def test_tiny_tensor_parallel_ranks_sum_to_the_whole(torch, monkeypatch):
    """Two ranks' attention and MoE parts (before their all-reduce) add up to TP 1's."""
    _, one = tiny_prefill(torch, monkeypatch, chunk=64)
    ranks = [tiny_prefill(torch, monkeypatch, chunk=64, tp=2, rank=r)[1] for r in range(2)]
    attn = ranks[0][1].float() + ranks[1][1].float()
    assert torch.allclose(attn, one[1].float(), rtol=1e-2, atol=1e-2)


def test_a_gated_comparison_fails_past_the_gate_and_an_ungated_one_only_reports(torch):
    g = torch.Generator().manual_seed(5)
    attn, moe = torch.randn(64, 8, generator=g), torch.randn(64, 8, generator=g)
    ids = torch.randint(0, 16, (64, 4), generator=g)
    noisy = (attn + 1e-2 * torch.randn(64, 8, generator=g), moe)  # attention rel-L2 about 1e-2
    ok, line = demo.compare("near", (attn, moe), (attn, moe), ids, ids.flip(-1))
    assert ok and line.endswith(": match") and "(gate 0.002)" in line, line
    ok, line = demo.compare("far", noisy, (attn, moe), ids, ids)
    assert not ok and line.endswith(": MISMATCH"), line
    ok, line = demo.compare("far", noisy, (attn, moe), ids, ids, gated=False)
    assert ok and line.endswith(demo.UNGATED) and "gate 0" not in line, line


def test_gpu_demo_tp1_runs_both_paths(cuda_torch, library, run_module):
    code, output = run_module("demo", "--prompts", "1500", "--reps", "1", "--plot", "",
                              "--library", library)
    assert code == 0, output
    assert "plugin     1    1500" in output and "generic    1    1500" in output, output

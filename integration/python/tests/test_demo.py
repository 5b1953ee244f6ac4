"""The prefill demo's tensor-parallel split (sm70ops.demo) and its command line; the layer
itself runs on a GPU (`python -m sm70ops demo`, test_gpu_demo below)."""
import pytest

from sm70ops import demo


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_shards_cover_every_head_and_slice_once(tp):
    assert demo.tp_sizes_ok(tp) is None
    m = demo.FULL
    heads, inter = [], 0
    for rank in range(tp):
        s = demo.Shard(tp, rank)
        heads += range(s.q0, s.q0 + s.hq)
        group = m.q_heads // m.kv_heads
        assert all(s.kv0 <= h // group < s.kv0 + s.hkv for h in range(s.q0, s.q0 + s.hq))
        inter += s.inter
    assert heads == list(range(m.q_heads)) and inter == m.expert_inter


@pytest.mark.parametrize("tp", [3, 5, 32])
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


def test_gpu_demo_tp1_runs_both_paths(cuda_torch, library, run_module):
    code, output = run_module("demo", "--prompts", "1500", "--reps", "1", "--plot", "",
                              "--library", library)
    assert code == 0, output
    assert "plugin     1    1500" in output and "generic    1    1500" in output, output

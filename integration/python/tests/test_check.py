"""`check` from Python against the C tool, the environment rollback, and `python -m sm70ops`."""
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import package_env
from sm70ops import __main__ as cli
from sm70ops import _abi, model

OP_NAMES = ("qsa_index", "qsa_attn", "nvfp4_moe", "nvfp4_moe_prepare")


def table_rows(output):
    """The table of a `check` output: [[op, TP, page, prefill, work, decision, route, workspace,
    reason, message]] (cells are two or more spaces apart; the message may be empty)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op "))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = re.split(r" {2,}", line.rstrip())
        rows.append(cells + [""] * (len(cli.HEADER) - len(cells)))
    return rows


def summary_line(output):
    return next(line for line in output.splitlines() if re.match(r"^\d+ of \d+ accepted", line))


def c_tool_check(c_cli, library, *args):
    done = subprocess.run([c_cli, "--library", library, "check", "--cc", "70", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def c_check(c_cli, library):
    return c_tool_check(c_cli, library)


PLAN_ROWS = len(model.plan())


def test_the_plan_covers_every_tp_and_page_size_once():
    """The index once per page size (replicated on every rank), the attention per TP and page
    size, the MoE per TP (no pages; a prompt's last chunk is 8192 rows at every length): 48."""
    count = {op: sum(case.op == op for case in model.plan()) for op in model.OPS}
    prefills, tps, pages = (len(model.PREFILL_LENGTHS), len(model.TP_SIZES),
                            len(model.PAGE_SIZES))
    assert count == {_abi.Op.QSA_INDEX: pages * prefills, _abi.Op.QSA_ATTN: tps * pages * prefills,
                     _abi.Op.NVFP4_MOE: tps, _abi.Op.NVFP4_MOE_PREPARE: tps}
    assert len(set(model.plan())) == PLAN_ROWS == 48
    assert len(model.plan(tp=4)) == 2 * 4 + 2 * 4 + 2 and len(model.plan(page_size=16)) == 28


def test_the_model_per_rank():
    for tp, q_heads, kv_heads, inter in ((1, 24, 2, 640), (2, 12, 1, 320), (4, 6, 1, 160),
                                         (8, 3, 1, 80)):
        m = model.shape(tp, 16)
        assert (m.q_heads, m.kv_heads, m.expert_inter) == (q_heads, kv_heads, inter)
        assert (m.hidden, m.head_dim, m.compress_ratio, m.index_topk) == (2560, 256, 4, 2048)
        assert not m.index_weighted and m.page_size == 16


def test_the_model_descriptors():
    index = model.model_call("qsa_index", 131072, page_size=16)[0].struct
    assert index.compress_ratio == 4 and not index.weights
    assert [index.k_index.contents.shape[i] for i in range(3)] == [8192, 4, 128]
    assert index.sel_blocks.contents.shape[1] == 513  # 512 groups and the tail's page
    attn = model.model_call("qsa_attn", 262144, tp=4)[0].struct
    assert [attn.gate.contents.shape[i] for i in range(3)] == [8192, 6, 256]
    assert [attn.k_cache.contents.shape[i] for i in range(4)] == [4096, 64, 1, 256]


def test_c_table_parses(c_check):
    rows = table_rows(c_check)
    assert len(rows) == PLAN_ROWS
    assert {r[0] for r in rows} == set(OP_NAMES)


def test_api_decisions_equal_the_c_tool(plugin, c_check):
    with plugin.context(compute_capability=70) as ctx:
        found = cli.decision_rows(ctx, device=0)
    for (case, work, d), c_row in zip(found, table_rows(c_check), strict=True):
        assert c_row[:5] == [*cli.plan_cells(case), work]
        assert c_row[5] == ("accept" if d.accepted else "decline")
        assert c_row[6] == (d.route if d.accepted else "-")
        assert c_row[7] == (cli.format_bytes(d.workspace_bytes) if d.accepted else "-")
        assert c_row[8:] == [d.reason, d.message]


@pytest.mark.parametrize("only", [[], ["--tp", "4"], ["--page", "16"], ["--tp", "1", "--page",
                                                                            "64"]])
def test_python_check_prints_the_c_table(library, c_cli, run_module, only):
    c_output = c_tool_check(c_cli, library, *only)
    code, output = run_module("check", "--cc", "70", *only, "--library", library)
    assert code == 0, output
    assert table_rows(output) == table_rows(c_output)
    assert summary_line(output) == summary_line(c_output)
    assert [line for line in output.splitlines() if line.startswith("shapes:")] == [
        line for line in c_output.splitlines() if line.startswith("shapes:")]
    assert "compute capability 7.0 (--cc, CUDA not asked)" in output
    assert "Qwen3.8-Flash-Next per rank at TP" in output


def test_python_check_shows_the_plugin_warning_like_the_c_tool(plugin, library, c_cli, run_module):
    """A plan for a V100 under a build without sm_70 code is explained by the plugin's warning,
    which both tools print; a build that carries sm_70 has none to print."""
    warning = "none for compute capability 7.0"
    c_done = subprocess.run([c_cli, "--library", library, "check", "--cc", "70"],
                            capture_output=True, text=True, timeout=60, check=True)
    code, output = run_module("check", "--cc", "70", "--library", library)
    assert code == 0, output
    expected = "sm_70" not in plugin.identity().sm_list
    assert (warning in c_done.stderr) == expected, c_done.stderr
    assert ("[warn] sm70ops: this build carries code for" in output) == expected, output
    assert (warning in output) == expected, output


def _reasons_in_subprocess(library, env):
    """Reason of every model-shape check, from a fresh interpreter with `env` added."""
    script = textwrap.dedent(f"""
        from sm70ops import Plugin, model
        with Plugin({library!r}) as p, p.context(compute_capability=70) as ctx:
            for case in model.plan():
                print(case.op.name, ctx.check(case.op, model.case_call(case)[0]).reason)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**package_env(), **env}, check=True)
    return [line.split() for line in done.stdout.splitlines()]


@pytest.mark.parametrize("value", ["1", "yes", "malformed"])
def test_sm70ops_disable_rolls_every_op_back(library, value):
    reasons = _reasons_in_subprocess(library, {"SM70OPS_DISABLE": value})
    assert len(reasons) == PLAN_ROWS
    assert {reason for _, reason in reasons} == {"PLUGIN_DISABLED"}


def test_per_op_switches(library):
    reasons = _reasons_in_subprocess(library, {"SM70OPS_DISABLE_NVFP4_MOE": "1",
                                               "VLLM_SM70_QSA_INDEXER_CUBLAS": "0"})
    disabled = {op for op, reason in reasons if reason == "OP_DISABLED"}
    assert disabled == {"QSA_INDEX", "NVFP4_MOE", "NVFP4_MOE_PREPARE"}
    assert all(reason != "OP_DISABLED" for op, reason in reasons if op == "QSA_ATTN")


def test_disabled_check_from_the_command_line(library, run_module):
    code, output = run_module("--library", library, "check", "--cc", "70",
                              env={"SM70OPS_DISABLE": "1"})
    assert code == 0
    assert summary_line(output) == (f"0 of {PLAN_ROWS} accepted: {PLAN_ROWS} declined "
                                    f"(PLUGIN_DISABLED {PLAN_ROWS})")


def test_check_without_a_gpu_says_no_cuda_device(plugin, library, run_module):
    if plugin.device_count() > 0:
        pytest.skip("a CUDA device is present: the no-device table does not apply")
    code, output = run_module("check", env={"SM70OPS_LIBRARY": library})
    assert code == 0, output
    for op in OP_NAMES:
        assert re.search(rf"^{op} ", output, re.M), op
    rows = table_rows(output)
    assert all(r[8] == "NO_DEVICE" and r[9] == "no CUDA device" for r in rows)
    assert "arch:    as the CUDA runtime reports it" in output


def test_bench_without_a_gpu_exits_2(run_module, library, no_cuda_gpu):
    code, output = run_module("bench", "qsa_index", "--library", library)
    assert code == 2 and "needs a CUDA GPU" in output


def test_info(library, run_module):
    code, output = run_module("info", "--library", library)
    assert code == 0
    assert re.search(r"^name: +sm70ops \d+\.\d+\.\d+$", output, re.M)
    assert re.search(r"^ABI: +plugin 1\.\d+, host 1\.2, negotiated 1\.\d+$", output, re.M)


@pytest.mark.parametrize("args, code", [(["frobnicate"], 64), (["check", "--tp", "3"], 64),
                                        (["check", "--page", "32"], 64),
                                        (["bench", "no_such_op"], 64),
                                        (["--library", "/nonexistent/libsm70ops.so", "info"], 1)])
def test_exit_codes(run_module, args, code):
    assert run_module(*args)[0] == code


def test_every_case_of_the_model_is_accepted_on_a_v100(library, run_module):
    """Issue 20's target: the model at TP 1, 2, 4 and 8 with 16- and 64-token pages, every op
    and prompt length, accepted on a V100 (and on the H200 stand-in)."""
    for cc in ("70", "90"):  # a V100's 96 KB and an H200's 227 KB hold every kernel
        code, output = run_module("--library", library, "check", "--cc", cc,
                                  env={"SM70OPS_ALLOW_ARCH": "90"})
        declined = [row for row in table_rows(output) if row[5] != "accept"]
        assert code == 0 and not declined, "\n".join("  ".join(row) for row in declined)
        assert summary_line(output) == f"{PLAN_ROWS} of {PLAN_ROWS} accepted", output


def test_an_allowed_gpu_without_the_shared_memory_declines(library, run_module):
    """The attention's head-dim-256 tile and the MoE's GEMM tile are sized for a V100's 96 KB of
    shared memory per block: a T4 (7.5, 64 KB) allow-listed for validation gets ARCH and the
    numbers, not a launch that fails; the index's largest blocks fit and stay accepted."""
    code, output = run_module("--library", library, "check", "--cc", "75",
                              env={"SM70OPS_ALLOW_ARCH": "75"})
    assert code == 0, output
    rows = table_rows(output)
    big = ("qsa_attn", "nvfp4_moe")  # op 4, the repack, needs no shared memory
    declined = sum(row[0] in big for row in rows)
    assert summary_line(output).startswith(f"{PLAN_ROWS - declined} of {PLAN_ROWS} accepted"), \
        output
    for op, *_, decision, _, _, reason, message in rows:
        if op in big:
            assert (decision, reason) == ("decline", "ARCH"), (op, message)
            assert re.fullmatch(rf"{op} needs \d+ KB of shared memory per block, compute "
                                r"capability 7\.5 gives 64 KB", message), message
        else:
            assert decision == "accept", (op, reason, message)

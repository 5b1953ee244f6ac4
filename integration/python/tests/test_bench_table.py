"""The benches' shared plugin-vs-generic table (sm70ops.bench.print_comparison), with and without
the floor columns, on made-up rows: it runs without torch or a GPU."""
import types

from sm70ops.bench import Work, ceiling_for, floor_columns, print_comparison


def row(key, plugin_ms, generic_ms, err, note=""):
    return types.SimpleNamespace(key=key, plugin_ms=plugin_ms, generic_ms=generic_ms, err=err,
                                 note=note)


def test_table_counts_rows_past_the_limit_and_shows_declines(capsys):
    rows = [row(8192, 1.5, 30.0, 1e-4), row(32768, 2.0, 20.0, 9e-3),
            row(131072, None, 40.0, None, "ARCH: no SASS for this GPU")]
    failed = print_comparison({"prompt": (8, lambda r: r.key)}, {"rel-L2": (8, lambda r: r.err)},
                              rows, 2e-3)
    lines = capsys.readouterr().out.splitlines()
    assert failed == 1
    assert lines[0].split() == ["prompt", "plugin", "ms", "generic", "ms", "speed-up", "rel-L2"]
    assert lines[1].split() == ["8192", "1.500", "30.000", "20.00x", "1.00e-04"]
    assert lines[2].split() == ["32768", "2.000", "20.000", "10.00x", "9.00e-03"]
    assert lines[3].split()[:3] == ["131072", "-", "40.000"]
    assert lines[3].endswith("declined: ARCH: no SASS for this GPU")


def test_text_checks_show_as_text_and_count_nothing_without_a_limit(capsys):
    rows = [row(1024, 0.5, 2.0, "same"), row(2048, 0.25, 4.0, "3 near-tie rows, 1 MISMATCH"),
            row(4096, None, 8.0, None, "ARCH: no SASS for this GPU")]
    failed = print_comparison({"keys": (8, lambda r: r.key)},
                              {"topk_idx check": (14, lambda r: r.err)}, rows)
    lines = capsys.readouterr().out.splitlines()
    assert failed == 0
    assert lines[0].split()[-2:] == ["topk_idx", "check"]
    assert lines[1].split() == ["1024", "0.500", "2.000", "4.00x", "same"]
    assert lines[2].endswith("16.00x 3 near-tie rows, 1 MISMATCH")
    assert lines[3].split()[:3] == ["4096", "-", "8.000"]
    assert lines[3].endswith("declined: ARCH: no SASS for this GPU")


def test_floor_columns_follow_the_checks(capsys):
    """A bench's checks then bench.floor_columns: the limit still reads the first check."""
    rows = [row(8192, 0.2, 2.0, 1e-4), row(32768, 0.4, 8.0, 9e-3),
            row(131072, None, 40.0, None, "ARCH: no SASS for this GPU")]
    for r in rows:
        r.work = Work(flops=64.5e9)
    failed = print_comparison({"prompt": (8, lambda r: r.key)},
                              {"rel-L2": (8, lambda r: r.err), **floor_columns(ceiling_for(90, "NVIDIA H200"))},
                              rows, 2e-3)
    lines = capsys.readouterr().out.splitlines()
    assert failed == 1
    assert lines[0].endswith("rel-L2  TFLOP/s  floor ms  floor%  V100 floor ms")
    assert lines[1].split() == ["8192", "0.200", "2.000", "10.00x", "1.00e-04", "322.5", "0.100",
                                "50%", "0.516"]
    assert lines[2].split()[-4:] == ["161.2", "0.100", "25%", "0.516"]
    assert lines[3].endswith("declined: ARCH: no SASS for this GPU")

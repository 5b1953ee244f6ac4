"""Plugin and Context against the built libsm70ops.so: loading, identity, ABI negotiation,
contexts, check and execute's error path. No GPU needed (contexts plan for compute capability
70 and touch no CUDA)."""
import os
import pathlib

import pytest

import sm70ops
from conftest import PYTHON_ROOT, installed_package
from sm70ops import _abi, model
from sm70ops import plugin as plugin_module
from sm70ops.plugin import Plugin, Sm70opsError


def test_loads_and_negotiates_1_2(plugin):
    assert plugin.abi_major == 1 and plugin.abi_minor == 2
    assert os.path.isfile(plugin.path) and plugin.path.endswith("libsm70ops.so")


def test_the_package_under_test():
    """The source tree's package, which bundles no plugin; or (SM70OPS_TEST_INSTALLED=1) the
    installed wheel's, outside the source tree, with its two plugins."""
    here = pathlib.Path(sm70ops.__file__).resolve().parent
    bundled = [pathlib.Path(p).parent.name for p in plugin_module.bundled_libraries()]
    if installed_package():
        assert PYTHON_ROOT not in here.parents
        assert bundled == ["v100", "validation"]
    else:
        assert here == PYTHON_ROOT / "sm70ops"
        assert bundled == []


@pytest.mark.parametrize("cc, build", [(70, 0), (75, 1), (90, 1), (80, 0), (0, 0)])
def test_the_bundled_build_that_fits_a_device(cc, build):
    """SASS for the device's capability decides; with none (no device, an A100), the V100 build,
    whose check plans for a V100 and whose ops decline the device as ARCH."""
    assert plugin_module.fitting_build(cc, ["sm_70", "sm_75,sm_90"]) == build


def test_an_installed_package_loads_the_bundled_plugin_unless_told(monkeypatch):
    if not installed_package():
        pytest.skip("the source tree bundles no plugin (tools/wheel_test.sh runs this)")
    v100, validation = plugin_module.bundled_libraries()
    monkeypatch.delenv("SM70OPS_LIBRARY", raising=False)
    with Plugin() as p:
        assert p.path == plugin_module.bundled_library()
        assert p.identity().sm_list == ("sm_70" if p.path == v100 else "sm_75,sm_90")
    monkeypatch.setenv("SM70OPS_LIBRARY", validation)
    with Plugin() as p:
        assert p.path == validation and p.identity().sm_list == "sm_75,sm_90"


def test_path_none_reads_the_environment(library, monkeypatch):
    monkeypatch.setenv("SM70OPS_LIBRARY", library)
    with Plugin() as p:
        assert os.path.samefile(p.path, library)


def test_identity(plugin):
    ident = plugin.identity()
    assert ident.name == "sm70ops"
    assert ident.version == _abi.VERSION
    assert (ident.abi_major, ident.abi_minor) == (_abi.ABI_MAJOR, _abi.ABI_MINOR)
    assert ident.dlpack_version == _abi.DLPACK_VERSION
    assert ident.cuda_version >= 11000 and ident.cuda_version % 10 == 0
    assert ident.git_revision and ident.sm_list.startswith("sm_")


def test_a_newer_host_minor_negotiates_down(library):
    with Plugin(library, abi=(_abi.ABI_MAJOR, _abi.ABI_MINOR + 7)) as p:
        assert p.abi_minor == p.identity().abi_minor


@pytest.mark.parametrize("major", [0, 2])
def test_another_major_is_refused(library, major):
    with pytest.raises(Sm70opsError) as e:
        Plugin(library, abi=(major, 0))
    assert e.value.status_name == "SM70OPS_ERR_ABI_MISMATCH"
    assert e.value.status == _abi.Status.ERR_ABI_MISMATCH


def test_a_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(Sm70opsError) as e:
        Plugin(str(tmp_path / "libsm70ops.so"))
    assert e.value.status_name == "SM70OPS_ERR_INVALID_ARGUMENT"
    assert "cannot load the sm70ops plugin" in e.value.last_error


def test_a_library_without_the_entry_point_is_refused():
    with pytest.raises(Sm70opsError) as e:
        Plugin("libc.so.6")
    assert "not an sm70ops plugin" in e.value.last_error


def test_names(plugin):
    assert plugin.status_name(_abi.Status.ERR_CUDA) == "SM70OPS_ERR_CUDA"
    assert plugin.status_name(99) == "SM70OPS_STATUS_UNKNOWN"
    assert plugin.status_string(_abi.Status.OK)
    for reason in _abi.Reason:
        assert plugin.reason_name(reason) == reason.name
    assert plugin.reason_name(99) == "UNKNOWN_REASON"


def test_device_count_is_not_an_error(plugin):
    count = plugin.device_count()
    assert count >= 0
    if count:
        info = plugin.device_info(0)
        assert info.ordinal == 0 and info.compute_capability > 0 and info.name


def test_context_logs_through_the_callback(plugin):
    messages = []
    with plugin.context(compute_capability=70, log=lambda level, m: messages.append((level, m)),
                        log_level=_abi.LogLevel.DEBUG):
        pass
    assert any("compute capability 7.0" in m for _, m in messages)
    assert all(isinstance(level, _abi.LogLevel) for level, _ in messages)


def test_a_raising_log_callback_does_not_escape(plugin, monkeypatch):
    calls = []

    def bad_log(level, message):
        calls.append(message)
        raise RuntimeError("host bug")

    monkeypatch.setenv("SM70OPS_DISABLE_QSA_ATTN", "1")  # read, and logged, by context_create
    with plugin.context(compute_capability=70, log=bad_log) as ctx:
        args, _ = model.model_call("qsa_attn", 8192)
        assert ctx.check("qsa_attn", args).reason == "OP_DISABLED"
    assert any("SM70OPS_DISABLE_QSA_ATTN" in m for m in calls)


def test_check_qsa_index_at_sm70_accepts(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call(_abi.Op.QSA_INDEX, 32768)
        d = ctx.check(_abi.Op.QSA_INDEX, args)
        assert d.accepted and d.reason == "ACCEPTED" and d.route == "qsa_index_wmma"
        assert d.workspace_bytes > 0 and d.message == ""
        assert ctx.workspace_size("qsa_index", args) == d.workspace_bytes


def test_check_accepts_op_names_ids_and_raw_structs(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_attn", 8192)
        by_name = ctx.check("qsa_attn", args)
        assert ctx.check(2, args.struct) == by_name == ctx.check(_abi.Op.QSA_ATTN, args.address)


def test_check_declines_unknown_ops_and_null_args(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_attn", 8192)
        assert ctx.check(77, args.struct).reason == "UNKNOWN_OP"
        assert ctx.check("qsa_attn", None).reason == "INVALID_ARGUMENT"


def test_check_refuses_mismatched_args(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_attn", 8192)
        with pytest.raises(TypeError):
            ctx.check("qsa_index", args)
        with pytest.raises(ValueError):
            ctx.check("no_such_op", args)


def test_a_struct_size_the_plugin_does_not_know_is_declined(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_index", 8192)
        args.struct.struct_size = 8
        assert ctx.check("qsa_index", args).reason == "STRUCT_SIZE"


@pytest.mark.parametrize("op", ["qsa_index", "qsa_attn"])
def test_a_1_0_host_keeps_its_behaviour(plugin, op):
    """A 1.0-sized struct (version 1's shapes: a key per token, weights given, no gate) is
    decided as its 1.1-sized twin; without weights it is malformed, as 1.0 said."""
    size_1_0 = {"qsa_index": _abi.QSA_INDEX_ARGS_SIZE_1_0,
                "qsa_attn": _abi.QSA_ATTN_ARGS_SIZE_1_0}[op]
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call(op, 8192, model=model.V1)
        newer = ctx.check(op, args)
        args.struct.struct_size = size_1_0
        assert ctx.check(op, args) == newer
        if op == "qsa_index":
            args.struct.weights = None
            assert ctx.check(op, args).reason == "INVALID_ARGUMENT"


def test_workspace_size_of_a_decline_raises(plugin, monkeypatch):
    monkeypatch.setenv("SM70OPS_DISABLE_QSA_ATTN", "1")
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_attn", 8192)
        with pytest.raises(Sm70opsError) as e:
            ctx.workspace_size("qsa_attn", args)
        assert e.value.status_name == "SM70OPS_ERR_UNSUPPORTED"


def test_execute_raises_with_the_plugins_last_error(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_index", 8192)  # descriptors only: data is NULL
        with pytest.raises(Sm70opsError) as e:
            ctx.execute("qsa_index", args)
        assert e.value.status_name == "SM70OPS_ERR_INVALID_ARGUMENT"
        assert "data is NULL" in e.value.last_error == plugin.last_error()


def test_execute_needs_workspace_bytes_with_a_raw_pointer(plugin):
    with plugin.context(compute_capability=70) as ctx:
        args, _ = model.model_call("qsa_index", 8192)
        with pytest.raises(ValueError):
            ctx.execute("qsa_index", args, workspace=0x1000)


def test_close_is_idempotent_and_closed_contexts_refuse(library):
    p = Plugin(library)
    ctx = p.context(compute_capability=70)
    args, _ = model.model_call("qsa_attn", 8192)
    ctx.close()
    ctx.close()
    with pytest.raises(Sm70opsError):
        ctx.check("qsa_attn", args)
    open_ctx = p.context(compute_capability=70)
    p.close()  # closes the contexts still open
    with pytest.raises(Sm70opsError):
        open_ctx.check("qsa_attn", args)
    with pytest.raises(Sm70opsError):
        p.identity()


def test_package_exports():
    assert sm70ops.Plugin is Plugin and sm70ops.Op.QSA_INDEX == 1

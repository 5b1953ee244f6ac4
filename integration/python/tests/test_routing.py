"""sm70ops.routing (no torch): each CUDA device's context, created by its first call, the host's
register / unregister / reset over it, and the fallback log, against the built plugin. On a
machine without a GPU the created context is the plugin's no-device context (every op declines
NO_DEVICE); where one is, the real device's."""
import collections
import logging
import threading

import pytest

from sm70ops import model, routing


@pytest.fixture
def fresh(library, monkeypatch):
    """routing as a new process has it, with SM70OPS_LIBRARY naming the plugin under test;
    what the test changed is undone after it."""
    monkeypatch.setenv("SM70OPS_LIBRARY", library)
    saved = dict(routing._contexts), dict(routing._no_context), set(routing._logged)
    routing.reset_context()
    routing._logged.clear()
    yield routing
    routing.reset_context()
    routing._contexts.update(saved[0])
    routing._no_context.update(saved[1])
    routing._logged.clear()
    routing._logged.update(saved[2])


def messages(caplog, level=None):
    return [r.getMessage() for r in caplog.records
            if r.name == "sm70ops" and (level is None or r.levelno == level)]


def test_the_first_call_creates_the_devices_context_once(fresh, caplog):
    caplog.set_level(logging.INFO, logger="sm70ops")
    ctx, path = fresh.device_context(0)
    assert ctx is not None and path is None and ctx.device == 0
    assert fresh.device_context(0) == (ctx, None)
    # The plugin's own lines at creation (its device, or that there is none) reach the logger.
    assert any(m.startswith("sm70ops: ") and ("device 0" in m or "no CUDA device" in m)
               for m in messages(caplog))


def test_threads_racing_to_the_first_call_share_one_context(fresh):
    seen, start = [], threading.Barrier(8)

    def first_call():
        start.wait()
        seen.append(fresh.device_context(0)[0])

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(ctx is seen[0] for ctx in seen) and seen[0] is not None


def decide(ctx, op="qsa_attn"):
    """ctx's decision on `op` at the model's TP4 rank (descriptors only: no data, no torch)."""
    args, _ = model.model_call(op)
    return ctx.check(op, args)


def test_the_environment_still_rolls_back_and_the_fallback_is_logged_once(fresh, caplog,
                                                                          monkeypatch):
    monkeypatch.setenv("SM70OPS_DISABLE_QSA_ATTN", "1")
    ctx, _ = fresh.device_context(0)
    d = decide(ctx)
    assert not d.accepted and d.reason in ("OP_DISABLED", "NO_DEVICE")
    counter = collections.Counter()
    for _ in range(3):
        fresh.fall_back("qsa_attn", f"generic: {d.reason}", d.message, counter)
    assert counter == {("qsa_attn", f"generic: {d.reason}"): 3}
    warned = [m for m in messages(caplog, logging.WARNING) if "falls back" in m]
    assert warned == [f"sm70ops: qsa_attn falls back to the generic path ({d.reason}): "
                      f"{d.message}; logged once for this op and reason"]
    assert "SM70OPS_DISABLE_QSA_ATTN=1" in " ".join(messages(caplog)) + d.message


def test_each_op_and_reason_is_logged_once(fresh, caplog):
    for op, path in [("qsa_attn", "generic: ARCH"), ("qsa_attn", "generic: ARCH"),
                     ("qsa_index", "generic: ARCH"), ("qsa_attn", "generic: SHAPE")]:
        fresh.fall_back(op, path, "why")
    warned = [m for m in messages(caplog, logging.WARNING) if "falls back" in m]
    assert [m.split(": why")[0] for m in warned] == [
        "sm70ops: qsa_attn falls back to the generic path (ARCH)",
        "sm70ops: qsa_index falls back to the generic path (ARCH)",
        "sm70ops: qsa_attn falls back to the generic path (SHAPE)"]


def test_an_unloadable_plugin_is_logged_once_and_its_calls_are_generic(fresh, caplog, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("SM70OPS_LIBRARY", str(tmp_path / "libsm70ops.so"))
    for _ in range(3):
        assert fresh.device_context(0) == (None, fresh.NO_PLUGIN)
    warned = messages(caplog, logging.WARNING)
    assert len(warned) == 1 and "no plugin context for CUDA device 0" in warned[0]
    assert "cannot load the sm70ops plugin" in warned[0]


def test_the_host_rules_over_the_created_context(fresh, plugin):
    assert fresh.unregister_context(0) is None
    assert fresh.device_context(0) == (None, fresh.NO_CONTEXT)  # nothing created
    with plugin.context(compute_capability=70) as mine:
        assert fresh.register_context(mine) is None
        assert fresh.device_context(0) == (mine, None)
        assert fresh.unregister_context(0) is mine
        assert fresh.device_context(0) == (None, fresh.NO_CONTEXT)
    fresh.reset_context(0)
    created, _ = fresh.device_context(0)
    assert created is not None and created is not mine


def test_a_silenced_logger_hears_nothing(fresh, caplog):
    logging.getLogger("sm70ops").setLevel(logging.ERROR)
    try:
        fresh.fall_back("qsa_index", "generic: ARCH", "why")
    finally:
        logging.getLogger("sm70ops").setLevel(logging.NOTSET)
    assert not messages(caplog)

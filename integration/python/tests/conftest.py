"""Shared fixtures: the package under test, the plugin, the C tool, torch if present.

The package is the source tree's (put first on sys.path), or with SM70OPS_TEST_INSTALLED=1 the
one installed where the interpreter finds it (tools/wheel.sh's test of the wheel), whose plugin
is then the one it bundles."""
import os
import pathlib
import subprocess
import sys

import pytest

PYTHON_ROOT = pathlib.Path(__file__).resolve().parents[1]  # integration/python
REPO_ROOT = PYTHON_ROOT.parents[1]
INSTALLED_ENV = "SM70OPS_TEST_INSTALLED"


def installed_package():
    return os.environ.get(INSTALLED_ENV) == "1"


if not installed_package():
    sys.path.insert(0, str(PYTHON_ROOT))


def package_env(*more_paths):
    """The PYTHONPATH entry that lets a child interpreter import the package under test, and
    `more_paths`: none is needed for an installed package."""
    paths = ([] if installed_package() else [str(PYTHON_ROOT)]) + list(more_paths)
    return {"PYTHONPATH": os.pathsep.join(paths)} if paths else {}


def library_path():
    """$SM70OPS_LIBRARY (tools/test.sh sets it), else the installed package's bundled plugin or
    the last Bazel build's, else None."""
    if installed_package() and not os.environ.get("SM70OPS_LIBRARY"):
        from sm70ops.plugin import bundled_library

        return bundled_library()
    path = os.environ.get("SM70OPS_LIBRARY") or str(REPO_ROOT / "bazel-bin" / "libsm70ops.so")
    return path if os.path.isfile(path) else None


@pytest.fixture(scope="session")
def library():
    path = library_path()
    if path is None:
        pytest.skip("no built plugin: set SM70OPS_LIBRARY or run bazel build //:sm70ops")
    return path


@pytest.fixture(scope="session")
def plugin(library):
    from sm70ops import Plugin

    with Plugin(library) as p:
        yield p


@pytest.fixture(scope="session")
def c_cli(library):
    """The C tool built next to the plugin: bazel-bin/integration/cli/sm70ops."""
    path = os.environ.get("SM70OPS_CLI") or os.path.join(os.path.dirname(library), "integration",
                                                         "cli", "sm70ops")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no C sm70ops tool at {path} (bazel build //integration/cli:sm70ops)")
    return path


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="torch is not importable here (CI installs "
                               "nothing heavy)")


@pytest.fixture(scope="session")
def cuda_torch(torch):
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda is not available: GPU test")
    return torch


@pytest.fixture(scope="session")
def no_cuda_gpu():
    """For tests of what the CLIs say without a GPU: skips where torch sees one."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the command would run")


@pytest.fixture(scope="session")
def run_module():
    """run(*args, env=None): `python -m sm70ops ARGS` in a subprocess -> (exit code, output)."""

    def run(*args, env=None):
        full_env = dict(os.environ, **package_env(), **(env or {}))
        done = subprocess.run([sys.executable, "-m", "sm70ops", *args], env=full_env,
                              capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr

    return run


DEVICE_DECLINES = ("generic: ARCH", "generic: NO_DEVICE")  # the plugin does not run here at all


@pytest.fixture(scope="session")
def require_plugin(torch):
    """require(paths, ops): every op in `ops` ran on the plugin, by `paths` (library.paths' counts
    or a TorchOps's). Skips where the plugin declines the device itself (ARCH, NO_DEVICE); any
    other decline fails with its reason, so a check that regresses into declining shows."""
    from sm70ops.library import PLUGIN

    def require(paths, ops):
        declined = {k: n for k, n in paths.items() if k[0] in ops and k[1] != PLUGIN}
        if declined and all(path in DEVICE_DECLINES for _, path in declined):
            pytest.skip(f"the plugin does not run on this device: {declined}")
        assert not declined, f"the plugin declined: {declined}"
        missing = [op for op in ops if (op, PLUGIN) not in paths]
        assert not missing, f"never called: {missing}"

    return require

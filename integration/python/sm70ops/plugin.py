"""Loading libsm70ops.so from Python: ABI negotiation, identity, devices, contexts.

    with Plugin() as plugin, plugin.context(device=0) as ctx:
        d = ctx.check("qsa_index", args)          # args: an ops.py builder's result
        if d.accepted:
            ctx.execute("qsa_index", args, stream, workspace)
        else:
            my_generic_path()                       # d.reason, d.message say why

Fail-open, as abi/sm70ops.h asks of every host: Plugin() and Context() raise Sm70opsError when
the plugin cannot serve (catch it and keep the engine's own path); check() never raises for a
plugin-side failure but returns a decline saying why; execute() raises Sm70opsError.
"""
import ctypes
import dataclasses
import os
import pathlib
import weakref

from . import _abi

LIBRARY_ENV = "SM70OPS_LIBRARY"  # consulted when Plugin(path=None)
DEFAULT_LIBRARY = "libsm70ops.so"  # last resort: the dynamic loader's search
# The plugins a wheel bundles (tools/wheel.sh), lib/BUILD/libsm70ops.so: the V100 release build
# (sm_70 SASS and compute_70 PTX, CUDA 11.8), then the validation build (sm_75 and sm_90, CUDA 13).
BUNDLED_BUILDS = ("v100", "validation")

# Slots every host needs (the C host loader's list); the others are checked when called.
_NEEDED_SLOTS = ("status_name", "reason_name", "last_error", "check", "context_create",
                 "context_destroy", "execute")


class Sm70opsError(RuntimeError):
    """A status other than SM70OPS_OK. status_name is the identifier ("SM70OPS_ERR_CUDA"),
    last_error the plugin's detail of the failure (or the loader's), status the int code."""

    def __init__(self, status_name, last_error, status=None):
        super().__init__(f"{status_name}: {last_error}" if last_error else status_name)
        self.status_name = status_name
        self.last_error = last_error
        self.status = status


@dataclasses.dataclass(frozen=True)
class Decision:
    """api->check's answer. reason and route are names ("NOT_IMPLEMENTED", "qsa_index_wmma")."""

    accepted: bool
    reason: str
    route: str
    workspace_bytes: int
    output_bytes: int
    message: str
    reason_code: int = 0
    route_code: int = 0


@dataclasses.dataclass(frozen=True)
class Identity:
    name: str
    version: tuple
    abi_major: int
    abi_minor: int
    dlpack_version: int  # DLPACK_VERSION the plugin was built against (60: DLPack 0.6)
    cuda_version: int  # 1000 * major + 10 * minor
    git_revision: str
    sm_list: str


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    compute_capability: int  # major * 10 + minor
    multiprocessors: int
    global_memory_bytes: int


def _text(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def _status_label(status):
    """The identifier of a status when no table is there to ask."""
    try:
        return "SM70OPS_" + _abi.Status(status).name
    except ValueError:
        return "SM70OPS_STATUS_UNKNOWN"


def bundled_libraries():
    """Paths of the plugins bundled with this package, in BUNDLED_BUILDS order; none in a source
    tree."""
    lib = pathlib.Path(__file__).resolve().parent / "lib"
    paths = [lib / build / DEFAULT_LIBRARY for build in BUNDLED_BUILDS]
    return [str(path) for path in paths if path.is_file()]


def fitting_build(compute_capability, sm_lists):
    """Index of the build whose SASS list ("sm_75,sm_90") holds `compute_capability`, else 0 (the
    V100 release build: no device, or one no build carries code for, on which every op declines
    ARCH and check --cc plans for a V100)."""
    wanted = f"sm_{compute_capability}"
    for i, sm_list in enumerate(sm_lists):
        if wanted in sm_list.split(","):
            return i
    return 0


def bundled_library():
    """The bundled plugin that fits CUDA device 0, None when none is bundled. The V100 release
    build is asked for the device's compute capability (its CUDA 11.8 runtime loads on any
    driver that runs a V100; that is the one CUDA use here); each build's identity gives its SASS
    list, with no CUDA call."""
    paths = bundled_libraries()
    if not paths:
        return None
    try:
        with Plugin(paths[0]) as first:
            cc = first.device_info(0).compute_capability if first.device_count() else 0
        sm_lists = []
        for path in paths:
            with Plugin(path) as plugin:
                sm_lists.append(plugin.identity().sm_list)
    except Sm70opsError:
        return paths[0]
    return paths[fitting_build(cc, sm_lists)]


def _loaded_file(entry_point, fallback):
    """The file the dynamic loader opened for a plain name (dladdr), else `fallback`."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    dladdr = getattr(ctypes.CDLL(None), "dladdr", None)
    info = DlInfo()
    address = ctypes.cast(entry_point, ctypes.c_void_p)
    if dladdr is None or dladdr(address, ctypes.byref(info)) == 0 or not info.dli_fname:
        return fallback
    return os.path.realpath(_text(info.dli_fname))


class Plugin:
    """libsm70ops.so, loaded with RTLD_NOW | RTLD_LOCAL and its ABI negotiated.

    path: None reads $SM70OPS_LIBRARY (if set and non-empty), else takes the bundled plugin that
    fits the device (bundled_library: an installed wheel's), else "libsm70ops.so" through the
    dynamic loader. abi: the (major, minor) this host speaks; the negotiated minor is
    `abi_minor`. The library stays mapped after close() (ctypes never dlcloses).
    """

    def __init__(self, path=None, abi=(_abi.ABI_MAJOR, _abi.ABI_MINOR)):
        requested = path or os.environ.get(LIBRARY_ENV) or bundled_library() or DEFAULT_LIBRARY
        self._contexts = weakref.WeakSet()
        self._api = None
        lib = self._load(requested)
        entry = ctypes.cast(lib[_abi.ENTRY_POINT_NAME], _abi.sm70ops_get_api_fn)
        self.path = _loaded_file(entry, requested)
        self._lib = lib
        self._api = self._negotiate(entry, abi)
        self.abi_major = abi[0]

    @staticmethod
    def _load(requested):
        try:
            lib = ctypes.CDLL(requested, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise Sm70opsError("SM70OPS_ERR_INVALID_ARGUMENT",
                               f"cannot load the sm70ops plugin '{requested}': {e}",
                               _abi.Status.ERR_INVALID_ARGUMENT) from None
        if not hasattr(lib, _abi.ENTRY_POINT_NAME):
            raise Sm70opsError("SM70OPS_ERR_INVALID_ARGUMENT",
                               f"'{requested}' lacks {_abi.ENTRY_POINT_NAME}: not an sm70ops "
                               "plugin", _abi.Status.ERR_INVALID_ARGUMENT)
        return lib

    def _negotiate(self, entry, abi):
        major, minor = abi
        negotiated = ctypes.c_uint32(0)
        table = ctypes.POINTER(_abi.sm70ops_api)()
        status = entry(major, minor, ctypes.byref(negotiated), ctypes.byref(table))
        if status != _abi.Status.OK or not table:
            raise Sm70opsError(_status_label(status),
                               f"the plugin refuses ABI {major}.{minor} ({self.path})", status)
        api = table.contents
        if api.abi_major != major:
            raise Sm70opsError("SM70OPS_ERR_ABI_MISMATCH",
                               f"the plugin's table speaks ABI {api.abi_major}, not {major}",
                               _abi.Status.ERR_ABI_MISMATCH)
        self._api = api
        missing = [name for name in _NEEDED_SLOTS if self._slot(name) is None]
        if missing:
            raise Sm70opsError("SM70OPS_ERR_ABI_MISMATCH",
                               f"the plugin's table lacks {', '.join(missing)}",
                               _abi.Status.ERR_ABI_MISMATCH)
        self.abi_minor = negotiated.value
        return api

    def _slot(self, name):
        """The table's function `name`, or None when the table is shorter or the slot NULL."""
        field = getattr(_abi.sm70ops_api, name)
        if self._api is None or field.offset + field.size > self._api.struct_size:
            return None
        fn = getattr(self._api, name)
        return fn if fn else None

    def _call(self, name):
        fn = self._slot(name)
        if fn is None:
            detail = "the plugin is closed" if self._api is None else f"the plugin lacks {name}"
            raise Sm70opsError("SM70OPS_ERR_NOT_IMPLEMENTED", detail,
                               _abi.Status.ERR_NOT_IMPLEMENTED)
        return fn

    def _raise_for(self, status, what):
        """Sm70opsError(status_name, last_error) for a failed call; `what` stands in for an
        empty last_error."""
        if status != _abi.Status.OK:
            raise Sm70opsError(self.status_name(status), self.last_error() or what, status)

    # Names and errors -------------------------------------------------------------------------

    def status_name(self, status):
        return _text(self._call("status_name")(int(status)))

    def status_string(self, status):
        return _text(self._call("status_string")(int(status)))

    def reason_name(self, reason):
        return _text(self._call("reason_name")(int(reason)))

    def last_error(self):
        """The calling thread's last failure inside the plugin, "" if none."""
        return _text(self._call("last_error")())

    # Identity and devices ---------------------------------------------------------------------

    def identity(self):
        out = _abi.new_struct(_abi.sm70ops_identity)
        self._raise_for(self._call("get_identity")(ctypes.byref(out)), "get_identity")
        return Identity(name=_text(out.name),
                        version=(out.version_major, out.version_minor, out.version_patch),
                        abi_major=out.abi_major, abi_minor=out.abi_minor,
                        dlpack_version=out.dlpack_version, cuda_version=out.cuda_version,
                        git_revision=_text(out.git_revision), sm_list=_text(out.sm_list))

    def device_count(self):
        """CUDA devices the runtime sees; 0 (not an error) when there are none."""
        count = ctypes.c_int32(0)
        self._raise_for(self._call("device_count")(ctypes.byref(count)), "device_count")
        return count.value

    def device_info(self, ordinal):
        out = _abi.new_struct(_abi.sm70ops_device_info)
        self._raise_for(self._call("device_info")(int(ordinal), ctypes.byref(out)),
                        f"device_info({ordinal})")
        return DeviceInfo(ordinal=out.ordinal, name=_text(out.name),
                          compute_capability=out.compute_capability,
                          multiprocessors=out.multiprocessors,
                          global_memory_bytes=out.global_memory_bytes)

    # Contexts and lifetime --------------------------------------------------------------------

    def context(self, device=0, compute_capability=0, log=None, log_level=_abi.LogLevel.INFO):
        """A Context on CUDA device `device`. compute_capability 0 asks CUDA; nonzero (70: a
        V100) plans without touching CUDA. log(level, message) receives the plugin's messages
        at or below log_level (the environment settings it applied, for one)."""
        ctx = Context(self, device, compute_capability, log, log_level)
        self._contexts.add(ctx)
        return ctx

    def close(self):
        """Destroys the contexts still open; the plugin's functions are unusable afterwards."""
        for ctx in list(self._contexts):
            ctx.close()
        self._api = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _log_forwarder(log):
    """A C callback that hands (level, message) to `log`; an exception there is swallowed,
    since it cannot cross the C frames."""

    def forward(_user_data, level, message):
        try:
            known = level in _abi.LogLevel._value2member_map_
            log(_abi.LogLevel(level) if known else level, _text(message))
        except Exception:  # nothing may propagate into the plugin's C frames
            pass

    return _abi.sm70ops_log_fn(forward)


def _args_address(op, args):
    """Address of op's args struct from an ops.py result, a ctypes struct, an int or None."""
    if args is None or isinstance(args, int):
        return args
    struct = getattr(args, "struct", args)
    expected = _abi.ARGS_STRUCTS.get(op)
    if getattr(args, "op", op) != op or (expected is not None and type(struct) is not expected):
        raise TypeError(f"{type(struct).__name__} is not the args struct of op {op}")
    return ctypes.addressof(struct)


def _stream_handle(stream):
    """cudaStream_t from None (the legacy default stream), an int or a torch.cuda.Stream."""
    if stream is None or isinstance(stream, int):
        return stream
    return int(stream.cuda_stream)


def _workspace(workspace, workspace_bytes):
    """(pointer, bytes) from None, an int pointer or a tensor-like (data_ptr, numel)."""
    if workspace is None:
        return None, workspace_bytes or 0
    if isinstance(workspace, int):
        if workspace_bytes is None:
            raise ValueError("a workspace given as a pointer needs workspace_bytes")
        return workspace, workspace_bytes
    size = workspace.numel() * workspace.element_size()
    return workspace.data_ptr(), size if workspace_bytes is None else workspace_bytes


class Context:
    """One sm70ops context: immutable after creation, so check/execute are thread-safe."""

    def __init__(self, plugin, device=0, compute_capability=0, log=None,
                 log_level=_abi.LogLevel.INFO):
        self._plugin = plugin
        self._handle = None
        self._log_fn = _log_forwarder(log) if log is not None else None
        desc = _abi.new_struct(_abi.sm70ops_context_desc, device_ordinal=int(device),
                               compute_capability=int(compute_capability),
                               log_level=int(log_level))
        if self._log_fn is not None:
            desc.log_fn = self._log_fn
        handle = ctypes.c_void_p()
        status = plugin._call("context_create")(ctypes.byref(desc), ctypes.byref(handle))
        plugin._raise_for(status, f"context_create(device {device})")
        self._handle = handle
        self.device = int(device)
        self.compute_capability = int(compute_capability)

    def _live_handle(self):
        if self._handle is None:
            raise Sm70opsError("SM70OPS_ERR_INVALID_ARGUMENT", "the context is closed",
                               _abi.Status.ERR_INVALID_ARGUMENT)
        return self._handle

    def check(self, op, args):
        """The plugin's capability decision for `args` (an ops.py result or a ctypes args
        struct). A check that fails comes back as a decline whose message says why."""
        op = _abi.op_from(op)
        address = _args_address(op, args)
        out = _abi.new_struct(_abi.sm70ops_decision)
        status = self._plugin._call("check")(self._live_handle(), op, address, ctypes.byref(out))
        plugin = self._plugin
        if status != _abi.Status.OK:
            reason = _abi.Reason.INVALID_ARGUMENT
            return Decision(False, plugin.reason_name(reason), _abi.ROUTE_NAMES[_abi.Route.NONE],
                            0, 0, f"check failed: {plugin.status_name(status)}: "
                            f"{plugin.last_error()}", int(reason), 0)
        route = _abi.ROUTE_NAMES.get(out.route, "unknown")
        return Decision(bool(out.accepted), plugin.reason_name(out.reason), route,
                        out.workspace_bytes, out.output_bytes, _text(out.message), out.reason,
                        out.route)

    def workspace_size(self, op, args):
        """The workspace bytes an accepted call needs; Sm70opsError on a decline."""
        op = _abi.op_from(op)
        address = _args_address(op, args)
        size = ctypes.c_uint64(0)
        fn = self._plugin._call("workspace_size")
        self._plugin._raise_for(fn(self._live_handle(), op, address, ctypes.byref(size)),
                                "workspace_size")
        return size.value

    def execute(self, op, args, stream=None, workspace=None, workspace_bytes=None):
        """Runs `op` asynchronously on `stream` (None: the legacy default stream; with torch pass
        torch.cuda.current_stream()). workspace: None, a device tensor of at least the
        decision's workspace_bytes (256-byte aligned), or an int pointer with workspace_bytes.
        Raises Sm70opsError(status_name, last_error) when the plugin returns an error."""
        op = _abi.op_from(op)
        address = _args_address(op, args)
        pointer, size = _workspace(workspace, workspace_bytes)
        status = self._plugin._call("execute")(self._live_handle(), op, address,
                                               _stream_handle(stream), pointer, size)
        self._plugin._raise_for(status, f"execute({_abi.OP_NAMES.get(op, op)})")

    def close(self):
        """Destroys the context; a second close is a no-op."""
        if self._handle is not None and self._plugin._api is not None:
            self._plugin._call("context_destroy")(self._handle)
        self._handle = None
        self._log_fn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter shutdown ctypes may be gone already
            pass

"""Which plugin context serves each CUDA device, and what is logged when a call falls back: the
torch-free half of library.py (which re-exports register_context, unregister_context,
reset_context and paths).

A device's first call creates the plugin's context for it (Plugin(), which finds the library
as its docstring says), once, under a lock; a host's register_context or unregister_context
rules over that, and reset_context gives the device back to the default. Messages go to the
logger "sm70ops": the plugin's own (the environment it applied, the device it found), and a
WARNING the first time each op falls back for each reason in this process.
"""
import collections
import logging
import threading

from . import _abi
from .plugin import Plugin, Sm70opsError

PLUGIN = "plugin"
NO_CONTEXT = "generic: no plugin context"  # CPU tensors, unregistered devices, TorchOps(None)
NO_PLUGIN = "generic: plugin not loaded"  # the device's first call found no plugin to serve it

logger = logging.getLogger("sm70ops")
paths = collections.Counter()  # (op, PLUGIN or "generic: REASON") -> calls
_contexts = {}  # CUDA device index -> its Context; None: the generic path, _no_context says why
_no_context = {}  # CUDA device index -> the path its calls count while _contexts holds None
_logged = set()  # the (op, path) fallbacks already logged
_lock = threading.Lock()  # context creation, the two dicts and _logged
_LOG_LEVELS = {_abi.LogLevel.ERROR: logging.ERROR, _abi.LogLevel.WARN: logging.WARNING,
               _abi.LogLevel.INFO: logging.INFO, _abi.LogLevel.DEBUG: logging.DEBUG}


def register_context(ctx):
    """Makes `ctx` the context of every call on CUDA device ctx.device; returns the context it
    replaces, or None."""
    with _lock:
        previous = _contexts.get(ctx.device)
        _contexts[ctx.device] = ctx
        _no_context.pop(ctx.device, None)
    return previous


def unregister_context(device):
    """Sends CUDA device `device`'s calls to the generic path, creating no context for it;
    returns the context it had, or None."""
    with _lock:
        previous = _contexts.get(device)
        _contexts[device] = None
        _no_context[device] = NO_CONTEXT
    return previous


def reset_context(device=None):
    """Forgets what was registered, unregistered or created for `device` (every device when
    None): its next call creates the plugin's context again. A dropped context closes when its
    last reference goes."""
    with _lock:
        for d in [device] if device is not None else list(_contexts):
            _contexts.pop(d, None)
            _no_context.pop(d, None)


def _log_from_plugin(level, message):
    logger.log(_LOG_LEVELS.get(level, logging.INFO), "%s", message)


def device_context(index):
    """(context, None) for CUDA device `index`, the context created at its first call; (None,
    path) where the host unregistered the device or no plugin could serve it, `path` being what
    its calls count."""
    ctx = _contexts.get(index, False)
    if ctx is False:
        with _lock:
            if index not in _contexts:
                _create(index)
            ctx = _contexts[index]
    return (ctx, None) if ctx is not None else (None, _no_context.get(index, NO_CONTEXT))


def _create(index):
    try:
        _contexts[index] = Plugin().context(device=index, log=_log_from_plugin)
    except Sm70opsError as e:
        _contexts[index], _no_context[index] = None, NO_PLUGIN
        logger.warning("sm70ops: no plugin context for CUDA device %d, its calls take the "
                       "generic path: %s", index, e)


def count(op, path, counter=None):
    """Counts a call of `op` that took `path`, in `paths` and in `counter` when given."""
    paths[op, path] += 1
    if counter is not None:
        counter[op, path] += 1


def fall_back(op, path, why, counter=None):
    """Counts a generic call; the first of each (op, path) in this process is logged, with
    `why` (the plugin's sentence, or what left the call without a context)."""
    count(op, path, counter)
    if (op, path) in _logged:
        return
    with _lock:
        first = (op, path) not in _logged
        _logged.add((op, path))
    if first:
        logger.warning("sm70ops: %s falls back to the generic path (%s): %s; logged once for "
                       "this op and reason", op, path[len("generic: "):], why)

"""sm70ops from Python: load libsm70ops.so through its C ABI (ctypes, no compiled extension).

    plugin.Plugin      dlopen + ABI negotiation; identity, devices, contexts; an installed wheel's
                       bundled plugins (the V100 build, the validation build), one fits a device
    engines            vllm, sglang: the engines' own QSA calls as drop-ins over library
    library            torch.ops.sm70ops.*: the ops as torch custom ops (for torch.compile and
                       CUDA graphs), the plugin where it accepts, else generic; contexts per device
    torch_ops          TorchOps: an eager host's thin layer over library's ops, one context
    ops                the four ops' argument structs from torch tensors or descriptors
    dlpack             DLTensor views
    generic            the host's own torch implementations (what runs when the plugin declines)
    model              the served model's shapes, as `python -m sm70ops check` uses them
    indexer            the host's side of the model's indexer: norms, RoPE, the compressed keys
    demo               one QSA layer of the model, plugin vs generic, tensor-parallel over NCCL
    data, gates        index data generators and ops.md's near-tie gate (GPU tests, benches)
    bench              what the benches share: the roofline floor, CUDA-event medians, the table
    bench_index, ...   python -m sm70ops bench OP, one module per op; triton_index (the qsa_index
                       bench's Triton baseline)

Importing this package needs no torch; the functions that use torch import it themselves
(`import sm70ops.library` does, and registers the torch ops).
"""
from ._abi import ABI_MAJOR, ABI_MINOR, VERSION, LogLevel, Op, Reason, Route, Status
from .plugin import Context, Decision, DeviceInfo, Identity, Plugin, Sm70opsError

__version__ = ".".join(map(str, VERSION))  # the plugin release this package mirrors

__all__ = [
    "ABI_MAJOR", "ABI_MINOR", "Context", "Decision", "DeviceInfo", "Identity", "LogLevel", "Op",
    "Plugin", "Reason", "Route", "Sm70opsError", "Status",
]

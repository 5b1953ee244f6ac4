"""DLTensor views (DLPack 0.6) for the plugin's op arguments.

from_torch(t) borrows a torch tensor; describe(shape, dtype) gives a descriptor with NULL data,
enough for check() on a machine without the GPU. Either keeps the shape and stride arrays its
DLTensor points to (and the tensor it borrows) alive for as long as the view lives.
"""
import ctypes

from . import _abi

_D = _abi.DLDataTypeCode
# Dtypes by torch's names, as (DLPack code, bits): those the ops use, and the others a host may
# hand them by mistake (int64 lengths, bf16 activations), which the plugin's check then declines
# with its reason, so that a host falls back instead of failing here.
DTYPES = {
    "float16": (_D.kDLFloat, 16),
    "float32": (_D.kDLFloat, 32),
    "int32": (_D.kDLInt, 32),
    "uint8": (_D.kDLUInt, 8),
    "uint64": (_D.kDLUInt, 64),
    "bfloat16": (_D.kDLBfloat, 16),
    "float64": (_D.kDLFloat, 64),
    "int8": (_D.kDLInt, 8),
    "int16": (_D.kDLInt, 16),
    "int64": (_D.kDLInt, 64),
}
_ALIASES = {"f16": "float16", "f32": "float32", "i32": "int32", "u8": "uint8", "u64": "uint64"}
# Same-sized types whose bits the plugin reads as another: (torch dtype, DLPack dtype).
_REINTERPRETATIONS = {("int64", "uint64"), ("float8_e4m3fn", "uint8")}


def dtype_name(dtype):
    """"float16" from "float16", "f16" or a torch dtype (no torch import needed)."""
    name = str(dtype).removeprefix("torch.")
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise TypeError(f"dtype {dtype} has no sm70ops mapping; known: {', '.join(DTYPES)}")
    return name


def dense_strides(shape):
    """Row-major strides in elements."""
    strides, stride = [], 1
    for size in reversed(shape):
        strides.append(stride)
        stride *= size
    return tuple(reversed(strides))


class TensorView:
    """A DLTensor plus everything it points to. `pointer` is what an args struct stores."""

    def __init__(self, data, shape, strides, dtype, device_type, device_id, owner=None):
        shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
        if len(shape) != len(strides):
            raise ValueError(f"shape {shape} and strides {strides} differ in rank")
        code, bits = DTYPES[dtype_name(dtype)]
        rank = len(shape)
        self._shape = (ctypes.c_int64 * max(rank, 1))(*shape)
        self._strides = (ctypes.c_int64 * max(rank, 1))(*strides)
        self.owner = owner  # the borrowed tensor: its memory must outlive the call
        self.dtype = dtype_name(dtype)
        self.tensor = _abi.DLTensor(
            data=data,
            device=_abi.DLDevice(int(device_type), int(device_id)),
            ndim=rank,
            dtype=_abi.DLDataType(int(code), bits, 1),
            shape=ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
            strides=ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64)),
            byte_offset=0,
        )

    @property
    def shape(self):
        return tuple(self._shape[: self.tensor.ndim])

    @property
    def strides(self):
        return tuple(self._strides[: self.tensor.ndim])

    @property
    def pointer(self):
        return ctypes.pointer(self.tensor)


def describe(shape, dtype, device=0, strides=None, device_type=_abi.DLDeviceType.kDLCUDA):
    """A view with NULL data: dense row-major strides unless `strides` is given."""
    shape = tuple(shape)
    return TensorView(None, shape, strides if strides is not None else dense_strides(shape),
                      dtype, device_type, device)


def from_torch(t, dtype=None):
    """A view of torch tensor `t`: data_ptr(), its strides in elements, byte_offset 0.

    dtype overrides the DLPack type for a same-sized reinterpretation: "uint64" for sel_mask
    held as int64 (torch < 2.3 has no uint64), "uint8" for float8_e4m3fn scales.
    """
    source = str(t.dtype).removeprefix("torch.")
    name = dtype_name(dtype if dtype is not None else source)
    if source != name and (source, name) not in _REINTERPRETATIONS:
        raise TypeError(f"a {t.dtype} tensor cannot be viewed as {name}")
    if t.device.type == "cuda":
        device_type = _abi.DLDeviceType.kDLCUDA
        device_id = t.device.index if t.device.index is not None else _current_cuda_device()
    elif t.device.type == "cpu":
        device_type, device_id = _abi.DLDeviceType.kDLCPU, 0
    else:
        raise TypeError(f"tensors on {t.device} have no DLPack view here")
    return TensorView(t.data_ptr() or None, t.shape, t.stride(), name, device_type, device_id,
                      owner=t)


def _current_cuda_device():
    import torch

    return torch.cuda.current_device()


def uint64_dtype():
    """torch.uint64 where torch has it (2.3+), else torch.int64 holding the same bits."""
    import torch

    return getattr(torch, "uint64", torch.int64)


def as_view(x, dtype=None):
    """None, a TensorView (returned as is) or a torch tensor (from_torch)."""
    if x is None or isinstance(x, TensorView):
        return x
    return from_torch(x, dtype)

"""ctypes mirrors of abi/sm70ops.h (ABI 1.2) and of the DLPack 0.6 structs it uses.

Field order and types follow the header exactly; tests/test_abi_layout.py checks every size and
offset against tests/abi/abi_layout_golden.inc, the layout the C conformance suite pins.
Enums travel as int32_t, so every enum field here is c_int32 and every enum an IntEnum.
"""
import ctypes
import enum

ABI_MAJOR = 1
ABI_MINOR = 2
VERSION = (0, 3, 0)  # SM70OPS_VERSION_MAJOR/MINOR/PATCH of the header this mirrors
ENTRY_POINT_NAME = "sm70ops_get_api"
MESSAGE_BYTES = 256
STATUS_COUNT = 10
REASON_COUNT = 13
DLPACK_VERSION = 60  # DLPack 0.6


class Status(enum.IntEnum):
    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_ABI_MISMATCH = 2
    ERR_UNSUPPORTED = 3
    ERR_NOT_IMPLEMENTED = 4
    ERR_WORKSPACE_TOO_SMALL = 5
    ERR_NO_DEVICE = 6
    ERR_CUDA = 7
    ERR_INDEX_OUT_OF_RANGE = 8
    ERR_INTERNAL = 9


class Op(enum.IntEnum):
    QSA_INDEX = 1
    QSA_ATTN = 2
    NVFP4_MOE = 3
    NVFP4_MOE_PREPARE = 4


class Reason(enum.IntEnum):
    ACCEPTED = 0
    PLUGIN_DISABLED = 1
    OP_DISABLED = 2
    NO_DEVICE = 3
    ARCH = 4
    UNKNOWN_OP = 5
    STRUCT_SIZE = 6
    INVALID_ARGUMENT = 7
    UNSUPPORTED_DTYPE = 8
    UNSUPPORTED_SHAPE = 9
    BELOW_CROSSOVER = 10
    NOT_IMPLEMENTED = 11
    TOO_LARGE = 12


class Route(enum.IntEnum):
    NONE = 0
    QSA_INDEX_WMMA = 1
    QSA_ATTN_WMMA = 2
    NVFP4_MOE_WMMA = 3
    NVFP4_MOE_PREPARE = 4


class LogLevel(enum.IntEnum):
    ERROR = 0
    WARN = 1
    INFO = 2
    DEBUG = 3


# DLPack 0.6 (dlpack.h): DLDeviceType is a C enum (int), DLDataType's code a uint8_t.
class DLDeviceType(enum.IntEnum):
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13


class DLDataTypeCode(enum.IntEnum):
    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_TensorPtr = ctypes.POINTER(DLTensor)


class sm70ops_decision(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("accepted", ctypes.c_int32),
        ("reason", ctypes.c_int32),
        ("route", ctypes.c_int32),
        ("workspace_bytes", ctypes.c_uint64),
        ("output_bytes", ctypes.c_uint64),
        ("message", ctypes.c_char * MESSAGE_BYTES),
    ]


# void (*)(void *user_data, sm70ops_log_level level, const char *message)
sm70ops_log_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p)


class sm70ops_context_desc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("device_ordinal", ctypes.c_int32),
        ("compute_capability", ctypes.c_int32),
        ("log_level", ctypes.c_int32),
        ("log_fn", sm70ops_log_fn),
        ("log_user_data", ctypes.c_void_p),
    ]


class sm70ops_identity(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("abi_major", ctypes.c_uint32),
        ("abi_minor", ctypes.c_uint32),
        ("version_major", ctypes.c_uint32),
        ("version_minor", ctypes.c_uint32),
        ("version_patch", ctypes.c_uint32),
        ("dlpack_version", ctypes.c_uint32),
        ("cuda_version", ctypes.c_uint32),
        ("name", ctypes.c_char * 32),
        ("git_revision", ctypes.c_char * 48),
        ("sm_list", ctypes.c_char * 64),
    ]


class sm70ops_device_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("ordinal", ctypes.c_int32),
        ("compute_capability", ctypes.c_int32),
        ("multiprocessors", ctypes.c_int32),
        ("global_memory_bytes", ctypes.c_uint64),
        ("name", ctypes.c_char * 96),
    ]


class sm70ops_qsa_index_args(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("topk", ctypes.c_int32),
        ("max_seq_len", ctypes.c_int32),
        ("max_query_len", ctypes.c_int32),
        ("max_workspace_bytes", ctypes.c_uint64),
        ("q", _TensorPtr),
        ("weights", _TensorPtr),
        ("k_index", _TensorPtr),
        ("query_start_loc", _TensorPtr),
        ("seq_lens", _TensorPtr),
        ("block_table", _TensorPtr),
        ("topk_idx", _TensorPtr),
        ("sel_blocks", _TensorPtr),
        ("sel_mask", _TensorPtr),
        ("sel_count", _TensorPtr),
        # ABI 1.1
        ("compress_ratio", ctypes.c_int32),
        ("reserved1", ctypes.c_uint32),
    ]


class sm70ops_qsa_attn_args(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("sm_scale", ctypes.c_float),
        ("max_seq_len", ctypes.c_int32),
        ("max_query_len", ctypes.c_int32),
        ("q", _TensorPtr),
        ("k_cache", _TensorPtr),
        ("v_cache", _TensorPtr),
        ("query_start_loc", _TensorPtr),
        ("seq_lens", _TensorPtr),
        ("block_table", _TensorPtr),
        ("sel_blocks", _TensorPtr),
        ("sel_mask", _TensorPtr),
        ("sel_count", _TensorPtr),
        ("out", _TensorPtr),
        ("lse", _TensorPtr),
        # ABI 1.1
        ("gate", _TensorPtr),
        # ABI 1.2
        ("token_ids", _TensorPtr),
        ("token_ids_count_column", ctypes.c_int32),
        ("reserved2", ctypes.c_uint32),
    ]


# The argument structs' sizes as earlier ABI minors defined them: what such a host sends.
QSA_INDEX_ARGS_SIZE_1_0 = sm70ops_qsa_index_args.compress_ratio.offset
QSA_ATTN_ARGS_SIZE_1_0 = sm70ops_qsa_attn_args.gate.offset
QSA_ATTN_ARGS_SIZE_1_1 = sm70ops_qsa_attn_args.token_ids.offset


class sm70ops_nvfp4_weights(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("w13", _TensorPtr),
        ("w13_scale", _TensorPtr),
        ("w13_scale_2", _TensorPtr),
        ("w2", _TensorPtr),
        ("w2_scale", _TensorPtr),
        ("w2_scale_2", _TensorPtr),
    ]


class sm70ops_nvfp4_moe_prepare_args(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("weights", ctypes.POINTER(sm70ops_nvfp4_weights)),
        ("prepared", _TensorPtr),
    ]


class sm70ops_nvfp4_moe_args(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("x", _TensorPtr),
        ("topk_ids", _TensorPtr),
        ("topk_weights", _TensorPtr),
        ("weights", ctypes.POINTER(sm70ops_nvfp4_weights)),
        ("prepared", _TensorPtr),
        ("out", _TensorPtr),
    ]


# The function table's slot types. Context pointers are opaque: c_void_p.
status_name_fn = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int32)
status_string_fn = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int32)
reason_name_fn = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int32)
last_error_fn = ctypes.CFUNCTYPE(ctypes.c_char_p)
get_identity_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(sm70ops_identity))
device_count_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_int32))
device_info_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32,
                                  ctypes.POINTER(sm70ops_device_info))
context_create_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(sm70ops_context_desc),
                                     ctypes.POINTER(ctypes.c_void_p))
context_destroy_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
check_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                            ctypes.POINTER(sm70ops_decision))
workspace_size_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32,
                                     ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))
execute_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64)


class sm70ops_api(ctypes.Structure):
    """The plugin's table. Read a slot only when struct_size covers it (see plugin.py)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("abi_major", ctypes.c_uint32),
        ("abi_minor", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("status_name", status_name_fn),
        ("status_string", status_string_fn),
        ("reason_name", reason_name_fn),
        ("last_error", last_error_fn),
        ("get_identity", get_identity_fn),
        ("device_count", device_count_fn),
        ("device_info", device_info_fn),
        ("context_create", context_create_fn),
        ("context_destroy", context_destroy_fn),
        ("check", check_fn),
        ("workspace_size", workspace_size_fn),
        ("execute", execute_fn),
    ]


# sm70ops_status sm70ops_get_api(uint32_t, uint32_t, uint32_t *, const sm70ops_api **)
sm70ops_get_api_fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint32,
                                      ctypes.POINTER(ctypes.c_uint32),
                                      ctypes.POINTER(ctypes.POINTER(sm70ops_api)))

# Every struct of the header by its C name, for the layout test and for struct_size.
STRUCTS = {
    cls.__name__: cls
    for cls in (sm70ops_decision, sm70ops_context_desc, sm70ops_identity, sm70ops_device_info,
                sm70ops_qsa_index_args, sm70ops_qsa_attn_args, sm70ops_nvfp4_weights,
                sm70ops_nvfp4_moe_prepare_args, sm70ops_nvfp4_moe_args, sm70ops_api)
}

# The args struct of each op.
ARGS_STRUCTS = {
    Op.QSA_INDEX: sm70ops_qsa_index_args,
    Op.QSA_ATTN: sm70ops_qsa_attn_args,
    Op.NVFP4_MOE: sm70ops_nvfp4_moe_args,
    Op.NVFP4_MOE_PREPARE: sm70ops_nvfp4_moe_prepare_args,
}

# Names as the C host loader and CLI print them (sm70ops_host_op_name / _route_name).
OP_NAMES = {op: op.name.lower() for op in Op}
ROUTE_NAMES = {route: route.name.lower() for route in Route}


def op_from(value):
    """Op id from an Op, an int or a name ("qsa_index"). An int the header does not define is
    passed through (the plugin declines it as UNKNOWN_OP); an unknown name is a ValueError."""
    if isinstance(value, str):
        for op, name in OP_NAMES.items():
            if name == value:
                return op
        raise ValueError(f"unknown op name {value!r}; known: {', '.join(OP_NAMES.values())}")
    return Op(value) if value in Op._value2member_map_ else int(value)


def new_struct(cls, **fields):
    """A zeroed `cls` with struct_size set, then `fields`."""
    s = cls()
    s.struct_size = ctypes.sizeof(cls)
    for name, value in fields.items():
        setattr(s, name, value)
    return s

"""DLTensor views and the op-args builders: descriptors without data (no torch), views of
torch tensors (strides, dtypes, devices) where torch is importable."""
import ctypes
import gc

import pytest

from sm70ops import _abi, dlpack, model, ops


def test_describe_is_dense_with_null_data():
    v = dlpack.describe((3, 4, 5), "f16", device=2)
    t = v.tensor
    assert t.data is None and t.ndim == 3 and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (_abi.DLDeviceType.kDLCUDA, 2)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (_abi.DLDataTypeCode.kDLFloat, 16, 1)
    assert [t.shape[i] for i in range(3)] == [3, 4, 5]
    assert [t.strides[i] for i in range(3)] == [20, 5, 1]
    assert v.shape == (3, 4, 5) and v.strides == (20, 5, 1)


@pytest.mark.parametrize("name, code, bits", [("float32", 2, 32), ("int32", 0, 32),
                                              ("uint8", 1, 8), ("uint64", 1, 64),
                                              ("int64", 0, 64), ("bfloat16", 4, 16)])
def test_dtype_mapping(name, code, bits):
    t = dlpack.describe((2,), name).tensor
    assert (t.dtype.code, t.dtype.bits) == (code, bits)


def test_dtypes_without_a_dlpack_code_are_refused():
    with pytest.raises(TypeError):
        dlpack.describe((2,), "complex64")


def test_a_wrong_dtype_is_the_plugins_to_decline(plugin):
    """int64 lengths reach the check, which declines naming them: a host falls back."""
    args = model.model_call("qsa_index", 32768)[0]
    lens = dlpack.describe((1,), "int64")
    args.struct.seq_lens = lens.pointer  # `lens` outlives the check
    with plugin.context(compute_capability=70) as ctx:
        d = ctx.check("qsa_index", args)
    assert not d.accepted and d.reason == "INVALID_ARGUMENT" and "seq_lens" in d.message


def _qsa_index_args():
    """Built in a frame of its own, so only the OpArgs keeps the views alive."""
    return model.model_call("qsa_index", 32768)[0]


def test_args_keep_their_shape_arrays_alive():
    args = _qsa_index_args()
    for _ in range(3):
        gc.collect()
        junk = [(ctypes.c_int64 * 4)(9, 9, 9, 9) for _ in range(1000)]  # reuse freed memory
    del junk
    q = args.struct.q.contents
    assert [q.shape[i] for i in range(q.ndim)] == [8192, 4, 128]
    assert [q.strides[i] for i in range(q.ndim)] == [512, 128, 1]
    assert args.struct.sel_mask.contents.dtype.bits == 64


def test_qsa_index_struct():
    s = _qsa_index_args().struct
    assert s.struct_size == ctypes.sizeof(_abi.sm70ops_qsa_index_args)
    assert (s.topk, s.max_seq_len, s.max_query_len, s.max_workspace_bytes) == (2048, 32768,
                                                                              8192, 0)
    assert (s.compress_ratio, s.reserved1) == (4, 0) and not s.weights  # the model's indexer
    assert not s.topk_idx and s.sel_blocks and s.k_index.contents.shape[:2] == [512, 16]


def test_version_1_shapes_give_a_key_per_token_and_weights():
    s = model.model_call("qsa_index", 32768, model=model.V1)[0].struct
    assert s.compress_ratio == 1 and s.weights and s.k_index.contents.shape[1] == 64
    assert s.sel_blocks.contents.shape[1] == 512


def test_nvfp4_moe_structs_point_at_the_weights():
    args = model.model_call("nvfp4_moe", 8192)[0]
    w = args.struct.weights.contents
    assert w.struct_size == ctypes.sizeof(_abi.sm70ops_nvfp4_weights) and w.reserved0 == 0
    assert [w.w13.contents.shape[i] for i in range(3)] == [512, 320, 1280]  # TP4: I 160
    assert [w.w2_scale.contents.shape[i] for i in range(3)] == [512, 2560, 10]
    prepare = model.model_call("nvfp4_moe_prepare", 8192)[0].struct
    assert prepare.weights and not prepare.prepared  # check tells the size: output_bytes


def test_qsa_attn_struct():
    s = model.model_call("qsa_attn", 131072)[0].struct
    assert s.struct_size == ctypes.sizeof(_abi.sm70ops_qsa_attn_args)
    assert s.sm_scale == pytest.approx(1 / 16) and not s.lse
    assert [s.k_cache.contents.shape[i] for i in range(4)] == [2048, 64, 1, 256]
    assert [s.gate.contents.shape[i] for i in range(3)] == [8192, 6, 256]
    assert s.sel_blocks.contents.shape[1] == 513


def test_from_torch_strides_and_dtypes(torch):
    x = torch.zeros((4, 6), dtype=torch.float16).t()  # non-contiguous: strides (1, 6)
    v = dlpack.from_torch(x)
    assert v.shape == (6, 4) and v.strides == (1, 6)
    assert v.tensor.data == x.data_ptr() and v.tensor.byte_offset == 0
    assert v.tensor.device.device_type == _abi.DLDeviceType.kDLCPU
    sliced = torch.zeros((4, 6), dtype=torch.int32)[1:, 2:]
    assert dlpack.from_torch(sliced).tensor.data == sliced.data_ptr()


def test_from_torch_reinterpretations(torch):
    bits = torch.zeros((2, 3), dtype=torch.int64)
    assert dlpack.from_torch(bits, "uint64").tensor.dtype.code == _abi.DLDataTypeCode.kDLUInt
    plain = dlpack.from_torch(bits).tensor.dtype  # int64 lengths: the check's to decline
    assert (plain.code, plain.bits) == (_abi.DLDataTypeCode.kDLInt, 64)
    with pytest.raises(TypeError):
        dlpack.from_torch(torch.zeros(2, dtype=torch.bool))  # no mapping at all
    with pytest.raises(TypeError):
        dlpack.from_torch(torch.zeros(2, dtype=torch.float64), "uint64")
    if hasattr(torch, "float8_e4m3fn"):
        scales = torch.zeros(4, dtype=torch.float8_e4m3fn)
        assert dlpack.from_torch(scales, "uint8").tensor.dtype.bits == 8
    assert dlpack.uint64_dtype() in (getattr(torch, "uint64", None), torch.int64)


def test_builders_take_torch_tensors(torch):
    rows, pages = 3, 2
    args = ops.qsa_index(
        q=torch.zeros((rows, 4, 128), dtype=torch.float16),
        weights=torch.zeros((rows, 4)), k_index=torch.zeros((pages, 64, 128), dtype=torch.float16),
        query_start_loc=torch.tensor([0, rows], dtype=torch.int32), compress_ratio=2,
        seq_lens=torch.tensor([100], dtype=torch.int32),
        block_table=torch.tensor([[1, 0]], dtype=torch.int32), topk=16, max_seq_len=100,
        max_query_len=rows, sel_mask=torch.zeros((rows, 2), dtype=torch.int64),
        sel_blocks=torch.zeros((rows, 2), dtype=torch.int32),
        sel_count=torch.zeros(rows, dtype=torch.int32))
    assert args.op == _abi.Op.QSA_INDEX and args.struct.compress_ratio == 2
    assert args.struct.sel_mask.contents.dtype.code == _abi.DLDataTypeCode.kDLUInt
    assert args.struct.q.contents.shape[2] == 128

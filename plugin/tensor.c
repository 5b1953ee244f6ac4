#include "plugin/tensor.h"

#include <stdio.h>

typedef struct dtype_info {
  const char *name;
  uint8_t code;
  uint8_t bits;
} dtype_info;

static const dtype_info kDtypes[] = {
    [SM70_F16] = {"float16", kDLFloat, 16}, [SM70_F32] = {"float32", kDLFloat, 32},
    [SM70_I32] = {"int32", kDLInt, 32},     [SM70_U8] = {"uint8", kDLUInt, 8},
    [SM70_U64] = {"uint64", kDLUInt, 64},
};

/* Kernels read rows with 16-byte vector loads. */
enum { kRowAlignBytes = 16 };
/* Offsets are computed in int64; keep every extent far from overflow. */
static const int64_t kMaxExtentElements = (int64_t)1 << 48;

#define FAIL(...)                                  \
  do {                                             \
    snprintf(why, (size_t)why_bytes, __VA_ARGS__); \
    return 0;                                      \
  } while (0)

static int32_t shape_valid(const DLTensor *t, const sm70_tensor_spec *spec, char *why,
                           uint64_t why_bytes) {
  if (t->ndim != spec->rank) FAIL("%s: rank %d, expected %d", spec->name, t->ndim, spec->rank);
  if (t->shape == NULL) FAIL("%s: shape is NULL", spec->name);
  for (int32_t d = 0; d < spec->rank; ++d) {
    if (t->shape[d] < 0)
      FAIL("%s: dim %d is negative (%lld)", spec->name, d, (long long)t->shape[d]);
    if (t->shape[d] > INT32_MAX) {
      FAIL("%s: dim %d is %lld, beyond 32-bit indexing", spec->name, d, (long long)t->shape[d]);
    }
    if (spec->shape[d] != SM70_ANY && t->shape[d] != spec->shape[d]) {
      FAIL("%s: dim %d is %lld, expected %lld", spec->name, d, (long long)t->shape[d],
           (long long)spec->shape[d]);
    }
  }
  return 1;
}

static int32_t dtype_valid(const DLTensor *t, const sm70_tensor_spec *spec, char *why,
                           uint64_t why_bytes) {
  const dtype_info *want = &kDtypes[spec->dtype];
  if (t->dtype.code != want->code || t->dtype.bits != want->bits || t->dtype.lanes != 1) {
    FAIL("%s: dtype (code %u, bits %u, lanes %u), expected %s", spec->name, t->dtype.code,
         t->dtype.bits, t->dtype.lanes, want->name);
  }
  return 1;
}

/* Strides in elements: innermost 1, others positive, 16-byte aligned; or dense when required. */
static int32_t strides_valid(const DLTensor *t, const sm70_tensor_spec *spec, char *why,
                             uint64_t why_bytes) {
  if (t->strides == NULL)
    FAIL("%s: strides is NULL (sm70ops requires explicit strides)", spec->name);
  int64_t elem_bytes = kDtypes[spec->dtype].bits / 8;
  int64_t dense = 1;
  int64_t extent = 1;
  for (int32_t d = spec->rank - 1; d >= 0; --d) {
    int64_t stride = t->strides[d];
    int32_t innermost = d == spec->rank - 1;
    if (spec->contiguous && stride != dense) {
      FAIL("%s: stride %lld at dim %d, must be contiguous (%lld)", spec->name, (long long)stride, d,
           (long long)dense);
    }
    if (innermost && stride != 1 && t->shape[d] > 1) {
      FAIL("%s: innermost stride %lld, must be 1", spec->name, (long long)stride);
    }
    if (!innermost && stride <= 0) {
      FAIL("%s: stride %lld at dim %d must be positive", spec->name, (long long)stride, d);
    }
    if (!innermost && spec->vector_rows && stride % (kRowAlignBytes / elem_bytes) != 0) {
      FAIL("%s: stride %lld at dim %d must be a multiple of %lld elements (16-byte rows)",
           spec->name, (long long)stride, d, (long long)(kRowAlignBytes / elem_bytes));
    }
    if (stride > kMaxExtentElements)
      FAIL("%s: stride %lld too large", spec->name, (long long)stride);
    int64_t span = t->shape[d] > 0 ? t->shape[d] - 1 : 0;
    if (stride > 0 && span > (kMaxExtentElements - extent) / stride) {
      FAIL("%s: spans more than 2^48 elements", spec->name);
    }
    extent += span * stride;
    /* Bounded by the extent check when the spec is contiguous (dense == stride); unused else. */
    if (spec->contiguous) dense *= t->shape[d];
  }
  return 1;
}

static int32_t tensor_valid(const DLTensor *t, const sm70_tensor_spec *spec, int32_t device_ordinal,
                            int32_t need_data, char *why, uint64_t why_bytes) {
  if (t == NULL) {
    if (spec->optional) return 1;
    FAIL("%s is NULL", spec->name);
  }
  if (t->device.device_type != kDLCUDA || t->device.device_id != device_ordinal) {
    FAIL("%s: on device (type %d, id %d), expected CUDA device %d", spec->name,
         (int)t->device.device_type, t->device.device_id, device_ordinal);
  }
  if (!shape_valid(t, spec, why, why_bytes) || !strides_valid(t, spec, why, why_bytes)) return 0;
  uintptr_t align = spec->vector_rows ? kRowAlignBytes : kDtypes[spec->dtype].bits / 8;
  if (sm70_tensor_address(t) % align != 0) {
    FAIL("%s: data + byte_offset is not %u-byte aligned", spec->name, (unsigned)align);
  }
  if (need_data && t->data == NULL) FAIL("%s: data is NULL", spec->name);
  return 1;
}

sm70ops_reason sm70_tensor_check(const DLTensor *t, const sm70_tensor_spec *spec,
                                 int32_t device_ordinal, int32_t need_data, char *why,
                                 uint64_t why_bytes) {
  /* dtype first: strides are checked in units of the expected element size. */
  if (t != NULL && !dtype_valid(t, spec, why, why_bytes)) {
    return spec->model_dtype ? SM70OPS_REASON_UNSUPPORTED_DTYPE : SM70OPS_REASON_INVALID_ARGUMENT;
  }
  return tensor_valid(t, spec, device_ordinal, need_data, why, why_bytes)
             ? SM70OPS_REASON_ACCEPTED
             : SM70OPS_REASON_INVALID_ARGUMENT;
}

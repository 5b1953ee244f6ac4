/* Validation of borrowed DLTensor views against what an op expects of each argument. */
#ifndef SM70OPS_PLUGIN_TENSOR_H_
#define SM70OPS_PLUGIN_TENSOR_H_

#include <dlpack/dlpack.h>
#include <stdint.h>

#include "abi/sm70ops.h"

#define SM70_MAX_RANK 4
#define SM70_ANY (-1) /* a dimension the spec leaves free; the op cross-checks it */

typedef enum {
  SM70_F16,
  SM70_F32,
  SM70_I32,
  SM70_U8,
  SM70_U64,
} sm70_dtype;

/* What one argument must look like. Shapes may name SM70_ANY for dimensions the op then relates
 * to each other (T of q must equal T of weights, ...). */
typedef struct sm70_tensor_spec {
  const char *name; /* as in the header: "q", "k_cache" */
  sm70_dtype dtype;
  int32_t rank;
  int32_t optional;    /* 1: NULL allowed */
  int32_t contiguous;  /* 1: dense row-major (strides exactly the products of the shape) */
  int32_t vector_rows; /* 1: base and outer strides 16-byte aligned (kernels use 16-byte loads) */
  int32_t model_dtype; /* 1: model data; another dtype (bf16, ...) is unsupported, not invalid */
  int64_t shape[SM70_MAX_RANK];
} sm70_tensor_spec;

/* Checks `t` against `spec`: rank, dtype, device (kDLCUDA, `device_ordinal`), non-NULL strides,
 * sizes in 0..INT32_MAX, a contiguous innermost dimension, an element-aligned base (16-byte base
 * and outer strides for vector_rows), an extent below 2^48 elements, and, when `need_data`, a
 * non-NULL data pointer. Returns SM70OPS_REASON_ACCEPTED when valid; else INVALID_ARGUMENT, or
 * UNSUPPORTED_DTYPE for a model_dtype tensor of another dtype, with a sentence in `why` ("q: dim 2
 * is 64, expected 128"). */
sm70ops_reason sm70_tensor_check(const DLTensor *t, const sm70_tensor_spec *spec,
                                 int32_t device_ordinal, int32_t need_data, char *why,
                                 uint64_t why_bytes);

/* Byte address of element 0 as an integer, for alignment checks: check() allows NULL data, and
 * pointer arithmetic on NULL is undefined in C. */
static inline uintptr_t sm70_tensor_address(const DLTensor *t) {
  return (uintptr_t)t->data + (uintptr_t)t->byte_offset;
}

/* Pointer to element 0 (data + byte_offset); NULL when data is NULL. */
static inline char *sm70_tensor_base(const DLTensor *t) {
  return t->data == NULL ? NULL : (char *)t->data + t->byte_offset;
}

/* The same for an optional tensor: NULL when the tensor itself is NULL. */
static inline void *sm70_tensor_data(const DLTensor *t) {
  return t == NULL ? NULL : sm70_tensor_base(t);
}

/* An optional tensor's stride along `dim`, in elements: 0 when the tensor is NULL. */
static inline int64_t sm70_tensor_stride(const DLTensor *t, int32_t dim) {
  return t == NULL ? 0 : t->strides[dim];
}

#endif /* SM70OPS_PLUGIN_TENSOR_H_ */

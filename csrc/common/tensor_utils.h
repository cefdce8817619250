// Shared torch-side helpers for every family: argument checks that name the op and the argument, dtype
// mapping onto the torch-free DType, and layout handling (dense views, memory-order splits).
#pragma once
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "common/hd.h"

namespace torch_dnn {

inline bool is_kernel_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

inline DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::Float32;
    case at::kHalf: return DType::Float16;
    case at::kBFloat16: return DType::BFloat16;
    case at::kDouble: return DType::Float64;
    default: TORCH_CHECK(false, "torch_dnn: no kernel for dtype ", t);
  }
}

// Whether an optional tensor argument was passed: present and defined.
inline bool given(const c10::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// The dtype of the statistics (mean, rstd, invstd) the normalisation families keep for an input of dtype t: float64
// for a float64 input, float32 for every other.
inline at::ScalarType stat_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// The elements of an optional tensor (an undefined one stands for an absent argument or an unwanted result), or null.
template <typename T>
T* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

inline void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(is_kernel_dtype(t.scalar_type()), op, ": expected ", arg,
              " to be a floating point tensor (float32, float16, bfloat16 or float64), but got ", t.scalar_type());
}

inline void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op, const char* arg_a,
                             const char* arg_b) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": expected ", arg_b, " to have the same dtype as ", arg_a,
              " (", a.scalar_type(), "), but got ", b.scalar_type());
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op, const char* arg_a,
                              const char* arg_b) {
  TORCH_CHECK(a.device() == b.device(), op, ": expected ", arg_b, " to be on the same device as ", arg_a, " (",
              a.device(), "), but got ", b.device());
}

inline void check_same_shape(const at::Tensor& a, const at::Tensor& b, const char* op, const char* arg_a,
                             const char* arg_b) {
  TORCH_CHECK(a.sizes() == b.sizes(), op, ": expected ", arg_b, " to have the shape of ", arg_a, " ", a.sizes(),
              ", but got ", b.sizes());
}

// b like a: the same dtype, device and shape, checked in that order (a gradient against its tensor, a residual
// against the input).
inline void check_matching(const at::Tensor& a, const at::Tensor& b, const char* op, const char* arg_a,
                           const char* arg_b) {
  check_same_dtype(a, b, op, arg_a, arg_b);
  check_same_device(a, b, op, arg_a, arg_b);
  check_same_shape(a, b, op, arg_a, arg_b);
}

inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  TORCH_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
              " dimensions (expected to be in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

// `x` itself when its memory is dense (any permutation of dims: contiguous, channels_last, transposed ...),
// otherwise a dense copy laid out as at::empty_like(x) lays it out. Outputs made with empty_like(x) then
// share the layout of the returned tensor, so kernels can walk both as flat memory.
inline at::Tensor dense_like(const at::Tensor& x) {
  if (x.is_non_overlapping_and_dense()) return x;
  return at::empty_like(x).copy_(x);
}

// `t` laid out exactly as `ref` (which must be dense): t itself if the strides already agree.
inline at::Tensor same_layout_as(const at::Tensor& t, const at::Tensor& ref) {
  if (t.strides() == ref.strides() && t.is_non_overlapping_and_dense()) return t;
  return at::empty_like(ref).copy_(t);
}

// The product of the sizes after the first two: S of an (N, C, *) tensor (1 for (N, C)).
inline int64_t spatial_size(const at::Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return s;
}

// A dense tensor seen in memory as [outer, size(dim), inner]: dims that come before `dim` in memory order
// multiply into outer, those after into inner.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
inline DimSplit split_at_dim(const at::Tensor& x, int64_t dim) {
  DimSplit s;
  if (x.dim() == 0) return s;
  s.size = x.size(dim);
  const int64_t n = x.numel();
  if (s.size <= 1) {
    s.outer = n;
    return s;
  }
  const int64_t st = x.stride(dim);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim || x.size(d) == 1) continue;
    if (x.stride(d) < st) s.inner *= x.size(d);
  }
  s.outer = s.size == 0 ? 0 : n / (s.size * s.inner);
  return s;
}

}  // namespace torch_dnn

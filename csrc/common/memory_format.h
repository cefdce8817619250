// The strides PyTorch gives an op's results, for the ops layers to allocate outputs and gradients as PyTorch's own
// op would (tests/test_memory_format.py checks every op against PyTorch). Layouts are compared on the dims of size
// > 1 only ("significant" strides): a size-1 dim's stride moves no address, and PyTorch ignores it as well.
#pragma once
#include <ATen/ATen.h>
#include <c10/util/strides.h>

#include <initializer_list>
#include <numeric>
#include <utility>
#include <vector>

namespace torch_dnn {

// Whether a and b (of one shape) place every element at the same offset.
inline bool same_significant_strides(const at::Tensor& a, at::IntArrayRef b_strides) {
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b_strides[d]) return false;
  return true;
}

// The strides a TensorIterator gives the output of an elementwise op over `operands` (one shape; the op's tensor
// arguments in the order the op hands them to its TensorIterator; undefined ones skipped): contiguous when all
// are contiguous, channels_last when all are (4-D), the operands' strides when all are dense with the same
// strides; otherwise the dims ordered by the operands' strides, the first operand that orders a pair of dims
// deciding it (TensorIteratorBase::reorder_dimensions). So a dense first operand gives its own layout.
inline std::vector<int64_t> iter_strides(std::initializer_list<at::Tensor> operands) {
  const at::Tensor* first = nullptr;
  bool contiguous = true, channels_last = true, same = true;
  for (const at::Tensor& t : operands) {
    if (!t.defined()) continue;
    contiguous = contiguous && t.is_contiguous();
    channels_last = channels_last && t.is_contiguous(at::MemoryFormat::ChannelsLast);
    if (first == nullptr) first = &t;
    same = same && t.is_non_overlapping_and_dense() && t.strides() == first->strides();
  }
  TORCH_INTERNAL_ASSERT(first != nullptr);
  const at::IntArrayRef sizes = first->sizes();
  const int64_t nd = first->dim();
  if (contiguous) {
    const auto c = c10::contiguous_strides(sizes);
    return std::vector<int64_t>(c.begin(), c.end());
  }
  if (channels_last) return c10::get_channels_last_strides_2d(sizes);
  if (same) return first->strides().vec();
  // perm[0] is the fastest-moving dim; start from the contiguous order and insertion-sort with ties left alone
  std::vector<int64_t> perm(nd);
  for (int64_t i = 0; i < nd; ++i) perm[i] = nd - 1 - i;
  const auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const at::Tensor& t : operands) {
      if (!t.defined()) continue;
      const int64_t s0 = t.stride(d0), s1 = t.stride(d1);
      if (s0 == 0 || s1 == 0) continue;
      if (s0 < s1) return -1;
      if (s0 > s1) return 1;
      if (sizes[d0] > sizes[d1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < nd; ++i) {
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; --d0) {
      const int c = should_swap(perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  std::vector<int64_t> strides(nd);
  int64_t next = 1;
  for (int64_t i = 0; i < nd; ++i) {
    strides[perm[i]] = next;
    next *= sizes[perm[i]];
  }
  return strides;
}

// An uninitialised tensor of `like`'s shape with `strides` and `opts`.
inline at::Tensor empty_with_strides(const at::Tensor& like, const std::vector<int64_t>& strides,
                                     const at::TensorOptions& opts) {
  return at::empty_strided(like.sizes(), strides, opts);
}

// `t` laid out with `strides` (which must describe a dense layout): t itself when it already places every element
// there, else a copy.
inline at::Tensor with_strides(const at::Tensor& t, const std::vector<int64_t>& strides) {
  if (same_significant_strides(t, strides) && t.is_non_overlapping_and_dense()) return t;
  return at::empty_strided(t.sizes(), strides, t.options()).copy_(t);
}

// `t` laid out as the dense tensor `ref` (a copy only where t's elements sit elsewhere).
inline at::Tensor in_layout_of(const at::Tensor& t, const at::Tensor& ref) {
  if (same_significant_strides(t, ref.strides()) && t.is_non_overlapping_and_dense()) return t;
  return at::empty_like(ref, t.options()).copy_(t);
}

}  // namespace torch_dnn

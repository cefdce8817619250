// Staging of a convolution problem for the tensor-core paths (conv_sm90_*, conv_igemm_*), which take only
// channels-innermost operands with channel counts that are multiples of 8: where they refuse a problem for its
// layout (NCHW / NCDHW, any other strides) or its channel counts (the 3-channel stem), each operand that is not
// ready is copied to a dense channels-last buffer whose channels are padded with zeros to the next multiple of 8,
// the paths run on those buffers, and the written operand is copied back (its real channels only) into the
// caller's layout. The result is the unstaged problem's: zero channels add nothing to fprop's sums; dgrad's dx of
// the padded channels and wgrad's dw of padded rows and columns are computed and dropped.
//
//   fprop   x [N][C][in]  w [K][C][ker]  read (C, K padded)  -> y [N][K][out] written (bias and residual padded)
//   dgrad   y [N][K][out] w [K][C][ker]  read                -> x [N][C][in] written
//   wgrad   y [N][K][out] x [N][C][in]   read                -> w [K][C][ker] written
//
// Taken only where the tensor cores pay for it in principle: their dtypes (float16, bfloat16, float32 with TF32),
// one group (grouped and depthwise convolutions keep their kernels), padding that multiplies the work
// (C' K' / (C K)) by at most kMaxPaddedWork, and staged operands within the kernels' 32-bit element range.
// ConvArgs::knobs (TORCH_DNN_CONV_STAGE, conv_knobs.h) turns staging off. Activations and gradients are copied at every
// call; a read weight's staged copy is kept while the weight is unchanged (conv_weight_cache.h).
//
// Device-agnostic (ATen ops on views of the operands' memory): conv_cuda.cpp runs it with the tensor-core
// entry points and the tiled layout transpose; tests/emulation/conv_staging_emulation.cpp runs it on the CPU
// with a stand-in for those paths that enforces their operand rules.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "conv/conv_kernels.h"
#include "conv/conv_ops.h"
#include "conv/conv_weight_cache.h"

namespace torch_dnn {
namespace conv {
namespace staging {

// C' K' / (C K) above this: the padded problem costs more than the tensor cores save over the direct kernels.
constexpr int64_t kMaxPaddedWork = 8;

inline int64_t round_up8(int64_t c) { return (c + 7) / 8 * 8; }

inline bool tensor_core_dtype(const ConvArgs& a) {
  return a.dtype == DType::Float16 || a.dtype == DType::BFloat16 || (a.dtype == DType::Float32 && a.allow_tf32);
}

// The extents [n][c][d][h][w] of one operand.
struct Extents {
  int64_t e[5];
  int64_t numel() const { return e[0] * e[1] * e[2] * e[3] * e[4]; }
};

inline Extents extents(int64_t n, int64_t c, const int64_t (&sp)[3]) { return {{n, c, sp[0], sp[1], sp[2]}}; }

// Ready as it is: dense [n][d][h][w][c] memory (strides of unit dims aside), c a multiple of 8, 16-byte aligned.
inline bool ready(const Operand5& o, const Extents& x) {
  if (x.e[1] % 8 != 0 || reinterpret_cast<uintptr_t>(o.ptr) % 16 != 0) return false;
  int64_t expected = 1;
  for (const int j : {1, 4, 3, 2, 0}) {
    if (x.e[j] != 1 && o.stride[j] != expected) return false;
    expected *= x.e[j];
  }
  return true;
}

// Memory of the call's device as a tensor (the device given: no pointer query).
inline at::Tensor view_of(void* ptr, at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& opts) {
  return at::for_blob(ptr, sizes).strides(strides).options(opts).target_device(opts.device()).make_tensor();
}

// The operand's memory as a 5-D tensor.
inline at::Tensor view_of(const Operand5& o, const Extents& x, const at::TensorOptions& opts) {
  return view_of(o.ptr, at::IntArrayRef(x.e, 5), at::IntArrayRef(o.stride, 5), opts);
}

inline Operand5 operand_of(const at::Tensor& t) {
  Operand5 o;
  o.ptr = t.data_ptr();
  for (int j = 0; j < 5; ++j) o.stride[j] = t.stride(j);
  return o;
}

// copy(dst, src): dst.copy_(src) for same-shaped 5-D tensors (the CUDA launcher's moves dense layouts by the tiled
// transpose).
using Copy = void (*)(const at::Tensor& dst, const at::Tensor& src);

inline void aten_copy(const at::Tensor& dst, const at::Tensor& src) { dst.copy_(src); }

// A dense channels-last buffer of n_pad x c_pad channels holding the operand in its leading n x c (zeros in the
// rest), or of the operand's size without a copy (write = true: the kernels fill it).
inline at::Tensor stage(const Operand5& o, const Extents& x, int64_t n_pad, int64_t c_pad, bool write,
                        const at::TensorOptions& opts, Copy copy) {
  const int64_t sizes[5] = {n_pad, c_pad, x.e[2], x.e[3], x.e[4]};
  const auto cl = opts.memory_format(at::MemoryFormat::ChannelsLast3d);
  const bool padded = n_pad != x.e[0] || c_pad != x.e[1];
  at::Tensor t = at::empty(at::IntArrayRef(sizes, 5), cl);
  if (padded && !write) t.zero_();
  if (!write) copy(t.narrow(0, 0, x.e[0]).narrow(1, 0, x.e[1]), view_of(o, x, opts));
  return t;
}

// One operand of the staged problem: the caller's (ready) or a staged buffer.
struct Staged {
  Operand5 op;
  at::Tensor buffer;  // undefined where the caller's operand is used in place
};

inline Staged stage_if_needed(const Operand5& o, const Extents& x, int64_t n_pad, int64_t c_pad, bool write,
                              const at::TensorOptions& opts, Copy copy) {
  if (n_pad == x.e[0] && c_pad == x.e[1] && ready(o, x)) return {o, at::Tensor()};
  at::Tensor t = stage(o, x, n_pad, c_pad, write, opts, copy);
  return {operand_of(t), t};
}

// The WeightCache key of a copy of kind `kind` made from weight operand `o` (extents `x`), padded to n_pad x c_pad.
inline WeightView weight_view(CopyKind kind, const Operand5& o, const Extents& x, int64_t n_pad, int64_t c_pad,
                              at::ScalarType dtype, c10::Stream stream) {
  WeightView view;
  view.kind = kind;
  view.ptr = o.ptr;
  for (int j = 0; j < 5; ++j) {
    view.stride[j] = o.stride[j];
    view.extent[j] = x.e[j];
  }
  view.n_pad = n_pad;
  view.c_pad = c_pad;
  view.dtype = dtype;
  view.stream = stream;
  return view;
}

// A read weight's Staged: the cached copy where WeightCache has one for `owner` (the caller's weight tensor; undefined:
// no caching), else a new one, then kept.
inline Staged stage_weight(const Operand5& o, const Extents& x, int64_t n_pad, int64_t c_pad,
                           const at::TensorOptions& opts, Copy copy, const at::Tensor& owner, c10::Stream stream) {
  if (n_pad == x.e[0] && c_pad == x.e[1] && ready(o, x)) return {o, at::Tensor()};
  const WeightView view = weight_view(CopyKind::Staged, o, x, n_pad, c_pad, opts.dtype().toScalarType(), stream);
  const at::Tensor t = WeightCache::instance().find_or_make(
      owner, view, [&] { return stage(o, x, n_pad, c_pad, false, opts, copy); });
  return {operand_of(t), t};
}

// Runs pass on a staged copy of the problem through try_paths(const ConvArgs&) -> bool (true: a path took the
// staged problem and queued its work); true when it did. False, with the caller's operands untouched, where
// staging does not apply or the paths refuse the staged problem too: the caller then runs the direct kernels.
// weight: the caller's weight tensor where the pass reads it and its staged copy may be kept (stage_weight), else
// undefined; stream: where the copies are queued.
template <class TryPaths>
bool run_staged(Pass pass, const ConvArgs& a, const at::TensorOptions& opts, Copy copy, TryPaths&& try_paths,
                const at::Tensor& weight, c10::Stream stream) {
  const ConvGeometry& g = a.g;
  if (!a.knobs.stage || !tensor_core_dtype(a) || g.G != 1 || g.N < 1 || g.C < 1 || g.K < 1) return false;
  const int64_t C = g.C, K = g.K, Cp = round_up8(C), Kp = round_up8(K);
  if (Cp * Kp > kMaxPaddedWork * C * K) return false;
  const Extents xe = extents(g.N, C, g.in), we = extents(K, C, g.ker), ye = extents(g.N, K, g.out);
  const bool fprop = pass == Pass::Fprop, dgrad = pass == Pass::Dgrad, wgrad = pass == Pass::Wgrad;
  const bool has_residual = fprop && a.residual.ptr != nullptr;
  // nothing to stage: the paths refused the problem for something else
  if (Cp == C && Kp == K && ready(a.x, xe) && ready(a.w, we) && ready(a.y, ye) &&
      (!has_residual || ready(a.residual, ye)))
    return false;
  constexpr int64_t kMaxElements = int64_t(INT32_MAX) - 256;
  if (extents(g.N, Cp, g.in).numel() > kMaxElements || extents(Kp, Cp, g.ker).numel() > kMaxElements ||
      extents(g.N, Kp, g.out).numel() > kMaxElements)
    return false;
  const Staged x = stage_if_needed(a.x, xe, g.N, Cp, dgrad, opts, copy);
  const Staged w = wgrad ? stage_if_needed(a.w, we, Kp, Cp, true, opts, copy)
                         : stage_weight(a.w, we, Kp, Cp, opts, copy, a.knobs.weight_cache ? weight : at::Tensor(),
                                        stream);
  const Staged y = stage_if_needed(a.y, ye, g.N, Kp, fprop, opts, copy);
  ConvArgs b = a;
  b.g.C = Cp;
  b.g.K = Kp;
  b.x = x.op;
  b.w = w.op;
  b.y = y.op;
  at::Tensor bias;
  Staged residual;
  if (fprop && Kp != K && a.bias != nullptr) {
    bias = at::zeros({Kp}, opts);
    bias.narrow(0, 0, K).copy_(view_of(const_cast<void*>(a.bias), {K}, {1}, opts));
    b.bias = bias.const_data_ptr();
  }
  if (has_residual) {
    residual = stage_if_needed(a.residual, ye, g.N, Kp, false, opts, copy);
    b.residual = residual.op;
  }
  if (!try_paths(b)) return false;
  // the written operand's real channels back into the caller's layout
  if (fprop && y.buffer.defined()) copy(view_of(a.y, ye, opts), y.buffer.narrow(1, 0, K));
  if (dgrad && x.buffer.defined()) copy(view_of(a.x, xe, opts), x.buffer.narrow(1, 0, C));
  if (wgrad && w.buffer.defined()) copy(view_of(a.w, we, opts), w.buffer.narrow(0, 0, K).narrow(1, 0, C));
  return true;
}

}  // namespace staging
}  // namespace conv
}  // namespace torch_dnn

// Torch-free entry points of the pooling family's CUDA kernels. Every pooling rank is one 5-D problem
// [N, C, D, H, W]: 1-D pooling is D = H = 1, 2-D is D = 1 (window 1, stride 1, padding 0 on the unused axes).
// Tensors are dense, either NCDHW-contiguous or channels-last (NDHWC in memory: channels_last for 4-D,
// channels_last_3d for 5-D, (N, L, C) for 3-D); input and output share the layout. Indices are int64 flat
// positions (d * H + h) * W + w within each (n, c) volume, as PyTorch's (so max_unpool works). Every call
// enqueues on `stream` and returns cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"

namespace torch_dnn {
namespace pool {

// One spatial axis: input and output sizes, and the window's kernel, stride, padding and dilation.
struct Axis {
  int64_t in = 1, out = 1, k = 1, s = 1, p = 0, d = 1;
};

struct PoolShape {
  int64_t N = 0, C = 0;
  Axis ax[3];  // D, H, W
  bool channels_last = false;
  bool adaptive = false;          // windows [floor(o * in / out), ceil((o + 1) * in / out))
  bool count_include_pad = true;  // avg_pool
  int64_t divisor_override = 0;   // avg_pool; 0: none
  double norm_type = 0;           // lp_pool (finite, non-zero): avg of x^p, then (avg * kernel numel)^(1/p)

  TD_HD int64_t in_volume() const { return ax[0].in * ax[1].in * ax[2].in; }
  TD_HD int64_t out_volume() const { return ax[0].out * ax[1].out * ax[2].out; }
  TD_HD int64_t kernel_volume() const { return ax[0].k * ax[1].k * ax[2].k; }
  TD_HD bool lp() const { return norm_type != 0; }
  // adaptive pooling to one output: a plain reduction over each (n, c) volume
  TD_HD bool global() const { return adaptive && out_volume() == 1; }
};

// Input element positions an output position's window covers along one axis, and back: the same formulas
// serve the CPU reference, the CUDA kernels and the gather-style backward.
struct Range {
  int64_t begin, end;
};

// max_pool's window along one axis: positions begin, begin + d, ... < end (padding skipped), or the adaptive
// window. `begin` is the first position inside the input, as PyTorch's (the index of a window of only -inf).
TD_HD Range max_window(int64_t o, const Axis& a, bool adaptive) {
  if (adaptive) return {o * a.in / a.out, ((o + 1) * a.in + a.out - 1) / a.out};
  int64_t b = o * a.s - a.p;
  const int64_t span_end = b + (a.k - 1) * a.d + 1;
  if (b < 0) b += ((-b + a.d - 1) / a.d) * a.d;
  return {b, span_end < a.in ? span_end : a.in};
}

// avg_pool's window along one axis: [begin, end) clamped to the input, and the length counted with padding
// (the divisor when count_include_pad).
TD_HD Range avg_window(int64_t o, const Axis& a, bool adaptive, int64_t& padded_len) {
  if (adaptive) {
    const int64_t b = o * a.in / a.out, e = ((o + 1) * a.in + a.out - 1) / a.out;
    padded_len = e - b;
    return {b, e};
  }
  int64_t b = o * a.s - a.p;
  int64_t e = b + a.k < a.in + a.p ? b + a.k : a.in + a.p;
  padded_len = e - b;
  b = b < 0 ? 0 : b;
  e = e < a.in ? e : a.in;
  return {b, e};
}

// Output positions whose window may cover input position i along one axis (a superset for dilated max
// windows; the caller checks the index).
TD_HD Range covering_outputs(int64_t i, const Axis& a, bool adaptive) {
  if (adaptive) return {i * a.out / a.in, ((i + 1) * a.out + a.in - 1) / a.in};
  const int64_t span = (a.k - 1) * a.d + 1;
  const int64_t b = i + a.p < span ? 0 : (i + a.p - span) / a.s + 1;
  const int64_t e = (i + a.p) / a.s + 1;
  return {b, e < a.out ? e : a.out};
}

// avg_pool's window (three axes) at one output position, and its divisor.
struct AvgWindow {
  Range r[3];
  int64_t divisor;
};
TD_HD AvgWindow avg_window3(const PoolShape& s, int64_t od, int64_t oh, int64_t ow) {
  AvgWindow w;
  int64_t len[3];
  const int64_t o[3] = {od, oh, ow};
  int64_t padded = 1, clipped = 1;
  for (int i = 0; i < 3; ++i) {
    w.r[i] = avg_window(o[i], s.ax[i], s.adaptive, len[i]);
    padded *= len[i];
    clipped *= w.r[i].end - w.r[i].begin;
  }
  if (s.adaptive) w.divisor = padded;
  else if (s.divisor_override) w.divisor = s.divisor_override;
  else w.divisor = s.count_include_pad ? padded : clipped;
  return w;
}

// lp_pool as PyTorch writes it: out = (sign(a) * relu(|a|) * K)^(1/p) with a = avg_pool(x^p) (padding 0) and
// K the kernel's numel; sign(a) * relu(|a|) is a itself, NaN included. The backward of that expression is
// zero where a == 0 (relu's), so the gradient of an all-zero window is zero rather than 0 * inf.
TD_HD float pool_pow(float x, float y) { return powf(x, y); }
TD_HD double pool_pow(double x, double y) { return pow(x, y); }
template <typename A>
TD_HD A lp_pre(A x, A p) {
  return pool_pow(x, p);
}
template <typename A>
TD_HD A lp_post(A avg, A kernel_numel, A p) {
  return pool_pow(avg * kernel_numel, A(1) / p);
}
// d out / d avg from the output y = (a K)^(1/p): K/p * (aK)^(1/p - 1) = K/p * y^(1 - p), zero where y == 0.
template <typename A>
TD_HD A lp_out_grad_scale(A y, A kernel_numel, A p) {
  return y == A(0) ? A(0) : kernel_numel / p * pool_pow(y, A(1) - p);
}
// d x^p / d x, as PyTorch's pow backward.
template <typename A>
TD_HD A lp_in_grad_scale(A x, A p) {
  return p * pool_pow(x, p - A(1));
}

// max_pool (windows or adaptive windows, s.adaptive): y and indices shaped as the output.
cudaError_t launch_max_forward(DType t, const void* x, void* y, int64_t* indices, const PoolShape& s,
                               cudaStream_t stream);
// grad_input from grad_output and indices: one thread per input item gathers (deterministic). An output
// whose dilated window holds only padding (-inf, index outside its window) reaches no input: PyTorch's
// scatter would write at that index, outside the volume.
cudaError_t launch_max_backward(DType t, const void* grad, const int64_t* indices, void* dx, const PoolShape& s,
                                cudaStream_t stream);
// avg_pool, adaptive avg_pool (s.adaptive; one output per volume runs a dedicated reduction) and lp_pool
// (s.norm_type != 0).
cudaError_t launch_avg_forward(DType t, const void* x, void* y, const PoolShape& s, cudaStream_t stream);
// avg_pool and adaptive avg_pool backward (gather, deterministic).
cudaError_t launch_avg_backward(DType t, const void* grad, void* dx, const PoolShape& s, cudaStream_t stream);
// lp_pool backward: needs the forward's input x and output y.
cudaError_t launch_lp_backward(DType t, const void* grad, const void* x, const void* y, void* dx,
                               const PoolShape& s, cudaStream_t stream);

}  // namespace pool
}  // namespace torch_dnn

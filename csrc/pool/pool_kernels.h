// Torch-free entry points of the pooling family's CUDA kernels. Tensors are 4-D [N, C, H, W] (3-D inputs are
// viewed with N = 1), dense, either NCHW-contiguous or channels_last (NHWC in memory); input and output share
// the layout. Indices are int64 flat positions h * W + w within each (n, c) plane, as PyTorch's. Every call
// enqueues on `stream` and returns cudaGetLastError().
#pragma once
#include "common/cuda_decl.h"

#include <cstdint>

#include "common/hd.h"

namespace torch_dnn {
namespace pool {

struct PoolShape {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t OH = 0, OW = 0;              // output
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool channels_last = false;
  // avg_pool2d only
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
  bool adaptive = false;         // adaptive_avg_pool2d: windows [floor(o*H/OH), ceil((o+1)*H/OH))
};

// Input element positions an output position's window covers along one axis, and back: the same formulas
// serve the CPU reference, the CUDA kernels and the gather-style backward.
struct Range {
  int64_t begin, end;
};

// avg_pool2d / adaptive_avg_pool2d window along one axis: [begin, end) clamped to the input, and the
// length counted with padding (the divisor when count_include_pad).
TD_HD Range avg_window(int64_t o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool adaptive,
                       int64_t& padded_len) {
  if (adaptive) {
    const int64_t b = o * in / out, e = ((o + 1) * in + out - 1) / out;
    padded_len = e - b;
    return {b, e};
  }
  int64_t b = o * s - p;
  int64_t e = b + k < in + p ? b + k : in + p;
  padded_len = e - b;
  b = b < 0 ? 0 : b;
  e = e < in ? e : in;
  return {b, e};
}

// Output positions whose window may cover input position i along one axis (a superset for dilated max
// windows; the caller checks the index).
TD_HD Range covering_outputs(int64_t i, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d,
                             bool adaptive) {
  if (adaptive) return {i * out / in, ((i + 1) * out + in - 1) / in};
  const int64_t span = (k - 1) * d + 1;
  const int64_t b = i + p < span ? 0 : (i + p - span) / s + 1;
  const int64_t e = (i + p) / s + 1;
  return {b, e < out ? e : out};
}

// Divisor of avg_pool2d's window at output (oh, ow).
TD_HD int64_t avg_divisor(const PoolShape& s, Range rh, Range rw, int64_t lh, int64_t lw) {
  if (s.adaptive) return lh * lw;
  if (s.divisor_override) return s.divisor_override;
  return s.count_include_pad ? lh * lw : (rh.end - rh.begin) * (rw.end - rw.begin);
}

// max_pool2d: y and indices [N, C, OH, OW].
cudaError_t launch_max_forward(DType t, const void* x, void* y, int64_t* indices, const PoolShape& s,
                               cudaStream_t stream);
// grad_input from grad_output and indices: one thread per input element gathers (deterministic). An output
// whose dilated window holds only padding (-inf, index outside its window) reaches no input: PyTorch's
// scatter would write at that index, outside the plane.
cudaError_t launch_max_backward(DType t, const void* grad, const int64_t* indices, void* dx, const PoolShape& s,
                                cudaStream_t stream);
// avg_pool2d and adaptive_avg_pool2d (s.adaptive).
cudaError_t launch_avg_forward(DType t, const void* x, void* y, const PoolShape& s, cudaStream_t stream);
cudaError_t launch_avg_backward(DType t, const void* grad, void* dx, const PoolShape& s, cudaStream_t stream);

}  // namespace pool
}  // namespace torch_dnn

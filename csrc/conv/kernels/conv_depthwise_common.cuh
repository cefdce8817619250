// What the depthwise kernels share: the 2-D problem with 32-bit sizes, and loads of a thread's channels.
//
// Depthwise: G == C, K = m C (m the channel multiplier), output channel k reads input channel k / m. The kernels
// take 2-D problems (D = P = T = 1; 1-D ones have H = Q = R = 1) and give each thread V channels (a 16-byte
// vector where the channels are innermost and aligned, else one channel) and a strip of OTW neighbouring
// positions along W of one row: the strip's input span is loaded once a filter row and reused by its OTW
// outputs from registers; the block's neighbouring strips share their halos through L1.
#pragma once
#include "conv/kernels/conv_direct_common.cuh"

namespace torch_dnn {
namespace conv {

constexpr int kDwThreads = 256;
constexpr int kDwStrip = 4;  // OTW: positions along W a thread

struct DwParams {
  int N, C, K, m;    // batch, input channels, output channels (K = m C), multiplier
  int H, W, Q, O;    // input rows and columns, output rows and columns
  int R, S, sh, sw, ph, pw, dh, dw;
  int strips;        // strips a row of the pass's output (fprop, wgrad: y's rows; dgrad: dx's rows)
  int wshift;        // the first strip starts at column -wshift (dgrad's stride alignment; else 0)
  uint32_t items;    // N * rows * strips (< 2^31)
  FastDivmod32 div_strips, div_rows, div_m;
  int bx;            // threads along channels (a power of two), each V channels
  int chunks;        // channel chunks of bx * V (the blocks' first index)
  bool rows_fastest; // items ordered (n, strip, row) instead of (n, row, strip): see split_item
  int64_t xs[5], ws[5], ys[5];  // element strides of x, w, y
};

// An item's batch index, row and strip. Rows fastest serves NCHW, which the plan hands over with H and W swapped
// (the strips then run down a column and neighbouring threads take neighbouring columns: a warp's load is 32
// contiguous elements); else strips fastest.
__device__ __forceinline__ void split_item(const DwParams& p, uint32_t item, uint32_t& n, uint32_t& row,
                                           uint32_t& strip) {
  uint32_t rest;
  if (p.rows_fastest) {
    p.div_rows.divmod(item, rest, row);
    p.div_strips.divmod(rest, n, strip);
  } else {
    p.div_strips.divmod(item, rest, strip);
    p.div_rows.divmod(rest, n, row);
  }
}

// V values in the accumulation type from a thread's V channels of one pixel, `pix` addressing its channel 0:
// a vector at channel c0 where `vec` (channels contiguous and aligned), else element channel(v) * cs, with
// channel(v) = (k0 + v) / m (fprop, wgrad: the input channels of output channels k0..) as div_m gives.
template <int V, typename T, typename A>
__device__ __forceinline__ void load_in_channels(const T* pix, bool vec, int k0, const FastDivmod32& div_m, int64_t cs,
                                                 A (&out)[V]) {
  if constexpr (V > 1) {
    if (vec) {
      load_acc<V>(pix + k0, out);
      return;
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = to_acc<A>(pix[int64_t(div_m.div(uint32_t(k0 + v))) * cs]);
}

// dgrad's dy values of output channels (c0 + v) m + j, v < V: a vector where m == 1 and `vec`, else gathered.
template <int V, typename T, typename A>
__device__ __forceinline__ void load_out_channels(const T* pix, bool vec, int c0, int m, int j, int64_t cs,
                                                  A (&out)[V]) {
  if constexpr (V > 1) {
    if (vec) {
      load_acc<V>(pix + c0, out);
      return;
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = to_acc<A>(pix[int64_t((c0 + v) * m + j) * cs]);
}

template <int V, typename A>
__device__ __forceinline__ void zero(A (&v)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = A(0);
}

// Stores V results at `p` (a thread's channel 0 of the pixel): a vector where V > 1 (the plan asked for
// contiguous aligned channels), else one element.
template <int V, typename T, typename A>
__device__ __forceinline__ void store_channels(T* p, const A (&v)[V]) {
  if constexpr (V > 1) store_vec<T, V>(p, pack_vec<V, T>(v));
  else *p = from_acc<T>(v[0]);
}

}  // namespace conv
}  // namespace torch_dnn

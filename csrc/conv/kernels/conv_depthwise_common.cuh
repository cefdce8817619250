// What the depthwise kernels share: the 2-D problem with 32-bit sizes, and loads of a thread's channels.
//
// Depthwise: G == C, K = m C (m the channel multiplier), output channel k reads input channel k / m. The kernels
// take 2-D problems (D = P = T = 1; 1-D ones have H = Q = R = 1) and give each thread V channels (a 16-byte
// vector where the channels are innermost and aligned and m == 1, else one channel) and a strip of OTW neighbouring
// positions along W of one row: the strip's input span is loaded once a filter row and reused by its OTW
// outputs from registers; the block's neighbouring strips share their halos through L1.
#pragma once
#include "conv/kernels/conv_direct_common.cuh"

namespace torch_dnn {
namespace conv {

constexpr int kDwThreads = 256;
constexpr int kDwStrip = 4;  // OTW: positions along W a thread
// Blocks an SM the kernels are compiled for (__launch_bounds__): two (128 registers a thread), where one left the
// 16-bit kernels at 140-170 registers and 8 warps an SM, too few to cover their loads (the 5x5/2 forward and the
// 7-wide kernels spill a little at two and still gain). wgrad 3x3 stride 1 fits three without spilling; its other
// widths spill at three and lose. Measurements: docs/conv.md.
constexpr int kDwMinBlocks = 2;
constexpr int dw_wgrad_min_blocks(int ks, int str) { return ks == 3 && str == 1 ? 3 : kDwMinBlocks; }

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

// Pixel loads that the warp waits for once a filter row: a strip's pixels are loaded as stored (Vec<T, V>, two
// bf16/fp16 a register), zero where out of range, all of them before any is converted or used, so that ptxas
// issues them back to back as predicated loads. With the conversion inside an `if (in range)` it kept each load's
// conversion next to it, in the branch, and with a select after an unconditional load it zeroed each vector
// before issuing the next load: either way the warp waited a round trip a pixel.
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> zero_vec() {
  Vec<T, V> r;
  if constexpr (sizeof(Vec<T, V>) % 4 == 0) {
    auto* w = reinterpret_cast<uint32_t*>(&r);
#pragma unroll
    for (int i = 0; i < int(sizeof(r) / 4); ++i) w[i] = 0u;
  } else {
    static_assert(sizeof(Vec<T, V>) == 2, "a 16-bit element");
    *reinterpret_cast<uint16_t*>(&r) = 0;
  }
  return r;
}

// A thread's V channels of one pixel as stored, zero where !ok: the V elements at pix + off, `off` the thread's
// channel offset in the pixel (with V > 1 its first channel, the channels being contiguous; with V = 1 the element's
// channel times the channel stride), computed once a thread by the caller.
template <int V, typename T>
__device__ __forceinline__ Vec<T, V> load_pixel_raw(const T* pix, bool ok, int64_t off) {
  Vec<T, V> r = zero_vec<T, V>();
  if (ok) r = load_vec<T, V>(pix + off);
  return r;
}

// The offset of a thread's input channels in a pixel (fprop, wgrad: output channels k0..): channel k0 itself with
// V > 1 (vectors only where m == 1), else input channel k0 / m times the channel stride.
template <int V>
__device__ __forceinline__ int64_t input_channel_offset(const DwParams& p, int k0) {
  return V > 1 ? int64_t(k0) : int64_t(p.div_m.div(uint32_t(k0))) * p.xs[1];
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

// The depthwise kernels' plans and launches (kernels/conv_depthwise_*.cuh): memory-bound, so the plan is about
// access patterns.
//
// Taken: G == C, K = m C, a 2-D problem (D = P = T = 1, no depth padding), every size below 2^31, the items
// (N x rows x strips) below 2^31, the chunk's weights within 48 KB of shared memory. Else cudaErrorNotSupported
// and the generic kernels run (3-D depthwise, huge kernels). wgrad also needs the kernel extent along the strips
// to be 3, 5 or 7 with stride 1 or 2 and no dilation there, and a dtype other than float64 (else generic).
//
// Per problem:
//   orientation  channels-last: strips along W, items (n, row, strip). NCHW (channels not innermost, several
//        rows): the problem with H and W swapped, items (n, strip, row): strips run down the columns and a
//        warp's 32 threads take 32 neighbouring columns, so each load instruction reads 32 contiguous elements.
//   V    16 bytes of channels (8 fp16/bf16, 4 fp32, 2 fp64) where m == 1 and every operand's channels are
//        contiguous, aligned and V divides them; else 1 (a channel multiplier m > 1 reads input channel k / m:
//        element loads, which keeps the vector kernels free of a gather path and its registers).
//   bx   threads along channels: up to 8 vectors (a warp reads 128 bytes of each of 4 pixels) or, with V = 1 and
//        channels innermost, up to 32 channels; 1 for NCHW-like layouts (a block's 256 threads then take 256
//        items of one channel's planes). Halved while the chunk's weights pass 48 KB.
//   KS, STR  the kernel extent and stride along the strips at compile time for 3/5/7 x 1/2 (unrolled taps, the
//        strip's input span reused from registers); run-time loops otherwise (float64 always).
//   grid  (channel chunks) x (item blocks); item blocks enough for about 8 blocks a SM over all chunks, never
//        more than the items need: a block stages its chunk's weights once and loops over items.
#include <algorithm>
#include <type_traits>

#include "common/cuda/device.cuh"
#include "common/cuda/int_math.h"
#include "conv/kernels/conv_depthwise_dgrad.cuh"
#include "conv/kernels/conv_depthwise_fprop.cuh"
#include "conv/kernels/conv_depthwise_wgrad.cuh"
#include "conv/kernels/conv_direct_generic.cuh"

namespace torch_dnn {
namespace conv {
namespace {

template <int N>
using dw_int = std::integral_constant<int, N>;

constexpr int64_t kInt32Max = (int64_t(1) << 31) - 1;
constexpr size_t kDwSmemLimit = 48 * 1024;

bool fits32(int64_t v) { return v >= -kInt32Max && v <= kInt32Max; }

// The 2-D depthwise problems the kernels take (before layout and size checks of each pass).
bool is_depthwise_2d(const ConvGeometry& g) {
  if (!(g.G == g.C && g.C > 0 && g.K % g.C == 0)) return false;
  if (g.in[0] != 1 || g.out[0] != 1 || g.ker[0] != 1 || g.pad[0] != 0) return false;
  const int64_t vals[] = {g.N, g.K, g.in[1], g.in[2], g.out[1], g.out[2], g.ker[1], g.ker[2],
                          g.stride[1], g.stride[2], g.pad[1], g.pad[2], g.dil[1], g.dil[2]};
  for (int64_t v : vals)
    if (!fits32(v)) return false;
  // the index arithmetic of a row (q sh - ph + r dh, and dgrad's h + ph) stays in 32 bits
  if (!fits32(g.out[1] * g.stride[1] + g.ker[1] * g.dil[1] + g.in[1] + 2 * g.pad[1])) return false;
  if (!fits32(g.out[2] * g.stride[2] + g.ker[2] * g.dil[2] + g.in[2] + 2 * g.pad[2] + 2 * kDwStrip * g.stride[2]))
    return false;
  return true;
}

// 16-byte vectors of V channels: channels contiguous, the base aligned, every other stride a multiple of V.
bool vec_ok(const Operand5& o, int64_t channels, int V) {
  if (V == 1) return true;
  if (channels % V != 0 || o.stride[1] != 1 || !aligned16(o.ptr)) return false;
  for (int i : {0, 2, 3, 4})
    if (o.stride[i] % V != 0) return false;
  return true;
}

// Compile-time width and stride along W where the kernels have them; 0 for the run-time loops.
int fixed_width(const ConvGeometry& g) {
  const int64_t S = g.ker[2];
  return (S == 3 || S == 5 || S == 7) && (g.stride[2] == 1 || g.stride[2] == 2) && g.dil[2] == 1 ? int(S) : 0;
}

DwParams base_params(const ConvArgs& a) {
  const ConvGeometry& g = a.g;
  DwParams p{};
  p.N = int(g.N), p.C = int(g.C), p.K = int(g.K), p.m = int(g.K / g.C);
  p.H = int(g.in[1]), p.W = int(g.in[2]), p.Q = int(g.out[1]), p.O = int(g.out[2]);
  p.R = int(g.ker[1]), p.S = int(g.ker[2]);
  p.sh = int(g.stride[1]), p.sw = int(g.stride[2]), p.ph = int(g.pad[1]), p.pw = int(g.pad[2]);
  p.dh = int(g.dil[1]), p.dw = int(g.dil[2]);
  p.div_m = FastDivmod32(uint32_t(p.m));
  for (int i = 0; i < 5; ++i) p.xs[i] = a.x.stride[i], p.ws[i] = a.w.stride[i], p.ys[i] = a.y.stride[i];
  return p;
}

// H and W exchanged in the geometry and in every operand's strides.
ConvArgs swap_hw(const ConvArgs& a) {
  ConvArgs b = a;
  for (int64_t* v : {b.g.in, b.g.out, b.g.ker, b.g.stride, b.g.pad, b.g.dil}) std::swap(v[1], v[2]);
  for (Operand5* o : {&b.x, &b.w, &b.y, &b.residual}) std::swap(o->stride[3], o->stride[4]);
  return b;
}

// Where the channels of the operand the items walk are not innermost (one channel a block, bx = 1) and W is its
// innermost spatial dim (NCHW), the kernels run on the problem with H and W swapped and rows fastest: a strip
// runs down a column and neighbouring threads take neighbouring columns, so that a warp's load is 32 contiguous
// elements instead of 32 elements 4 apart. Not for a single row (1-D), whose strips are along W anyway.
ConvArgs plan_orientation(const ConvArgs& a, const Operand5& walked, int64_t rows, bool& rows_fastest) {
  rows_fastest = walked.stride[1] != 1 && rows > 1 && std::abs(walked.stride[4]) <= std::abs(walked.stride[3]);
  return rows_fastest ? swap_hw(a) : a;
}

// Threads along channels for `channels` channels in vectors of V, the channel operand's stride `cs`.
int lanes_for(int64_t channels, int V, int64_t cs) {
  if (V > 1) return pow2_at_least(channels / V, 8);
  return cs == 1 && channels > 1 ? pow2_at_least(channels, 32) : 1;
}

// Fills the strips, items, chunks and divisors; false where the items pass 2^31 or the weights do not fit
// (bx is halved first). `weights_per_channel` floats of shared memory a channel.
template <typename A>
bool finish_plan(DwParams& p, int64_t channels, int V, int64_t rows, int64_t cols, int wshift,
                 int64_t weights_per_channel, bool uses_smem) {
  p.wshift = wshift;
  const int64_t strips = (cols + wshift + kDwStrip - 1) / kDwStrip;
  const int64_t items = int64_t(p.N) * rows * strips;
  if (items >= (int64_t(1) << 31) || strips == 0 || rows == 0) return false;  // (no positions: generic)
  p.strips = int(strips);
  p.items = uint32_t(items);
  p.div_strips = FastDivmod32(uint32_t(strips));
  p.div_rows = FastDivmod32(uint32_t(rows));
  if (uses_smem)
    while (size_t(weights_per_channel) * p.bx * V * sizeof(A) > kDwSmemLimit && p.bx > 1) p.bx /= 2;
  if (uses_smem && size_t(weights_per_channel) * p.bx * V * sizeof(A) > kDwSmemLimit) return false;
  const int64_t chunks = (channels + int64_t(p.bx) * V - 1) / (int64_t(p.bx) * V);
  if (chunks > kMaxGrid) return false;
  p.chunks = int(chunks);
  return true;
}

// Blocks: chunks x item blocks, never more than the items need (each thread then takes several items, which
// spreads the block's weight staging over them), at most
//   channels-last (bx > 1): 2 blocks a SM over all chunks, one wave where two are resident (kDwMinBlocks): the
//        weights are staged once a block and no wave runs part-empty.
//   NCHW (bx = 1): 8 blocks a SM over all chunks (four waves): with one channel a chunk, two a SM would leave a
//        block or two a channel and part of the SMs idle.
// Rounded down, as a block past the waves would make a wave alone (every block takes the same items). Both choices
// measured against the other: docs/conv.md.
int64_t item_grid(const DwParams& p) {
  const int64_t by = kDwThreads / p.bx;
  const int64_t need = (int64_t(p.items) + by - 1) / by;
  const int64_t per_sm = p.bx > 1 ? kDwMinBlocks : 8;
  const int64_t cap = std::max<int64_t>(1, int64_t(sm_count()) * per_sm / p.chunks);
  const int64_t blocks = std::max<int64_t>(1, std::min(need, cap));
  return int64_t(p.chunks) * std::min<int64_t>(blocks, kMaxGrid / p.chunks);
}

// wgrad's slices of the items: two full waves of resident blocks over the R x chunks (filter row, channel chunk)
// pairs, rounded down (every block takes the same items, so a block past the resident slots would run alone in a
// further wave: 30 slices of 18 pairs on 132 SMs x 2 blocks made a third wave of 12 blocks), each item lane with at
// least 4 items. One slice where the pairs fill the waves alone.
template <auto Kernel>
int64_t wgrad_splits(const DwParams& p, int64_t pairs) {
  const int64_t per_sm = std::max(resident_per_sm<Kernel>(kDwThreads), 1);
  const int64_t target = per_sm * sm_count() * 2;
  const int64_t by = kDwThreads / p.bx;
  if (pairs >= target) return 1;
  return std::max<int64_t>(1, std::min<int64_t>(target / pairs, int64_t(p.items) / (by * 4)));
}

// Calls f(dw_int<KS>, dw_int<STR>) for the compile-time width and stride (0, 0: run-time loops).
template <class F>
void dispatch_width(int ks, int str, F&& f) {
  if (ks == 3 && str == 1) f(dw_int<3>{}, dw_int<1>{});
  else if (ks == 3 && str == 2) f(dw_int<3>{}, dw_int<2>{});
  else if (ks == 5 && str == 1) f(dw_int<5>{}, dw_int<1>{});
  else if (ks == 5 && str == 2) f(dw_int<5>{}, dw_int<2>{});
  else if (ks == 7 && str == 1) f(dw_int<7>{}, dw_int<1>{});
  else if (ks == 7 && str == 2) f(dw_int<7>{}, dw_int<2>{});
  else f(dw_int<0>{}, dw_int<0>{});
}

// Calls f(dw_int<VC>, dw_int<KS>, dw_int<STR>): the vector width (kVec16<T> where `vec`, else 1), then the
// compile-time width and stride as dispatch_width picks them. Float64 has the run-time loops only (KS 0: its
// callers pass ks 0), so no fixed-width float64 kernel is compiled.
template <typename T, class F>
void dispatch_vec_width(bool vec, int ks, int str, F&& f) {
  auto go = [&](auto v) {
    dispatch_width(ks, str, [&](auto k, auto s) {
      if constexpr (!std::is_same_v<T, double> || decltype(k)::value == 0) f(v, k, s);
    });
  };
  if (vec) go(dw_int<kVec16<T>>{});
  else go(dw_int<1>{});
}

// The start of every pass's plan: the geometry's parameters, the orientation, the vector width (`vec`: 16 bytes of
// channels where m == 1 and both operands take them) and the lanes along the channels of the operand the items
// walk (`walked`, with `walked_channels`; `other` is the pass's other activation operand).
template <typename T>
DwParams start_plan(const ConvArgs& a, bool rows_fastest, const Operand5& walked, int64_t walked_channels,
                    const Operand5& other, int64_t other_channels, bool& vec) {
  DwParams p = base_params(a);
  p.rows_fastest = rows_fastest;
  constexpr int VV = kVec16<T>;
  vec = p.m == 1 && vec_ok(walked, walked_channels, VV) && vec_ok(other, other_channels, VV);
  p.bx = lanes_for(walked_channels, vec ? VV : 1, walked.stride[1]);
  return p;
}

}  // namespace

cudaError_t depthwise_fprop(const ConvArgs& args, cudaStream_t stream) {
  if (!is_depthwise_2d(args.g)) return cudaErrorNotSupported;
  bool rows_fastest;
  const ConvArgs a = plan_orientation(args, args.y, args.g.out[1], rows_fastest);
  const ConvGeometry& g = a.g;
  cudaError_t result = cudaErrorNotSupported;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    bool vec;
    DwParams p = start_plan<T>(a, rows_fastest, a.y, g.K, a.x, g.C, vec);
    const int V = vec ? kVec16<T> : 1;
    if (!finish_plan<A>(p, g.K, V, g.out[1], g.out[2], 0, g.ker[1] * g.ker[2], true)) return;
    const int ks = std::is_same_v<T, double> ? 0 : fixed_width(g);
    const size_t smem = size_t(p.R) * p.S * p.bx * V * sizeof(A);
    const Epilogue<T> ep = make_epilogue<T>(a);
    const int64_t grid = item_grid(p);
    const T* x = static_cast<const T*>(a.x.ptr);
    const T* w = static_cast<const T*>(a.w.ptr);
    T* y = static_cast<T*>(a.y.ptr);
    dispatch_vec_width<T>(vec, ks, int(g.stride[2]), [&](auto v, auto k, auto s) {
      constexpr int VC = decltype(v)::value, KS = decltype(k)::value, STR = decltype(s)::value;
      launch_direct(conv_depthwise_fprop<T, VC, KS, STR>, grid, kDwThreads, smem, stream, p, x, w, y, ep);
    });
    result = cudaGetLastError();
  });
  return result;
}

cudaError_t depthwise_dgrad(const ConvArgs& args, cudaStream_t stream) {
  if (!is_depthwise_2d(args.g)) return cudaErrorNotSupported;
  bool rows_fastest;
  const ConvArgs a = plan_orientation(args, args.x, args.g.in[1], rows_fastest);
  const ConvGeometry& g = a.g;
  cudaError_t result = cudaErrorNotSupported;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    bool vec;
    DwParams p = start_plan<T>(a, rows_fastest, a.x, g.C, a.y, g.K, vec);
    const int m = p.m;
    const int V = vec ? kVec16<T> : 1;
    const int ks = std::is_same_v<T, double> ? 0 : fixed_width(g);
    const int wshift = ks > 0 ? int(g.pad[2] % g.stride[2]) : 0;
    if (!finish_plan<A>(p, g.C, V, g.in[1], g.in[2], wshift, int64_t(m) * g.ker[1] * g.ker[2], true)) return;
    const size_t smem = size_t(m) * p.R * p.S * p.bx * V * sizeof(A);
    const int64_t grid = item_grid(p);
    const T* dy = static_cast<const T*>(a.y.ptr);
    const T* w = static_cast<const T*>(a.w.ptr);
    T* dx = static_cast<T*>(a.x.ptr);
    dispatch_vec_width<T>(vec, ks, int(g.stride[2]), [&](auto v, auto k, auto s) {
      constexpr int VC = decltype(v)::value, KS = decltype(k)::value, STR = decltype(s)::value;
      launch_direct(conv_depthwise_dgrad<T, VC, KS, STR>, grid, kDwThreads, smem, stream, p, dy, w, dx);
    });
    result = cudaGetLastError();
  });
  return result;
}

cudaError_t depthwise_wgrad(const ConvArgs& args, cudaStream_t stream) {
  if (!is_depthwise_2d(args.g) || args.dtype == DType::Float64) return cudaErrorNotSupported;
  bool rows_fastest;
  const ConvArgs a = plan_orientation(args, args.y, args.g.out[1], rows_fastest);
  const ConvGeometry& g = a.g;
  if (fixed_width(g) == 0) return cudaErrorNotSupported;
  cudaError_t result = cudaErrorNotSupported;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    if constexpr (!std::is_same_v<T, double>) {
      bool vec;
      DwParams p = start_plan<T>(a, rows_fastest, a.y, g.K, a.x, g.C, vec);
      const int V = vec ? kVec16<T> : 1;
      if (!finish_plan<A>(p, g.K, V, g.out[1], g.out[2], 0, 0, false)) return;
      const int64_t base = int64_t(p.R) * p.chunks;
      if (base >= (int64_t(1) << 31)) return;
      const T* dy = static_cast<const T*>(a.y.ptr);
      const T* x = static_cast<const T*>(a.x.ptr);
      T* dw = static_cast<T*>(a.w.ptr);
      const int64_t RS = int64_t(p.R) * p.S;
      dispatch_vec_width<T>(vec, fixed_width(g), int(g.stride[2]), [&](auto v, auto k, auto s) {
        constexpr int VC = decltype(v)::value, KS = decltype(k)::value, STR = decltype(s)::value;
        if constexpr (KS != 0) {
          constexpr auto kernel = conv_depthwise_wgrad<T, VC, KS, STR>;
          int64_t splits = wgrad_splits<kernel>(p, base);
          A* partial = nullptr;
          if (splits > 1) {
            partial = static_cast<A*>(a.workspace.get(splits * g.K * RS * int64_t(sizeof(A))));
            if (partial == nullptr) splits = 1;
          }
          const int64_t grid = std::min<int64_t>(base * splits, kMaxGrid);
          launch_direct(kernel, grid, kDwThreads, 0, stream, p, dy, x, partial, dw, int(splits));
          if (splits > 1) {
            const int64_t count = g.K * RS;
            const int64_t sgrid = std::min<int64_t>((count + kGenericThreads - 1) / kGenericThreads, kMaxGrid);
            launch_direct(conv_wgrad_sum_splits<T>, sgrid, kGenericThreads, 0, stream,
                          static_cast<const A*>(partial), splits, g.K, int64_t(1), g.ker[1], g.ker[2], RS, a.w);
          }
        }
      });
      result = cudaGetLastError();
    }
  });
  return result;
}

}  // namespace conv
}  // namespace torch_dnn

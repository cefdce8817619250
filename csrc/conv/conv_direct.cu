// The direct convolution kernels' entry points (conv_kernels.h): CUDA cores, every dtype, geometry and stride
// pattern; the fallback behind the tensor-core path (which takes groups == 1 with C, K multiples of 8 in 16-bit or
// TF32), so they must never be wrong. Accumulation in float (double for float64), one rounding on store.
//
// Which kernel runs:
//   depthwise (G == C, K = m C), 2-D (D = P = T = 1), every size < 2^31: conv_direct_depthwise.cu, kernels
//       kernels/conv_depthwise_{fprop,dgrad,wgrad}.cuh. Memory-bound (3x3: 9 FMAs a 4-byte bf16 read + write),
//       so the design is about access patterns: a thread owns V channels (a 16-byte vector where the channels are
//       innermost and aligned, else 1) and a strip of 4 neighbouring outputs along a row; a filter row's taps sit
//       in registers (staged per block in shared memory as float) while the strip's input span streams past
//       once, each input vector feeding up to 4 outputs; neighbouring strips share their halos through L1.
//       Blocks of 256 threads: up to 8 channel lanes x 32 item lanes (channels-last: a warp reads 128 contiguous
//       bytes of each of 4 pixels), or 256 item lanes of one channel (NCHW, run with H and W swapped so that a
//       warp takes 32 neighbouring columns); about 8 blocks a SM, each looping over items.
//       fprop  the epilogue (bias, residual, activation) on the strip's accumulators.
//       dgrad  the gather form (no atomics): strips aligned so that w0 + pad is a multiple of the stride, which
//              makes each dy vector's tap for each strip output a compile-time constant; a strided convolution
//              visits only the taps that reach each dx element.
//       wgrad  a block per (filter row, channel chunk, slice of the items): the row's S x V sums in registers,
//              a fixed-order tree over the item lanes, slices summed in slice order by a second kernel through a
//              float workspace (none when the blocks fill the GPU without slicing).
//   everything else: kernels/conv_direct_generic.cuh
//       fprop  256 threads, 2 output positions and KT = 8 output channels of one group a thread (4 or 1 where a
//              group has fewer): the block's weights staged in shared memory as float ([tap][c][KT], chunks of
//              32 channels x the taps that fit 32 KB), so that each input load feeds KT FMAs and each 16-byte
//              shared load 8 of them; grid = (channel tiles) x (position blocks, at most 16 a SM).
//       dgrad  the same shape over dx's positions and CT input channels, weights staged [tap][k][CT]: the gather
//              form, each dx element summing the dy taps that reach it (p = (i + pad - t dil) / stride whole and
//              in range); a tap that reaches none of a thread's positions is skipped.
//       wgrad  one block (256 threads) per (8 output channels, c', 8 taps), each thread summing the 64 products
//              over its positions of a slice of the N P Q O ones (the positions advanced by digit carries, not
//              divisions), then a fixed tree; when the blocks cannot fill the GPU, the positions are cut into
//              slices whose sums go to a float workspace, added up in slice order by conv_wgrad_sum_splits.
//   bias gradient: kernels/conv_direct_bias_grad.cuh, the same two-pass scheme over a tile of channels (32
//       channels x 8 row lanes where channels are innermost, 256 row lanes of one channel otherwise).
// Every reduction is in a fixed order (no atomics): results are bitwise reproducible on one device whatever
// ConvArgs::deterministic says. Empty problems return cudaSuccess before any launch; an empty reduction (no
// input channels, no output positions) writes its zeros (plus bias and residual for fprop).
// tests/test_conv_emulation.py runs all of these on the CPU (TORCH_DNN_EMULATE=1) against PyTorch.
#include <algorithm>
#include <type_traits>

#include "common/cuda/device.cuh"
#include "conv/kernels/conv_direct_bias_grad.cuh"
#include "conv/kernels/conv_direct_generic.cuh"

namespace torch_dnn {
namespace conv {

// conv_direct_depthwise.cu: the depthwise kernels; cudaErrorNotSupported where a problem is not theirs.
cudaError_t depthwise_fprop(const ConvArgs& a, cudaStream_t stream);
cudaError_t depthwise_dgrad(const ConvArgs& a, cudaStream_t stream);
cudaError_t depthwise_wgrad(const ConvArgs& a, cudaStream_t stream);

namespace {

template <int N>
using int_c = std::integral_constant<int, N>;

int64_t spatial(const int64_t* d) { return d[0] * d[1] * d[2]; }
int64_t numel_x(const ConvGeometry& g) { return g.N * g.C * spatial(g.in); }
int64_t numel_y(const ConvGeometry& g) { return g.N * g.K * spatial(g.out); }
int64_t numel_w(const ConvGeometry& g) { return g.K * (g.G > 0 ? g.C / g.G : 0) * spatial(g.ker); }

// A 1-D grid of (tiles) x (position blocks) for the generic fprop / dgrad: pblocks position blocks a tile.
void tile_grid(int64_t positions, int64_t tiles, int64_t& pblocks, int64_t& grid) {
  const int64_t need = (positions + kGenericThreads - 1) / kGenericThreads;
  pblocks = std::max<int64_t>(1, std::min<int64_t>(need, int64_t(sm_count()) * 16));
  grid = pblocks * std::max<int64_t>(1, std::min<int64_t>(tiles, kMaxGrid / pblocks));
}

// The generic fprop's and dgrad's launch shape for tiles of TILE channels (output channels k for fprop, input
// channels c for dgrad) and a reduction over `reduced` channels of the group and the filter's taps: the weights
// staged in chunks of up to 32 reduced channels, then as many taps as fit 32 KB; `positions` positions, PT a thread.
struct GenericLaunch {
  int64_t CB, TC;
  size_t smem;
  int64_t pblocks, grid;
};

template <typename A, int TILE, int PT>
GenericLaunch generic_launch(const ConvGeometry& g, int64_t reduced, int64_t tiled, int64_t positions) {
  constexpr int64_t kStageBytes = 32 * 1024;
  const int64_t TRS = spatial(g.ker);
  GenericLaunch l;
  l.CB = std::max<int64_t>(1, std::min<int64_t>(reduced, 32));
  l.TC = std::max<int64_t>(1, std::min<int64_t>(TRS, kStageBytes / (l.CB * TILE * int64_t(sizeof(A)))));
  l.smem = size_t(l.CB * l.TC * TILE) * sizeof(A);
  tile_grid((positions + PT - 1) / PT, g.G * ((tiled + TILE - 1) / TILE), l.pblocks, l.grid);
  return l;
}

// f(int_c<TILE>) for the widest tile `channels` channels a group fill: 8 (4 for double: 8 x 2 accumulators
// spill), 4 or 1.
template <typename T, class F>
void dispatch_tile(int64_t channels, F&& f) {
  constexpr bool wide = !std::is_same_v<T, double>;
  if (channels >= 8 && wide) f(int_c<wide ? 8 : 4>{});
  else if (channels >= 4) f(int_c<4>{});
  else f(int_c<1>{});
}

// f(T{}, int_c<TILE>{}, launch) for the generic fprop or dgrad of a.dtype: tiles of `tiled` channels a group (output
// channels for fprop, input channels for dgrad), reducing over `reduced` channels of the group and the taps, over
// `positions` positions, PT a thread.
template <int PT, class F>
void dispatch_generic(const ConvArgs& a, int64_t tiled, int64_t reduced, int64_t positions, F&& f) {
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_tile<T>(tiled, [&](auto tile) {
      f(tag, tile, generic_launch<acc_t<T>, decltype(tile)::value, PT>(a.g, reduced, tiled, positions));
    });
  });
}

cudaError_t generic_fprop(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  constexpr int PT = 2;
  dispatch_generic<PT>(a, g.K / g.G, g.C / g.G, g.N * spatial(g.out), [&](auto tag, auto kt, const GenericLaunch& l) {
    using T = decltype(tag);
    launch_direct(conv_generic_fprop<T, decltype(kt)::value, PT>, l.grid, kGenericThreads, l.smem, stream, g, a.x,
                  a.w, a.y, make_epilogue<T>(a), l.pblocks, int(l.CB), int(l.TC));
  });
  return cudaGetLastError();
}

cudaError_t generic_dgrad(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  constexpr int PT = 2;
  dispatch_generic<PT>(a, g.C / g.G, g.K / g.G, g.N * spatial(g.in), [&](auto tag, auto ct, const GenericLaunch& l) {
    launch_direct(conv_generic_dgrad<decltype(tag), decltype(ct)::value, PT>, l.grid, kGenericThreads, l.smem, stream,
                  g, a.y, a.w, a.x, l.pblocks, int(l.CB), int(l.TC));
  });
  return cudaGetLastError();
}

// Slices of a reduction of `length` terms for `blocks` blocks of 256 threads: enough blocks to fill the GPU
// twice, each thread summing at least `min_terms` terms.
int64_t reduction_splits(int64_t blocks, int64_t length, int64_t min_terms) {
  const int64_t target = int64_t(sm_count()) * 16;
  if (blocks >= target || length <= 0) return 1;
  const int64_t by_work = std::max<int64_t>(1, length / (int64_t(kGenericThreads) * min_terms));
  return std::max<int64_t>(1, std::min<int64_t>((target + blocks - 1) / blocks, by_work));
}

cudaError_t generic_wgrad(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  const int64_t Cg = g.C / g.G, Kg = g.K / g.G, TRS = spatial(g.ker), L = g.N * spatial(g.out);
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    auto go = [&](auto kt, auto tt) {
      constexpr int KT = decltype(kt)::value, TT = decltype(tt)::value;
      const int64_t items = g.G * ((Kg + KT - 1) / KT) * Cg * ((TRS + TT - 1) / TT);
      int64_t splits = reduction_splits(items, L, 8);
      A* partial = nullptr;
      if (splits > 1) {
        partial = static_cast<A*>(a.workspace.get(splits * g.K * Cg * TRS * int64_t(sizeof(A))));
        if (partial == nullptr) splits = 1;
      }
      const int64_t grid = std::min<int64_t>(items * splits, kMaxGrid);
      launch_direct(conv_generic_wgrad<T, KT, TT>, grid, kGenericThreads, 0, stream, g, a.y, a.x, a.w, partial, items,
                    splits);
      if (splits > 1) {
        const int64_t count = g.K * Cg * TRS;
        const int64_t sgrid = std::min<int64_t>((count + kGenericThreads - 1) / kGenericThreads, kMaxGrid);
        launch_direct(conv_wgrad_sum_splits<T>, sgrid, kGenericThreads, 0, stream, static_cast<const A*>(partial),
                      splits, g.K, Cg, g.ker[1], g.ker[2], TRS, a.w);
      }
    };
    auto go_taps = [&](auto kt) {
      if (TRS >= 8) go(kt, int_c<8>{});
      else go(kt, int_c<1>{});
    };
    constexpr bool wide = !std::is_same_v<T, double>;  // (double: 64 accumulators spill)
    if (Kg >= 8 && wide) go_taps(int_c<wide ? 8 : 4>{});
    else if (Kg >= 4) go_taps(int_c<4>{});
    else go_taps(int_c<1>{});
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t conv_direct_fprop(const ConvArgs& a, cudaStream_t stream) {
  if (numel_y(a.g) == 0) return cudaSuccess;
  const cudaError_t e = depthwise_fprop(a, stream);
  if (e != cudaErrorNotSupported) return e;
  return generic_fprop(a, stream);
}

cudaError_t conv_direct_dgrad(const ConvArgs& a, cudaStream_t stream) {
  if (numel_x(a.g) == 0) return cudaSuccess;
  const cudaError_t e = depthwise_dgrad(a, stream);
  if (e != cudaErrorNotSupported) return e;
  return generic_dgrad(a, stream);
}

cudaError_t conv_direct_wgrad(const ConvArgs& a, cudaStream_t stream) {
  if (numel_w(a.g) == 0) return cudaSuccess;
  const cudaError_t e = depthwise_wgrad(a, stream);
  if (e != cudaErrorNotSupported) return e;
  return generic_wgrad(a, stream);
}

cudaError_t conv_bias_grad(DType dtype, const ConvGeometry& g, const Operand5& dy, void* db, const Workspace& ws,
                           cudaStream_t stream) {
  if (g.K == 0) return cudaSuccess;
  const int64_t sizes[4] = {g.N, g.out[0], g.out[1], g.out[2]};
  const int64_t strides[4] = {dy.stride[0], dy.stride[2], dy.stride[3], dy.stride[4]};
  const RowDims rows = collapse_rows(sizes, strides, 4);
  const int64_t kstride = dy.stride[1];
  // channels across the threads where they lie closer together than the rows' innermost elements
  const int64_t inner = rows.nd > 0 ? rows.s[rows.nd - 1] : 0;
  const int lanes_k = g.K > 1 && (rows.nd == 0 || std::abs(kstride) < std::abs(inner)) ? 32 : 1;
  const int64_t kblocks = (g.K + lanes_k - 1) / lanes_k;
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    int64_t splits = reduction_splits(kblocks, rows.total * lanes_k, 16);
    A* partial = nullptr;
    if (splits > 1) {
      partial = static_cast<A*>(ws.get(splits * g.K * int64_t(sizeof(A))));
      if (partial == nullptr) splits = 1;
    }
    const int64_t grid = std::min<int64_t>(kblocks * splits, kMaxGrid);
    launch_direct(conv_bias_grad_rows<T>, grid, kBiasThreads, 0, stream, static_cast<const T*>(dy.ptr), kstride, g.K,
                  rows, lanes_k, kblocks, splits, partial, static_cast<T*>(db));
    if (splits > 1) {
      const int64_t sgrid = std::min<int64_t>((g.K + kBiasThreads - 1) / kBiasThreads, kMaxGrid);
      launch_direct(conv_bias_grad_sum_splits<T>, sgrid, kBiasThreads, 0, stream, static_cast<const A*>(partial),
                    splits, g.K, static_cast<T*>(db));
    }
  });
  return cudaGetLastError();
}

}  // namespace conv
}  // namespace torch_dnn

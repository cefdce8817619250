// The direct convolution kernels' entry points (conv_kernels.h): CUDA cores, every dtype, geometry and stride
// pattern; the fallback behind the tensor-core path, so they must never be wrong.
//
// Which kernel runs:
//   depthwise (G == C, K = m C), 2-D (D = P = T = 1), no dilation along W, every dim < 2^31:
//       conv_direct_depthwise.cu (kernels/conv_depthwise_*.cuh): memory-bound kernels, one thread a vector of
//       channels (channels-last) or a strip of a plane (NCHW); see that file.
//   everything else: kernels/conv_direct_generic.cuh
//       fprop  256 threads, one output position a thread, KT = 4 output channels of one group a thread (1 where
//              a group has fewer than 4); grid = (channel tiles) x (position blocks, at most 16 a SM).
//       dgrad  the same shape over dx's positions and CT = 4 (or 1) input channels: the gather form, each dx
//              element summing the dy taps that reach it, no atomics.
//       wgrad  one block (256 threads) per (k, c', 8 taps), reducing over a slice of the N P Q O positions in
//              a fixed tree; when (K C/G taps/8) blocks cannot fill the GPU, the positions are cut into slices
//              whose sums go to a float workspace, added up in slice order by a second kernel.
//   bias gradient: kernels/conv_direct_bias_grad.cuh, the same two-pass scheme over a tile of channels.
// Every reduction is in a fixed order (no atomics): results are bitwise reproducible on one device, whatever
// ConvArgs::deterministic says. Empty problems return cudaSuccess before any launch.
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

cudaError_t generic_fprop(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  const int64_t Kg = g.K / g.G;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const Epilogue<T> ep = make_epilogue<T>(a);
    auto go = [&](auto kt) {
      constexpr int KT = decltype(kt)::value;
      int64_t pblocks, grid;
      tile_grid(g.N * spatial(g.out), g.G * ((Kg + KT - 1) / KT), pblocks, grid);
      launch_direct(conv_generic_fprop<T, KT>, grid, kGenericThreads, 0, stream, g, a.x, a.w, a.y, ep, pblocks);
    };
    if (Kg >= 4) go(int_c<4>{});
    else go(int_c<1>{});
  });
  return cudaGetLastError();
}

cudaError_t generic_dgrad(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  const int64_t Cg = g.C / g.G;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto ct) {
      constexpr int CT = decltype(ct)::value;
      int64_t pblocks, grid;
      tile_grid(g.N * spatial(g.in), g.G * ((Cg + CT - 1) / CT), pblocks, grid);
      launch_direct(conv_generic_dgrad<T, CT>, grid, kGenericThreads, 0, stream, g, a.y, a.w, a.x, pblocks);
    };
    if (Cg >= 4) go(int_c<4>{});
    else go(int_c<1>{});
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
  const int64_t Cg = g.C / g.G, TRS = spatial(g.ker), L = g.N * spatial(g.out);
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    auto go = [&](auto tt) {
      constexpr int TT = decltype(tt)::value;
      const int64_t items = g.K * Cg * ((TRS + TT - 1) / TT);
      int64_t splits = reduction_splits(items, L, 8);
      A* partial = nullptr;
      if (splits > 1) {
        partial = static_cast<A*>(a.workspace.get(splits * g.K * Cg * TRS * int64_t(sizeof(A))));
        if (partial == nullptr) splits = 1;
      }
      const int64_t grid = std::min<int64_t>(items * splits, kMaxGrid);
      launch_direct(conv_generic_wgrad<T, TT>, grid, kGenericThreads, 0, stream, g, a.y, a.x, a.w, partial, items,
                    splits);
      if (splits > 1) {
        const int64_t count = g.K * Cg * TRS;
        const int64_t sgrid = std::min<int64_t>((count + kGenericThreads - 1) / kGenericThreads, kMaxGrid);
        launch_direct(conv_wgrad_sum_splits<T>, sgrid, kGenericThreads, 0, stream, static_cast<const A*>(partial),
                      splits, g.K, Cg, g.ker[1], g.ker[2], TRS, a.w);
      }
    };
    if (TRS >= 8) go(int_c<8>{});
    else go(int_c<1>{});
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

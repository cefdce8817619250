// The implicit-GEMM kernel: the matmul family's sm_80 mainloop (gemm_mma.cuh: CTA 128 x 128 x 64 bytes of K,
// 8 warps of 64 x 32, mma.sync, a 4-stage cp.async pipeline into XOR-swizzled tiles) with the operand loads and
// the epilogue supplied by a Problem, and CTA tiles of 128 x 64 (8 warps of 32 x 32, as 4 x 2) or 64 x 128
// (2 x 4) for problems whose N or M is at most 64, where half of a 128-wide tile would be zeros:
//   Problem::Params   kernel parameters, with tiles_m, tiles_n, ktiles, splits and kt_per_split
//   Problem::Loader   Loader(p, m0, n0, kt0, tid) positioned at K tile kt0; load(p, sA, sB, m0, n0, tid) issues
//                     the cp.async copies of the next K tile (every thread, every tile: the copies of a stage are
//                     one commit group) and advances
//   Problem::kAK/kBK  the shared-memory tile orientation of A and B (K-major or not)
//   Problem::kBM/kBN  the CTA tile (128 x 128, 128 x 64 or 64 x 128)
//   Problem::epilogue(p, cs, m0, n0, split, tid)   after the float accumulators are staged in cs [128][kLdc]
// blockIdx.x walks the output tiles (grouped rasterisation), blockIdx.z the K splits.
#pragma once
#include "conv/kernels/conv_igemm_common.cuh"

namespace torch_dnn {
namespace conv {
namespace igemm {

template <typename T, class Problem>
__global__ void __launch_bounds__(kThreads, 2) igemm_kernel(const typename Problem::Params p) {
  constexpr int BM = Problem::kBM, BN = Problem::kBN;
  constexpr int WN = BN / 32, WM = 8 / WN, MI = BM / WM / 16;  // warps along N and M, 16-row fragments a warp
  static_assert(WN * WM == kThreads / 32 && WM * MI * 16 == BM, "8 warps of MI * 16 x 32");
  using TA = mma::Tile<T, Problem::kAK, BM>;
  using TB = mma::Tile<T, Problem::kBK, BN>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  constexpr int kStageElems = TA::ELEMS + TB::ELEMS;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;

  int64_t tm, tn;
  tile_of(blockIdx.x, p.tiles_m, p.tiles_n, tm, tn);
  const int64_t m0 = tm * BM, n0 = tn * BN;
  const int split = blockIdx.z;
  const int kt0 = split * p.kt_per_split;
  const int kt1 = kt0 + p.kt_per_split < p.ktiles ? kt0 + p.kt_per_split : p.ktiles;
  const int nk = kt1 > kt0 ? kt1 - kt0 : 0;

  typename Problem::Loader loader(p, m0, n0, kt0, tid);
  auto load_stage = [&](int stage) {
    T* sA = smem + stage * kStageElems;
    loader.load(p, sA, sA + TA::ELEMS, m0, n0, tid);
  };

  float acc[MI][4][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < nk) load_stage(st);
    mma::cp_async_commit();
  }
#pragma unroll 1
  for (int it = 0; it < nk; ++it) {
    mma::cp_async_wait<kStages - 2>();
    __syncthreads();  // stage it is in; every warp is done with stage it - 1, which the next load refills
    const int nxt = it + kStages - 1;
    if (nxt < nk) load_stage(nxt % kStages);
    mma::cp_async_commit();
    const T* sA = smem + (it % kStages) * kStageElems;
    mma::compute_stage<T, Problem::kAK, Problem::kBK, MI, BM, BN>(sA, sA + TA::ELEMS, acc, wm, wn, lane);
  }
  mma::cp_async_wait<0>();
  __syncthreads();

  // accumulators -> shared (float [BM][kLdc], BN columns used)
  float* cs = reinterpret_cast<float*>(smem_raw);
  {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
        const int r = wm * (MI * 16) + i * 16 + g, c = wn * 32 + jn * 8 + 2 * t;
        *reinterpret_cast<float2*>(cs + r * kLdc + c) = make_float2(acc[i][jn][0], acc[i][jn][1]);
        *reinterpret_cast<float2*>(cs + (r + 8) * kLdc + c) = make_float2(acc[i][jn][2], acc[i][jn][3]);
      }
  }
  __syncthreads();
  Problem::epilogue(p, cs, m0, n0, split, tid);
}

}  // namespace igemm
}  // namespace conv
}  // namespace torch_dnn

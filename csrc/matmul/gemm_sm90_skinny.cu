// The Hopper path's kernels for skinny x @ w.T (M <= 256 rows of x against a long weight, N >= 4 M), where the
// 128x256 and 128x128 tiles of gemm_sm90.cu would spend most of each MMA on rows of x that do not exist:
//   Swap16 / Swap64 / Swap256: swap-AB, D^T = w x^T, so the weight's rows fill wgmma's 128-row side and x's rows
//     its N side (a 16-, 64- or 256-wide tile). Each weight tile is read from DRAM once. D^T is column-major in D's memory
//     and the bias runs along the kernel's rows (Sm90Gemm's kSwapped). Cluster 2x1: the two weight tiles of a
//     cluster share x's tile by TMA multicast.
//   Swap64x64: swap-AB on 64 weight rows a tile (wgmma's own M) on the ping-pong kernel, one consumer warpgroup
//     a tile, x's rows 64 wide.
//   Narrow: x @ w.T as it stands on 128x64 tiles (128 rows of x by 64 weight rows), cluster 1x2 (two weight
//     tiles share x's tile): cuBLAS's arrangement for M = 256 with few weight tiles.
//   Mid12: Narrow's arrangement on 128x128 tiles.
//   Not built: Narrow in 2x2 / 1x4 clusters, with K tiles of 128, or without a cluster; Mid12 with K tiles of
//   128; a kernel of our own in nvjet's arrangement (docs/matmul.md has the measurements that chose these).
// Which one (skinny_shape): M <= 16 Swap16; M <= 64 Swap64x64; M <= 128 Narrow (Swap64x64 where its tiles make one
// full wave and Narrow's half of one); M > 128 Swap256 where its tiles
// fill 3/4 of the SMs, else Mid12 where its tiles do, else Narrow (Swap64 only when forced).
// Decomposition: one CTA per tile when the tiles fill 3/4 of the SMs; otherwise split-K as a batched GEMM whose
// batch index walks K (each operand's batch stride is the K range; TMA zero-fills past each range's end), writing
// float partials [split][M][N]; a second kernel sums them in split order (deterministic) and applies the
// epilogue. The splits run independently: CUTLASS's own stream-K split-K instead adds them into the workspace in a
// turnstile (each waits for the one before), which serialises them (docs/matmul.md has the measurements).
// Instantiations (20 = 10 x bf16, fp16): Swap16, Swap64, Swap64x64 and Narrow each with output T (whole K) or
// float (a split's partial), Swap256 and Mid12 with output T.
// See gemm_sm90.cu for NDEBUG.
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "matmul/kernels/sm90_gemm.cuh"

#include "common/cuda/vec.cuh"

namespace torch_dnn {
namespace matmul {
namespace sm90 {
namespace {

using C12 = Shape<_1, _2, _1>;
template <class T, int W, class ED>
using Swap = Sm90Gemm<T, RowM, ColM, ED, Shape<_128, Int<W>, _64>, C21, Persistent, false, false, true>;
// 64 weight rows a tile (wgmma's own M) on the ping-pong kernel, one consumer warpgroup a tile: twice the CTAs of
// Swap64 over a short weight, each streaming half the bytes, without split-K.
template <class T, class ED>
using Swap64x64 = Sm90Gemm<T, RowM, ColM, ED, Shape<_64, _64, _64>, C21, Persistent, false, true, true>;
template <class T, class ED>
using Narrow = Sm90Gemm<T, RowM, ColM, ED, Shape<_128, _64, _64>, C12, Persistent, false>;
// Narrow's arrangement on 128 weight rows a tile: each warpgroup's m64n128 MMA needs 3/4 of the smem bytes a FLOP
// of m64n64, on half the CTAs: for M > 128 where those fill the SMs (there the MMAs take as long as the weight's
// stream).
template <class T>
using Mid12 = Sm90Gemm<T, RowM, ColM, T, Shape<_128, _128, _64>, C12, Persistent, false>;

enum class SkinnyKernel { Swap16, Swap64, Swap64x64, Swap256, Narrow, Mid12 };
static_assert(sizeof(kSm90SkinnyKernelChoices) / sizeof(*kSm90SkinnyKernelChoices) == size_t(SkinnyKernel::Mid12) + 1,
              "TORCH_DNN_SM90_SKINNY_KERNEL's choices name SkinnyKernel's kernels in its order");

struct SkinnyShape {
  SkinnyKernel k;
  int64_t tiles;  // CTAs of one K range, cluster padding included
};

// Why each (the measurements: docs/matmul.md):
// M <= 16 takes a 16-wide tile: on the 64-wide one, 3/4 of each MMA multiplies the zeros TMA fills in for
// missing rows of x, about the whole time budget of a short weight's stream (cuBLAS: 128x16 tiles, 11 stages).
// 16 < M <= 64 takes 64-row weight tiles (Swap64x64): with 128-row tiles a short weight (K = N = 4096) gives only
// 32 CTAs, each streaming 1 MB and spending most of its time in MMAs; with more tiles than SMs each CTA's two
// warpgroups take turns over several tiles (test_linear_act_skinny_many_tiles covers that path).
// 64 < M <= 128 takes Narrow (one row tile of x, shared by each 1x2 pair), except where Narrow's tiles fill at most
// half the SMs and Swap64x64's (two x tiles of 64) one wave: there Narrow leaves half the SMs idle.
// MatmulKnobs::sm90_skinny_kernel (TORCH_DNN_SM90_SKINNY_KERNEL) forces one (a measurement knob).
SkinnyShape skinny_shape(const GemmArgs& a) {
  const int64_t sms = sm_count_or_h100();
  const auto even = [](int64_t v) { return (v + 1) / 2 * 2; };
  const int64_t wtiles = even((a.N + 127) / 128);
  const auto fill = [&](int64_t tiles) { return tiles * 4 >= sms * 3; };  // 3/4 of the SMs
  const int64_t tiles64 = even((a.N + 63) / 64) * ((a.M + 63) / 64);  // Swap64x64's
  SkinnyKernel k = a.M <= 16                        ? SkinnyKernel::Swap16
                   : a.M <= 64                      ? SkinnyKernel::Swap64x64
                   : a.M <= 128                     ? (fill(tiles64) && tiles64 <= sms ? SkinnyKernel::Swap64x64
                                                                                       : SkinnyKernel::Narrow)
                   : fill(wtiles)                   ? SkinnyKernel::Swap256
                   : fill((a.M + 127) / 128 * wtiles) ? SkinnyKernel::Mid12
                                                    : SkinnyKernel::Narrow;
  if (a.knobs.sm90_skinny_kernel >= 0) k = SkinnyKernel(a.knobs.sm90_skinny_kernel);
  switch (k) {
    case SkinnyKernel::Swap16: return {k, wtiles * ((a.M + 15) / 16)};
    case SkinnyKernel::Swap64: return {k, wtiles * ((a.M + 63) / 64)};
    case SkinnyKernel::Swap64x64: return {k, tiles64};
    case SkinnyKernel::Swap256: return {k, wtiles * ((a.M + 255) / 256)};
    case SkinnyKernel::Mid12: return {k, (a.M + 127) / 128 * wtiles};
    default: return {k, (a.M + 127) / 128 * even((a.N + 63) / 64)};
  }
}

// The problem as a swap-AB kernel sees it: D^T (N x M) = w (N x K, K-major) times x^T (x: M x K, K-major).
GemmArgs swapped(const GemmArgs& a) {
  GemmArgs s = a;
  s.M = a.N;
  s.N = a.M;
  s.A = MatrixRef{a.B.ptr, a.B.ld, 0, false};
  s.B = MatrixRef{a.A.ptr, a.A.ld, 0, true};
  return s;
}
bool swaps(const SkinnyShape& sh) { return sh.k != SkinnyKernel::Narrow && sh.k != SkinnyKernel::Mid12; }
GemmArgs oriented(const GemmArgs& a, const SkinnyShape& sh) { return swaps(sh) ? swapped(a) : a; }

// Two row tiles of x, the second partly past row M (Narrow and Mid12 with 128 < M < 256; Swap64x64, whose x tiles
// are 64 wide, with 64 < M < 128) run as a batch of two problems of one whole tile each, over rows [0, T) and
// [M - T, M): every TMA box of x then lies inside x. A box partly out of bounds is slow to fill, the slower the more
// of its rows lie past M (docs/matmul.md).
// Rows [M - T, T) are computed by both halves and stored twice, with the same bits (the same data and
// instructions). Only where all tiles run in one wave: the persistent scheduler walks the batch last, so with more
// tiles than SMs the second half reads the weight again after the first, where in one wave both halves ask for each
// weight tile at the same time. Not where D is
// the residual (the second half would read rows the first has written). MatmulKnobs::sm90_skinny_overlap
// (TORCH_DNN_SM90_SKINNY_OVERLAP=0) turns it off (a measurement knob).
int overlap_tile(const GemmArgs& a, const SkinnyShape& sh) {  // T, or 0: no overlapped halves
  const int64_t sms = sm_count_or_h100();
  if (sh.tiles > sms || a.residual == a.D || !a.knobs.sm90_skinny_overlap) return 0;
  if ((sh.k == SkinnyKernel::Narrow || sh.k == SkinnyKernel::Mid12) && a.M > 128 && a.M < 256) return 128;
  if (sh.k == SkinnyKernel::Swap64x64 && a.M > 64 && a.M < 128) return 64;
  return 0;
}
GemmArgs whole_k_args(const GemmArgs& a, const SkinnyShape& sh) {
  const int t = overlap_tile(a, sh);
  GemmArgs o = oriented(a, sh);
  if (t == 0) return o;
  const int64_t shift = a.M - t;  // rows of x, D and the residual between the two halves
  const bool swap = swaps(sh);    // x is the swap-AB kernels' B (its rows their N), else A
  (swap ? o.N : o.M) = t;
  MatrixRef& x = swap ? o.B : o.A;
  MatrixRef& w = swap ? o.A : o.B;
  o.batch = 2;
  x.batch_stride = shift * a.A.ld;
  w.batch_stride = 0;
  o.batch_stride_d = shift * a.ldd;
  o.batch_stride_r = a.residual != nullptr ? shift * a.ldr : 0;
  return o;
}

// K ranges: 1 when the tiles cover 3/4 of the SMs (and always for Swap256), else as many as the free SMs allow,
// each at least 4096 long and a whole multiple of 8 elements (a 16-byte batch stride, TMA's rule). Shorter ranges
// measured no faster than one CTA a tile (docs/matmul.md), and one range saves a launch and a workspace on the host.
// MatmulKnobs::sm90_skinny_splits (TORCH_DNN_SM90_SKINNY_SPLITS=n) asks for n (a measurement knob; still made
// valid).
int splits_for(const GemmArgs& a, const SkinnyShape& sh) {
  if (sh.k == SkinnyKernel::Swap256 || sh.k == SkinnyKernel::Mid12) return 1;
  const int64_t sms = sm_count_or_h100();
  int64_t s = sh.tiles * 4 >= sms * 3 ? 1 : std::min(sms / sh.tiles, a.K / 4096);  // 1 where they fill 3/4
  if (a.knobs.sm90_skinny_splits > 0) s = a.knobs.sm90_skinny_splits;
  for (; s > 1; --s)
    if (a.K % s == 0 && (a.K / s) % 8 == 0) break;
  return int(std::max<int64_t>(s, 1));
}

// Split s's GEMM: K range [s * K / splits, (s + 1) * K / splits) as batch s, float partials [s][M][N], no epilogue.
GemmArgs partial_args(const GemmArgs& a, const SkinnyShape& sh, int splits, float* part) {
  GemmArgs p = oriented(a, sh);
  p.K = a.K / splits;
  p.batch = splits;
  p.A.batch_stride = p.K;
  p.B.batch_stride = p.K;
  p.D = part;
  p.ldd = a.N;
  p.batch_stride_d = a.M * a.N;
  p.bias = nullptr;
  p.residual = nullptr;
  p.preact = nullptr;
  p.act = Act::Identity;
  return p;
}

int64_t partial_bytes(const GemmArgs& a, int splits) { return (int64_t(splits) * a.M * a.N * 4 + 255) / 256 * 256; }

// D = act(sum_s part[s] + bias) + residual, 4 columns a thread, the splits added in order.
template <typename T, Act K>
__global__ void __launch_bounds__(256) finish_splits(const float* __restrict__ part, int splits, int64_t M, int64_t N,
                                                     const T* __restrict__ bias, const T* __restrict__ res, int64_t ldr,
                                                     T* __restrict__ D, int64_t ldd, float pa, float pb) {
  constexpr bool kFast = sizeof(T) == 2;
  const int64_t quads = N / 4, total = M * quads, plane = M * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / quads, n = (i - m * quads) * 4;
    const float* p = part + m * N + n;
    float4 acc = __ldcg(reinterpret_cast<const float4*>(p));
    for (int s = 1; s < splits; ++s) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p + s * plane));
      acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
    }
    float v[4] = {acc.x, acc.y, acc.z, acc.w};
    float b[4] = {0.f, 0.f, 0.f, 0.f}, r[4] = {0.f, 0.f, 0.f, 0.f};
    if (bias != nullptr) load_acc<4>(bias + n, b);
    if (res != nullptr) load_acc<4>(res + m * ldr + n, r);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = activation::act_forward<K, float, kFast>(v[j] + b[j], pa, pb) + r[j];
    store_acc<4>(D + m * ldd + n, v);
  }
}

template <typename T>
cudaError_t launch_finish(const GemmArgs& a, const float* part, int splits, cudaStream_t stream) {
  const int64_t total = a.M * (a.N / 4);
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, int64_t(device_info().sm_count) * 8));
  const T* bias = static_cast<const T*>(a.bias);
  const T* res = static_cast<const T*>(a.residual);
  T* D = static_cast<T*>(a.D);
  const float pa = float(a.act_params.a), pb = float(a.act_params.b);
  switch (a.act) {
#define TD_FINISH(KIND)                                                                                        \
  case Act::KIND:                                                                                              \
    finish_splits<T, Act::KIND><<<blocks, 256, 0, stream>>>(part, splits, a.M, a.N, bias, res, a.ldr, D, a.ldd, \
                                                            pa, pb);                                           \
    break;
    TD_FINISH(Identity)
    TD_FINISH(Relu)
    TD_FINISH(Gelu)
    TD_FINISH(GeluTanh)
    TD_FINISH(Silu)
#undef TD_FINISH
    default: return cudaErrorNotSupported;  // gemm_sm90_plan admits only the epilogue's activations
  }
  return cudaGetLastError();
}

template <class T, class F>
auto dispatch_typed(SkinnyKernel k, bool partial, F&& f) {
  if (k == SkinnyKernel::Swap16)
    return partial ? f.template operator()<Swap<T, 16, float>, T>() : f.template operator()<Swap<T, 16, T>, T>();
  if (k == SkinnyKernel::Swap64)
    return partial ? f.template operator()<Swap<T, 64, float>, T>() : f.template operator()<Swap<T, 64, T>, T>();
  if (k == SkinnyKernel::Swap64x64)
    return partial ? f.template operator()<Swap64x64<T, float>, T>() : f.template operator()<Swap64x64<T, T>, T>();
  if (k == SkinnyKernel::Narrow)
    return partial ? f.template operator()<Narrow<T, float>, T>() : f.template operator()<Narrow<T, T>, T>();
  if (k == SkinnyKernel::Mid12) return f.template operator()<Mid12<T>, T>();                // never splits
  return f.template operator()<Swap<T, 256, T>, T>();  // Swap256 never splits (splits_for)
}

template <class F>
auto dispatch_skinny(const GemmArgs& a, SkinnyKernel k, bool partial, F&& f) {
  return a.dtype == DType::BFloat16 ? dispatch_typed<bf16>(k, partial, f) : dispatch_typed<fp16>(k, partial, f);
}

}  // namespace

cudaError_t run_skinny(const GemmArgs& a, const WorkspaceSource& workspace, cudaStream_t stream) {
  const SkinnyShape sh = skinny_shape(a);
  const int splits = splits_for(a, sh);
  if (splits == 1)
    return dispatch_skinny(a, sh.k, false,
                           [&]<class Cfg, class T>() { return run<Cfg>(whole_k_args(a, sh), workspace, stream); });
  float* part = static_cast<float*>(workspace.get(partial_bytes(a, splits)));
  if (part == nullptr) return cudaErrorMemoryAllocation;
  const GemmArgs p = partial_args(a, sh, splits, part);
  return dispatch_skinny(a, sh.k, true, [&]<class Cfg, class T>() {
    using Elem = cute::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat16, __half>;
    cudaError_t err = run<Cfg>(p, workspace, stream);
    return err != cudaSuccess ? err : launch_finish<Elem>(a, part, splits, stream);
  });
}

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn

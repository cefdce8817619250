// The Hopper path's swap-AB kernels, for skinny x @ w.T (M <= 256 rows of x against a long weight, N >= 4 M):
// the kernel computes D^T = w x^T, so the weight's rows fill wgmma's 128-row side and x's few rows its N side
// (a 64- or 256-wide tile). Each weight tile is then read from DRAM once, the problem's floor, where the
// 128x128 stream-K kernel read it once per 128 rows of x and spent most of each MMA on rows that do not exist.
// D^T is column-major in D's memory and the bias runs along the kernel's rows (Sm90Gemm's kSwapped).
//
// Tiles (swap_shape): 128 weight rows by 64 rows of x (M <= 64, or M > 64 where the weight's tiles are few:
// two x tiles of a cluster then share the weight tile), or by 256 rows of x (M > 64 with weight tiles for 3/4 of
// the SMs). Decomposition: one CTA per tile when the tiles fill 3/4 of the SMs. Otherwise split-K (K = N = 4096,
// M <= 64: 32 tiles x 4 K ranges) as a batched GEMM whose batch index walks K (each operand's
// batch stride is the K range), writing float partials [split][M][N]; a second kernel sums them in split order
// (deterministic) and applies the epilogue. H100: CUTLASS's stream-K split-K, whose turnstile adds each split
// to the workspace in turn, was slower than no split at all (M = 16, K = N = 4096: 23.7 us at 4 splits, 17.9
// at 1; benchmarks/NOTES.md).
// Instantiations (10 = 5 x bf16, fp16): 64-wide with cluster 2x1 or 1x2, each with output T (whole K) or float
// (a split's partial); 256-wide with cluster 2x1 and output T.
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

// Cluster 2x1: the two weight tiles of a cluster share x's tile by TMA multicast (one tile across x's rows);
// 1x2: two tiles across x's rows share the weight tile (M > 64 on 64-wide tiles).
using C12 = Shape<_1, _2, _1>;
template <class T, int W, class ED, class Cluster = C21>
using Swap = Sm90Gemm<T, RowM, ColM, ED, Shape<_128, Int<W>, _64>, Cluster, Persistent, false, false, true>;

// The tiles of a swap-AB problem: 128 weight rows by `width` rows of x, in clusters of two.
struct SwapShape {
  int width;        // 64 or 256
  bool share_w;     // cluster 1x2 (two x tiles share the weight tile), else 2x1
  int64_t tiles;    // including the cluster's padding
};

// M <= 64: one 64-wide tile across x. M > 64: one 256-wide tile where the weight's tiles fill 3/4 of the SMs
// (K = N = 16384: 128 tiles), else 64-wide tiles across x (K = N = 4096, M = 256: 4 x 32 tiles) sharing the
// weight tile in pairs. H100, M = 256, K = N = 4096: 256-wide with 4 K splits 30.2 us, 64-wide with x shared
// (2x1) 24.1 us, cuBLAS (128x64 tiles, cluster 1x2) 18.2 us (benchmarks/NOTES.md).
// TORCH_DNN_SM90_SWAP_TILE=64 takes the 64-wide tiles for every M (a measurement knob, read at every call).
SwapShape swap_shape(const GemmArgs& a) {
  const int64_t wtiles = (a.N + 127) / 128;
  const int64_t sms = device_info().sm_count > 0 ? device_info().sm_count : 132;
  if (a.M <= 64) return {64, false, (wtiles + 1) / 2 * 2};
  const char* e = std::getenv("TORCH_DNN_SM90_SWAP_TILE");
  const bool force64 = e != nullptr && std::strcmp(e, "64") == 0;
  if (!force64 && wtiles * 4 >= sms * 3) return {256, false, (wtiles + 1) / 2 * 2 * ((a.M + 255) / 256)};
  return {64, true, wtiles * ((a.M + 127) / 128 * 2)};
}

// The problem as the kernel sees it: D^T (N x M) = w (N x K, K-major) times x^T (x: M x K, K-major).
GemmArgs swapped(const GemmArgs& a) {
  GemmArgs s = a;
  s.M = a.N;
  s.N = a.M;
  s.A = MatrixRef{a.B.ptr, a.B.ld, 0, false};
  s.B = MatrixRef{a.A.ptr, a.A.ld, 0, true};
  return s;
}

// K ranges: 1 when the tiles (clusters of two) cover 3/4 of the SMs, else as many as the free SMs allow, each
// at least 4 K tiles of 64 and a whole multiple of 8 elements (a 16-byte batch stride, TMA's rule).
// TORCH_DNN_SM90_SWAP_SPLITS=n asks for n (a measurement knob, read at every call; still made valid).
int splits_for(const GemmArgs& a, const SwapShape& sh) {
  const int64_t tiles = sh.tiles;
  const int64_t sms = device_info().sm_count > 0 ? device_info().sm_count : 132;
  int64_t s = tiles * 4 >= sms * 3 ? 1 : std::min(sms / tiles, a.K / 256);
  if (const char* e = std::getenv("TORCH_DNN_SM90_SWAP_SPLITS"); e != nullptr && std::atoi(e) > 0) s = std::atoi(e);
  for (; s > 1; --s)
    if (a.K % s == 0 && (a.K / s) % 8 == 0) break;
  return int(std::max<int64_t>(s, 1));
}

// Split s's GEMM: K range [s * K / splits, (s + 1) * K / splits) as batch s, float partials, no epilogue.
GemmArgs partial_args(const GemmArgs& a, int splits, float* part) {
  GemmArgs p = swapped(a);
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
    default: return cudaErrorNotSupported;  // gemm_sm90_supports admits only the epilogue's activations
  }
  return cudaGetLastError();
}

template <class F>
auto dispatch_swap(const GemmArgs& a, const SwapShape& sh, bool partial, F&& f) {
  const bool bf = a.dtype == DType::BFloat16;
#define TD_SWAP(T, W, CL) \
  return partial ? f.template operator()<Swap<T, W, float, CL>, T>() : f.template operator()<Swap<T, W, T, CL>, T>()
  if (sh.share_w) {
    if (bf) TD_SWAP(bf16, 64, C12);
    TD_SWAP(fp16, 64, C12);
  }
  if (sh.width == 64) {
    if (bf) TD_SWAP(bf16, 64, C21);
    TD_SWAP(fp16, 64, C21);
  }
  // 256-wide tiles only where the weight's tiles fill the SMs: never split
  if (bf) return f.template operator()<Swap<bf16, 256, bf16>, bf16>();
  return f.template operator()<Swap<fp16, 256, fp16>, fp16>();
#undef TD_SWAP
}

}  // namespace

int64_t swap_workspace_bytes(const GemmArgs& a) {
  const SwapShape sh = swap_shape(a);
  const int splits = sh.width == 256 ? 1 : splits_for(a, sh);
  if (splits == 1)
    return dispatch_swap(a, sh, false, [&]<class Cfg, class T>() { return workspace_bytes<Cfg>(swapped(a)); });
  const GemmArgs p = partial_args(a, splits, nullptr);
  return partial_bytes(a, splits) +
         dispatch_swap(a, sh, true, [&]<class Cfg, class T>() { return workspace_bytes<Cfg>(p); });
}

cudaError_t run_swap(const GemmArgs& a, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  const SwapShape sh = swap_shape(a);
  const int splits = sh.width == 256 ? 1 : splits_for(a, sh);
  if (splits == 1)
    return dispatch_swap(a, sh, false, [&]<class Cfg, class T>() {
      return run<Cfg>(swapped(a), workspace, workspace_bytes, stream);
    });
  const int64_t pb = partial_bytes(a, splits);
  if (workspace == nullptr || workspace_bytes < pb) return cudaErrorInvalidValue;
  float* part = static_cast<float*>(workspace);
  const GemmArgs p = partial_args(a, splits, part);
  return dispatch_swap(a, sh, true, [&]<class Cfg, class T>() {
    using Elem = cute::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat16, __half>;
    cudaError_t err = run<Cfg>(p, static_cast<char*>(workspace) + pb, workspace_bytes - pb, stream);
    return err != cudaSuccess ? err : launch_finish<Elem>(a, part, splits, stream);
  });
}

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn

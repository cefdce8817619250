// The Hopper path's swap-AB kernels, for skinny x @ w.T (M <= 256 rows of x against a long weight, N >= 4 M):
// the kernel computes D^T = w x^T, so the weight's rows fill wgmma's 128-row side and x's few rows its N side
// (a 64- or 256-wide tile). Each weight tile is then read from DRAM once, the problem's floor, where the
// 128x128 stream-K kernel read it once per 128 rows of x and spent most of each MMA on rows that do not exist.
// D^T is column-major in D's memory and the bias runs along the kernel's rows (Sm90Gemm's kSwapped).
//
// Decomposition: one CTA per 128 weight rows when those tiles fill 3/4 of the SMs (K = N = 16384: 128 tiles),
// else split-K (K = N = 4096: 32 tiles x 4 K ranges), reduced by CUTLASS's stream-K scheduler in K order
// (deterministic). Cluster 2x1: the two weight tiles of a cluster share x's tile by TMA multicast.
// Instantiations (4): bf16, fp16 x width 64, 256. See gemm_sm90.cu for NDEBUG.
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include "matmul/kernels/sm90_gemm.cuh"

namespace torch_dnn {
namespace matmul {
namespace sm90 {
namespace {

template <class T, int W>
using Swap = Sm90Gemm<T, RowM, ColM, T, Shape<_128, Int<W>, _64>, C21, StreamK, false, false, true>;

// The problem as the kernel sees it: D^T (N x M) = w (N x K, K-major) times x^T (x: M x K, K-major).
GemmArgs swapped(const GemmArgs& a) {
  GemmArgs s = a;
  s.M = a.N;
  s.N = a.M;
  s.A = MatrixRef{a.B.ptr, a.B.ld, 0, false};
  s.B = MatrixRef{a.A.ptr, a.A.ld, 0, true};
  return s;
}

// K ranges per tile: 1 when the tiles (clusters of two) cover 3/4 of the SMs, else as many as the free SMs
// allow with at least 4 K tiles of 64 each. TORCH_DNN_SM90_SWAP_SPLITS=n fixes it (a measurement knob, read
// at every call).
int splits_for(const GemmArgs& a) {
  if (const char* e = std::getenv("TORCH_DNN_SM90_SWAP_SPLITS"); e != nullptr && std::atoi(e) > 0)
    return std::atoi(e);
  const int64_t tiles = ((a.N + 127) / 128 + 1) / 2 * 2;
  const int64_t sms = device_info().sm_count > 0 ? device_info().sm_count : 132;
  if (tiles * 4 >= sms * 3) return 1;
  const int64_t by_k = (a.K + 63) / 64 / 4;
  return int(std::max<int64_t>(1, std::min(sms / tiles, by_k)));
}

template <class F>
auto dispatch_swap(const GemmArgs& a, int width, F&& f) {
  const bool bf = a.dtype == DType::BFloat16;
  if (width == 64) return bf ? f.template operator()<Swap<bf16, 64>>() : f.template operator()<Swap<fp16, 64>>();
  return bf ? f.template operator()<Swap<bf16, 256>>() : f.template operator()<Swap<fp16, 256>>();
}

}  // namespace

int64_t swap_workspace_bytes(const GemmArgs& a, int width) {
  const GemmArgs s = swapped(a);
  const int splits = splits_for(a);
  return dispatch_swap(a, width, [&]<class Cfg>() { return workspace_bytes<Cfg>(s, splits); });
}

cudaError_t run_swap(const GemmArgs& a, int width, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  const GemmArgs s = swapped(a);
  const int splits = splits_for(a);
  return dispatch_swap(a, width, [&]<class Cfg>() { return run<Cfg>(s, workspace, workspace_bytes, stream, splits); });
}

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn

// group_norm's cluster kernels (csrc/group_norm/kernels/gn_cluster.cuh) run on the CPU, against a float64
// reference: forward (y, mean, rstd) and backward (dx, per-(n, c) P and Q), NCHW and channels-last, bf16 / float /
// double, cluster sizes 1 to 16 (trailing ranks without rows included), a persistent grid of two clusters. A
// cluster runs as K * blockDim host threads at once: __syncthreads is a per-CTA barrier, cluster.sync() a
// barrier of all of them, map_shared_rank a pointer into another CTA's buffer, cp.async a memcpy. This checks
// index arithmetic, the exchange protocol's sums and the host plan; not the GPU's memory model or timing.
// Standalone (no torch): tests/test_group_norm.py::test_cluster_emulation builds it with g++ and runs it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

struct EmuDim {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmuDim emu_thread_idx, emu_block_idx;
inline EmuDim emu_block_dim, emu_grid_dim;
inline thread_local unsigned emu_rank = 0;

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// The running cluster: K CTAs' shared memory, barriers and shuffle exchanges.
struct EmuClusterState {
  unsigned K = 1, T = 1;
  std::vector<std::vector<unsigned char>> smem;
  std::vector<std::unique_ptr<std::barrier<>>> cta_bar;
  std::unique_ptr<std::barrier<>> cluster_bar;
  std::vector<std::vector<double>> exchange;
};
inline EmuClusterState emu_cl;

inline void __syncthreads() { emu_cl.cta_bar[emu_rank]->arrive_and_wait(); }
inline float __uint_as_float(uint32_t u) {  // vec.cuh's packed bf16 reads
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  std::vector<double>& ex = emu_cl.exchange[emu_rank];
  const unsigned t = emu_thread_idx.x, w = unsigned(width);
  ex[t] = double(v);
  __syncthreads();
  const T r = T(ex[(t & ~(w - 1)) | ((t & (w - 1)) ^ unsigned(lane_mask))]);
  __syncthreads();
  return r;
}

struct EmuCluster {
  unsigned num_blocks() const { return emu_cl.K; }
  unsigned block_rank() const { return emu_rank; }
  void sync() const { emu_cl.cluster_bar->arrive_and_wait(); }
  template <typename T>
  T* map_shared_rank(T* p, unsigned r) const {
    const std::ptrdiff_t off = reinterpret_cast<unsigned char*>(p) - emu_cl.smem[emu_rank].data();
    return reinterpret_cast<T*>(emu_cl.smem[r].data() + off);
  }
};
inline EmuCluster emu_this_cluster() { return {}; }
inline unsigned char* emu_dynamic_smem() { return emu_cl.smem[emu_rank].data(); }

// The runtime calls of the launchers, for a pretend device of two SMs that holds two clusters at once.
inline int emu_clusters_resident = 2;
inline cudaError_t emu_cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t emu_cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 227 * 1024 : 2;
  return cudaSuccess;
}
inline cudaError_t emu_cudaGetLastError() { return cudaSuccess; }
template <typename K>
cudaError_t emu_cudaFuncGetAttributes(cudaFuncAttributes* a, K*) {
  std::memset(a, 0, sizeof(*a));
  a->binaryVersion = 90;
  return cudaSuccess;
}
template <typename K>
cudaError_t emu_cudaFuncSetAttribute(K*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
template <typename K>
cudaError_t emu_cudaOccupancyMaxActiveClusters(int* n, K*, const cudaLaunchConfig_t*) {
  *n = emu_clusters_resident;
  return cudaSuccess;
}
inline int emu_last_K = 0;
template <typename... P, typename... Args>
cudaError_t emu_cudaLaunchKernelEx(const cudaLaunchConfig_t* cfg, void (*kernel)(P...), Args... args) {
  unsigned K = 1;
  for (unsigned i = 0; i < cfg->numAttrs; ++i)
    if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension) K = cfg->attrs[i].val.clusterDim.x;
  emu_last_K = int(K);
  // fields by position: blockDim / gridDim are macros below
  const auto [grid3, block3, smem_bytes, st, attrs, nattrs] = *cfg;
  const unsigned T = block3.x, grid = grid3.x;
  if (grid % K != 0) return cudaErrorInvalidValue;
  emu_block_dim = EmuDim{T, 1, 1};
  emu_grid_dim = EmuDim{grid, 1, 1};
  for (unsigned c = 0; c < grid / K; ++c) {
    emu_cl.K = K;
    emu_cl.T = T;
    emu_cl.smem.assign(K, std::vector<unsigned char>(smem_bytes, 0xFF));  // poisoned
    emu_cl.cta_bar.clear();
    for (unsigned r = 0; r < K; ++r) emu_cl.cta_bar.push_back(std::make_unique<std::barrier<>>(T));
    emu_cl.cluster_bar = std::make_unique<std::barrier<>>(K * T);
    emu_cl.exchange.assign(K, std::vector<double>(T));
    std::vector<std::thread> threads;
    for (unsigned r = 0; r < K; ++r)
      for (unsigned t = 0; t < T; ++t)
        threads.emplace_back([=] {
          emu_rank = r;
          emu_thread_idx = EmuDim{t, 0, 0};
          emu_block_idx = EmuDim{c * K + r, 0, 0};
          kernel(args...);
        });
    for (auto& th : threads) th.join();
  }
  return cudaSuccess;
}
#define cudaGetDevice emu_cudaGetDevice
#define cudaDeviceGetAttribute emu_cudaDeviceGetAttribute
#define cudaGetLastError emu_cudaGetLastError
#define cudaFuncGetAttributes emu_cudaFuncGetAttributes
#define cudaFuncSetAttribute emu_cudaFuncSetAttribute
#define cudaOccupancyMaxActiveClusters emu_cudaOccupancyMaxActiveClusters
#define cudaLaunchKernelEx emu_cudaLaunchKernelEx

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx emu_thread_idx
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim

inline uint32_t __umulhi(uint32_t a, uint32_t b) { return uint32_t((uint64_t(a) * b) >> 32); }
inline int4 __ldcs(const int4* p) { return *p; }
inline void __stcs(int4* p, int4 v) { *p = v; }

#include "group_norm/kernels/gn_cluster.cuh"

using namespace torch_dnn;
using namespace torch_dnn::group_norm;

static int failures = 0;

template <typename T>
double val(T v) {
  return double(to_acc<acc_t<T>>(v));
}

// One case: forward then backward through the cluster plan, checked against float64 on the same (rounded) inputs.
template <typename T>
void run_case(int64_t N, int64_t C, int64_t S, int64_t G, bool cl, const char* tile_kb, const char* kmax,
              bool y_nchw = false) {
  using A = acc_t<T>;
  setenv("TORCH_DNN_GN_PLAN", "cluster", 1);
  setenv("TORCH_DNN_GN_TILE_KB", tile_kb, 1);
  setenv("TORCH_DNN_GN_CLUSTER_MAX", kmax, 1);
  const int64_t numel = N * C * S, D = C / G, L = D * S;
  std::mt19937 gen(unsigned(N * 1000003 + C * 101 + S * 7 + G + cl));
  std::uniform_real_distribution<double> U(-3, 5), Ug(-1, 1), Uw(0.5, 1.5);
  std::vector<T> x(numel), dy(numel), y(numel, from_acc<T>(A(NAN))), dx(numel, from_acc<T>(A(NAN))), w(C), b(C);
  for (auto& v : x) v = from_acc<T>(A(U(gen)));
  for (auto& v : dy) v = from_acc<T>(A(Ug(gen)));
  for (auto& v : w) v = from_acc<T>(A(Uw(gen)));
  for (auto& v : b) v = from_acc<T>(A(Ug(gen)));
  std::vector<A> mean(N * G, A(NAN)), rstd(N * G, A(NAN)), P(N * C, A(NAN)), Q(N * C, A(NAN));
  auto at = [&](int64_t n, int64_t c, int64_t s) { return cl ? (n * S + s) * C + c : (n * C + c) * S + s; };
  const double eps = 1e-5;
  GnParams<T> p{x.data(), nullptr, w.data(), b.data(), y.data(), mean.data(), rstd.data(), A(eps), N, C, S, G, D, L, cl};
  p.out_nchw = y_nchw;  // channels-last x, y written contiguous
  auto at_y = [&](int64_t n, int64_t c, int64_t s) { return y_nchw ? (n * C + c) * S + s : at(n, c, s); };
  char name[160];
  std::snprintf(name, sizeof name, "%s N=%ld C=%ld S=%ld G=%ld %s tile_kb=%s kmax=%s", sizeof(T) == 2 ? "16-bit" :
                sizeof(T) == 4 ? "float" : "double", long(N), long(C), long(S), long(G),
                cl ? (y_nchw ? "CL -> NCHW y" : "CL") : "NCHW", tile_kb, kmax);
  const Knobs knobs = read_knobs();  // as the launcher reads them once a call: the settings above
  if (!try_cluster_fwd(p, true, knobs, nullptr)) {
    std::printf("FAIL %s: forward plan not taken\n", name);
    ++failures;
    return;
  }
  const int Kf = emu_last_K;
  p.dy = dy.data();
  p.out = dx.data();
  p.b = nullptr;
  p.out_nchw = false;
  if (!try_cluster_bwd(p, P.data(), Q.data(), true, knobs, nullptr)) {
    std::printf("FAIL %s: backward plan not taken\n", name);
    ++failures;
    return;
  }
  const int Kb = emu_last_K;
  const double tol_out = sizeof(T) == 2 ? 2e-2 : sizeof(T) == 4 ? 2e-5 : 1e-10;
  const double tol_stat = sizeof(T) == 8 ? 1e-10 : 2e-5;
  double worst = 0;
  auto check = [&](double got, double want, double tol, const char* what, int64_t i) {
    const double err = std::fabs(got - want) / (1 + std::fabs(want));
    if (!(err <= tol)) {
      if (failures < 20) std::printf("FAIL %s: %s[%ld] = %g, want %g\n", name, what, long(i), got, want);
      ++failures;
    }
    worst = std::max(worst, err / tol);
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s = 0, q = 0;
      for (int64_t d = 0; d < D; ++d)
        for (int64_t e = 0; e < S; ++e) s += val(x[at(n, g * D + d, e)]);
      const double m = s / L;
      for (int64_t d = 0; d < D; ++d)
        for (int64_t e = 0; e < S; ++e) q += (val(x[at(n, g * D + d, e)]) - m) * (val(x[at(n, g * D + d, e)]) - m);
      const double rs = 1 / std::sqrt(q / L + double(A(eps)));
      check(double(mean[n * G + g]), m, tol_stat, "mean", n * G + g);
      check(double(rstd[n * G + g]), rs, tol_stat, "rstd", n * G + g);
      // backward with the kernel's own statistics (as the op is used)
      const double mk = double(mean[n * G + g]), rk = double(rstd[n * G + g]);
      double c1 = 0, c2 = 0;
      for (int64_t d = 0; d < D; ++d) {
        const int64_t c = g * D + d;
        double pc = 0, qc = 0;
        for (int64_t e = 0; e < S; ++e) {
          const int64_t i = at(n, c, e);
          check(val(y[at_y(n, c, e)]), (val(x[i]) - m) * rs * val(w[c]) + val(b[c]), tol_out, "y", at_y(n, c, e));
          pc += val(dy[i]) * (val(x[i]) - mk) * rk;
          qc += val(dy[i]);
        }
        check(double(P[n * C + c]), pc, 1e-4 * (sizeof(T) == 8 ? 1e-6 : 1), "P", n * C + c);
        check(double(Q[n * C + c]), qc, 1e-4 * (sizeof(T) == 8 ? 1e-6 : 1), "Q", n * C + c);
        c1 += val(w[c]) * pc;
        c2 += val(w[c]) * qc;
      }
      c1 /= L;
      c2 /= L;
      for (int64_t d = 0; d < D; ++d)
        for (int64_t e = 0; e < S; ++e) {
          const int64_t c = g * D + d, i = at(n, c, e);
          const double xh = (val(x[i]) - mk) * rk;
          check(val(dx[i]), rk * (val(dy[i]) * val(w[c]) - xh * c1 - c2), tol_out * 4, "dx", i);
        }
    }
  std::printf("%s %s: K fwd %d bwd %d, worst error / tolerance %.3f\n", failures ? "after failures" : "ok", name, Kf,
              Kb, worst);
}

int main() {
  // channels-last: 8 groups of 8 channels (128-byte bf16 rows), W = 32 (3 x 17), two 32-channel groups a row
  run_case<__nv_bfloat16>(3, 64, 63, 8, true, "50", "16");
  run_case<__nv_bfloat16>(3, 64, 63, 8, true, "1", "16");    // K = 16, rows of 4
  run_case<__nv_bfloat16>(2, 256, 20, 32, true, "2", "4");  // 4 items an image, K = 4
  run_case<__nv_bfloat16>(5, 32, 51, 4, true, "1", "8");
  run_case<__nv_bfloat16>(2, 64, 25, 2, true, "1", "2");
  run_case<float>(3, 64, 63, 8, true, "1", "16");
  run_case<double>(2, 16, 30, 4, true, "1", "4");
  // channels-last x, y contiguous: chunks rounded to whole vectors of S (S = 64: K = 16 gives rows of 8, K = 16 with
  // S = 72 rows of 8 and trailing ranks without rows), W = 64 / 32 / 16 channels, a persistent grid
  run_case<__nv_bfloat16>(3, 64, 64, 8, true, "50", "16", true);
  run_case<__nv_bfloat16>(3, 64, 72, 8, true, "1", "16", true);
  run_case<__nv_bfloat16>(2, 256, 24, 32, true, "2", "4", true);
  run_case<__nv_bfloat16>(5, 32, 48, 4, true, "1", "8", true);
  run_case<__nv_bfloat16>(2, 16, 40, 2, true, "1", "2", true);
  run_case<float>(3, 64, 60, 8, true, "1", "16", true);
  run_case<double>(2, 16, 30, 4, true, "1", "4", true);
  // NCHW: one group an item; S % V == 0; trailing ranks with no rows (S = 144, K = 16: chunk 16, ranks 9-15 empty)
  run_case<__nv_bfloat16>(2, 32, 144, 2, false, "1", "16");
  run_case<__nv_bfloat16>(3, 24, 320, 3, false, "50", "16");
  run_case<__nv_bfloat16>(3, 24, 320, 3, false, "1", "2");
  run_case<float>(2, 12, 40, 3, false, "1", "4");
  run_case<double>(2, 6, 18, 6, false, "1", "8");  // instance_norm-like: one channel a group
  std::printf(failures ? "FAILED (%d)\n" : "PASSED\n", failures);
  return failures ? 1 : 0;
}

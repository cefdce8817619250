// Standalone check and timing of the K2 skinny kernel against cuBLAS (one-off; nvcc -arch=sm_90a).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cublas_v2.h>
#include "skinny_k2.cuh"
using namespace torch_dnn::matmul::sm90;
using torch_dnn::activation::Act;
typedef __nv_bfloat16 bf;

__global__ void fill(bf* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
    p[i] = __float2bfloat16((float(h & 0xFFFF) / 32768.f - 1.f) * scale);
  }
}
__global__ void ref(const bf* x, const bf* w, float* d, int M, int N, int K) {
  int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float s = 0;
  for (int k = 0; k < K; ++k) s += __bfloat162float(x[size_t(m) * K + k]) * __bfloat162float(w[size_t(n) * K + k]);
  d[size_t(m) * N + n] = s;
}
#define CK(...) do { cudaError_t e_ = (__VA_ARGS__); if (e_ != cudaSuccess) { printf("CUDA %s at %d: %s\n", #__VA_ARGS__, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

int main() {
  cublasHandle_t h; cublasCreate(&h);
  printf("variant: swap %d share %d stages %d smem %d B, max active clusters %d\n", TD_K2_SWAP, TD_K2_SHARE,
         TD_K2_STAGES, k2::kSmem, k2_max_active_clusters<bf, Act::Identity>());
  int shapes[][2] = {{256, 4096}, {200, 4096}, {160, 4096}, {136, 4096}, {256, 8192}, {160, 8192}, {128, 4096}, {256, 1000}, {256, 4104}};
  const bool once = getenv("K2_ONCE") != nullptr;
  for (auto& sh : shapes) {
    if (once && sh[1] != 4096) continue;
    int M = sh[0], KN = sh[1], N = KN, K = KN;
    size_t wn = size_t(N) * K;
    int copies = std::max<size_t>(2, (160ull << 20) / (wn * 2) + 1);
    bf *x, *d, *d2; std::vector<bf*> ws(copies); float* r;
    const int Mp = (M + 127) / 128 * 128;  // x is allocated with padded rows (timed both ways below)
    CK(cudaMalloc(&x, size_t(Mp) * K * 2)); CK(cudaMalloc(&d, size_t(M) * N * 2)); CK(cudaMalloc(&d2, size_t(M) * N * 2));
    CK(cudaMalloc(&r, size_t(M) * N * 4));
    for (int i = 0; i < copies; ++i) { CK(cudaMalloc(&ws[i], wn * 2)); fill<<<1024, 256>>>(ws[i], wn, 17 + i, 0.05f); }
    fill<<<1024, 256>>>(x, size_t(M) * K, 3, 1.f);
    CK(cudaMemset(d, 0xFF, size_t(M) * N * 2));  // poison (NaN)
    K2Epilogue e; e.D = d; e.ldd = N;
    CK(launch_skinny_k2<bf, Act::Identity>(x, K, ws[0], K, M, N, K, e, 0));
    CK(cudaDeviceSynchronize());
    ref<<<dim3((N + 127) / 128, M), 128>>>(x, ws[0], r, M, N, K);
    CK(cudaDeviceSynchronize());
    std::vector<bf> hd(size_t(M) * N); std::vector<float> hr(size_t(M) * N);
    CK(cudaMemcpy(hd.data(), d, hd.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hr.data(), r, hr.size() * 4, cudaMemcpyDeviceToHost));
    double maxerr = 0, maxref = 0; size_t bad = 0;
    for (size_t i = 0; i < hd.size(); ++i) {
      double v = __bfloat162float(hd[i]), err = fabs(v - hr[i]);
      if (!(err <= 0.02 + 0.01 * fabs(hr[i]))) ++bad;
      if (err > maxerr || err != err) maxerr = err; maxref = std::max(maxref, fabs(double(hr[i])));
    }
    if (once) {
      float one = 1, zero = 0;
      for (int i = 0; i < 3; ++i) launch_skinny_k2<bf, Act::Identity>(x, K, ws[i % copies], K, M, N, K, e, 0);
      for (int i = 0; i < 3; ++i)
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, ws[i % copies], CUDA_R_16BF, K, x, CUDA_R_16BF, K, &zero,
                     d2, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      cudaDeviceSynchronize();
      break;
    }
    // timing: 100 calls cycling the weight copies
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    float alpha = 1, beta = 0;
    auto time = [&](auto fn) {
      for (int i = 0; i < 10; ++i) fn(i);
      float best = 1e9;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(a); for (int i = 0; i < 100; ++i) fn(i); cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); best = std::min(best, ms * 10.f);
      }
      return best;
    };
    float tk = time([&](int i) { launch_skinny_k2<bf, Act::Identity>(x, K, ws[i % copies], K, M, N, K, e, 0); });
    float tc = time([&](int i) {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, ws[i % copies], CUDA_R_16BF, K, x, CUDA_R_16BF, K, &beta,
                   d2, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    std::vector<CUtensorMap> maps(copies + 1);
    k2::make_k2_map(&maps[copies], x, M, K, K, true, k2::kXBox);
    for (int i = 0; i < copies; ++i) k2::make_k2_map(&maps[i], ws[i], N, K, K, true, k2::kWBox);
    float tk2 = time([&](int i) { launch_skinny_k2_maps<bf, Act::Identity>(maps[copies], maps[i % copies], M, N, K, e, 0); });
    CK(cudaGetLastError());
    float tpad = 0;
    if (Mp != M) {  // the same kernel with x's map covering the padded rows: no partly out-of-bounds TMA boxes
      CUtensorMap xp;
      k2::make_k2_map(&xp, x, Mp, K, K, true, k2::kXBox);
      tpad = time([&](int i) { launch_skinny_k2_maps<bf, Act::Identity>(xp, maps[i % copies], M, N, K, e, 0); });
    }
    printf("M=%d K=N=%d  x map over %d rows: %.2f us\n", M, KN, Mp, tpad);
    printf("M=%d K=N=%d  maxerr %.4g (max |ref| %.3g, bad %zu)  k2 %.2f / maps prebuilt %.2f us  cuBLAS %.2f us  ratio %.3f\n", M, KN,
           maxerr, maxref, bad, tk, tk2, tc, tc / std::min(tk, tk2));
    cudaFree(x); cudaFree(d); cudaFree(d2); cudaFree(r); for (auto p : ws) cudaFree(p);
  }
  return 0;
}

// EXPERIMENT (not part of the extension; benchmarks/NOTES.md, twenty-second session): TF32 C = A B on Hopper with
// both operands rounded to TF32 (cvt.rna) by the producer warpgroup on their way into shared memory, B transposed
// there too (A row-major [M][K], B row-major [K][N]: torch.mm's layout, where the extension rounds and transposes
// into copies before its CUTLASS kernel, ~0.35 of ~3.3 ms at 8192^3). Question: does the producer's work hide
// inside the MMAs, i.e. does this run at the CUTLASS kernel's speed without the copies?
//
// Tile 128x256x32, TD_STAGES stages of 48 KB, 384 threads: warpgroup 0 the producer (all 128 threads load with
// 16-byte global loads, round, store into the 128B-swizzled K-major stage, fence.proxy.async, arrive on the
// stage's full barrier: 128 arrivals), warpgroups 1-2 the consumers (rows 0-63 / 64-127, wgmma m64n256k8 tf32
// from shared memory, 128 float accumulators a thread; the stage released after the next stage's MMAs were
// issued: wait<1>). Epilogue: float2 stores from registers. Non-persistent grid with grouped raster.
// Build and run: run.sh beside this file (nvcc -arch=sm_90a, cuBLAS).
// Result (H100, twenty-second session): correct on the first run, with cuBLAS's TF32 error exactly (relative l2
// 2.618e-4 against 2.616e-4 at 8192^3; without the rounding 7.0e-4, 2.68x: cuBLAS rounds both operands), but
// 6.6 ms against cuBLAS's 2.85 (0.43x; 6.1 without the rounding, 6.3 with 3 stages): the producer is bound by the
// latency of its global loads, one stage's 48 KB in its registers at a time. Keeping 1.5 stages in flight would
// take ~72 KB of producer registers; not pursued.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "../skinny_k2/sm90_wgmma.cuh"

namespace ptx = torch_dnn::matmul::sm90::ptx;

#ifndef TD_STAGES
#define TD_STAGES 4
#endif
#ifndef TD_GROUP
#define TD_GROUP 16
#endif
#ifndef TD_ROUND
#define TD_ROUND 1
#endif
constexpr int kStages = TD_STAGES, kBM = 128, kBN = 256, kBK = 32;
constexpr int kBytesA = kBM * kBK * 4, kBytesB = kBN * kBK * 4, kBytesStage = kBytesA + kBytesB;
constexpr int kSmem = 1024 + kStages * kBytesStage + 2 * kStages * 8;

__device__ __forceinline__ float4 round4(float4 v) {
#if TD_ROUND
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v.x)); v.x = __uint_as_float(r);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v.y)); v.y = __uint_as_float(r);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v.z)); v.z = __uint_as_float(r);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v.w)); v.w = __uint_as_float(r);
#endif
  return v;
}
// Byte offset of 16-byte chunk c (0-7) of row r in a K-major tile of 128-byte rows, 128B swizzle (the layout TMA
// writes and wgmma's 128B-swizzle descriptors read): the chunk index XOR the row's index within its 8-row group.
__device__ __forceinline__ uint32_t swz(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(ptx::smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_tf32_m64n256k8(float (&d)[128], uint64_t da, uint64_t db) {
#define R8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, "
      "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, "
      "%89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "
      "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127}, %128, %129, p, 1, 1;\n"
      "}\n"
      : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56), R8(64), R8(72), R8(80), R8(88), R8(96),
        R8(104), R8(112), R8(120)
      : "l"(da), "l"(db));
#undef R8
}

__global__ void __launch_bounds__(384, 1) tf32p_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ C, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kBytesStage);
  uint64_t* empty = full + kStages;
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0), t = threadIdx.x % 128;
  // grouped raster: TD_GROUP row tiles walked together
  const int mt = (M + kBM - 1) / kBM, nt = (N + kBN - 1) / kBN;
  const int id = blockIdx.x, per_group = TD_GROUP * nt, g = id / per_group;
  const int first_m = g * TD_GROUP, gm = min(mt - first_m, TD_GROUP);
  const int m0 = (first_m + (id % per_group) % gm) * kBM, n0 = ((id % per_group) / gm) * kBN;
  const int ktiles = K / kBK;  // the experiment takes K % 32 == 0, M % 128 == 0, N % 256 == 0

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], 128);
      ptx::mbar_init(&empty[s], 8);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    const int lane = t % 32, w = t / 32;
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % kStages, u = kt / kStages;
      if (u > 0) ptx::mbar_wait(&empty[s], (u - 1) & 1);
      const uint32_t sa = ptx::smem_addr(smem + s * kBytesStage), sb = sa + kBytesA;
      const int k0 = kt * kBK;
      // A: 128 rows x 8 chunks; a warp covers 4 rows x 8 chunks a step
      float4 va[8];
#pragma unroll
      for (int it = 0; it < 8; ++it) {
        const int cid = it * 128 + t, r = cid / 8, c = cid % 8;
        va[it] = *reinterpret_cast<const float4*>(A + size_t(m0 + r) * K + k0 + 4 * c);
      }
      // B: 64 n-blocks x 8 k-blocks of 4x4; a warp takes 8 n-blocks x 4 k-blocks a step (16 groups, 4 steps)
      float4 vb[4][4];
#pragma unroll
      for (int it = 0; it < 4; ++it) {
        const int grp = w + 4 * it, nb = (grp % 8) * 8 + lane % 8, kb = (grp / 8) * 4 + lane / 8;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          vb[it][j] = *reinterpret_cast<const float4*>(B + size_t(k0 + 4 * kb + j) * N + n0 + 4 * nb);
      }
#pragma unroll
      for (int it = 0; it < 8; ++it) {
        const int cid = it * 128 + t, r = cid / 8, c = cid % 8;
        st_shared_v4(sa + swz(r, c), round4(va[it]));
      }
#pragma unroll
      for (int it = 0; it < 4; ++it) {
        const int grp = w + 4 * it, nb = (grp % 8) * 8 + lane % 8, kb = (grp / 8) * 4 + lane / 8;
        // vb[it][j] holds B[k0 + 4kb + j][n0 + 4nb + i] in component i: row n = 4nb + i of the K-major tile gets
        // elements k = 4kb .. 4kb + 3, i.e. chunk kb of that row
        const float4 (&q)[4] = vb[it];
        st_shared_v4(sb + swz(4 * nb + 0, kb), round4(make_float4(q[0].x, q[1].x, q[2].x, q[3].x)));
        st_shared_v4(sb + swz(4 * nb + 1, kb), round4(make_float4(q[0].y, q[1].y, q[2].y, q[3].y)));
        st_shared_v4(sb + swz(4 * nb + 2, kb), round4(make_float4(q[0].z, q[1].z, q[2].z, q[3].z)));
        st_shared_v4(sb + swz(4 * nb + 3, kb), round4(make_float4(q[0].w, q[1].w, q[2].w, q[3].w)));
      }
      fence_proxy_async();  // our generic-proxy stores, before wgmma (async proxy) reads them
      mbar_arrive(&full[s]);
    }
  } else {
    const int c = wg - 1, lane = t % 32;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    fence_acc(acc);
    int prev = -1;
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % kStages;
      ptx::mbar_wait(&full[s], (kt / kStages) & 1);
      const uint32_t a = ptx::smem_addr(smem + s * kBytesStage);
      const uint64_t da = ptx::desc_k128(a + c * (kBytesA / 2)), db = ptx::desc_k128(a + kBytesA);
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 8; ++k) wgmma_tf32_m64n256k8(acc, da + 2 * k, db + 2 * k);  // +32 bytes a step
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();
      fence_acc(acc);
      if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
      prev = s;
    }
    ptx::wgmma_wait<0>();
    fence_acc(acc);
    if (prev >= 0 && lane == 0) mbar_arrive(&empty[prev]);
    const int r0 = m0 + 64 * c + 16 * (t / 32) + (t % 32) / 4, cq = n0 + 2 * (t % 4);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(C + size_t(r0 + 8 * h) * N + cq + 8 * j) = make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
#endif
}

__global__ void ref_samples(const float* A, const float* B, const int* idx, double* out, int n, int N, int K) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int m = idx[2 * i], c = idx[2 * i + 1];
  double s = 0;
  for (int k = 0; k < K; ++k) s += double(A[size_t(m) * K + k]) * double(B[size_t(k) * N + c]);
  out[i] = s;
}
__global__ void fill(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
    p[i] = float(h & 0xFFFFFF) / 8388608.f - 1.f;
  }
}
#define CK(...) do { cudaError_t e_ = (__VA_ARGS__); if (e_ != cudaSuccess) { printf("CUDA %s at %d: %s\n", #__VA_ARGS__, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

int main() {
  cublasHandle_t h; cublasCreate(&h);
  cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
  CK(cudaFuncSetAttribute(tf32p_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  int shapes[][3] = {{8192, 8192, 8192}, {4096, 4096, 4096}};
  for (auto& sh : shapes) {
    const int M = sh[0], N = sh[1], K = sh[2];
    float *A, *B, *C, *C2; CK(cudaMalloc(&A, size_t(M) * K * 4)); CK(cudaMalloc(&B, size_t(K) * N * 4));
    CK(cudaMalloc(&C, size_t(M) * N * 4)); CK(cudaMalloc(&C2, size_t(M) * N * 4));
    fill<<<1024, 256>>>(A, size_t(M) * K, 7); fill<<<1024, 256>>>(B, size_t(K) * N, 11);
    CK(cudaMemset(C, 0xFF, size_t(M) * N * 4));
    const int grid = (M / kBM) * (N / kBN);
    tf32p_kernel<<<grid, 384, kSmem>>>(A, B, C, M, N, K);
    CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    float one = 1, zero = 0;
    // cuBLAS (column-major): C^T = B^T A^T
    auto cublas = [&]() { cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, C2, N); };
    cublas(); CK(cudaDeviceSynchronize());
    const int ns = 4096; std::vector<int> hidx(2 * ns);
    srand(1); for (int i = 0; i < ns; ++i) { hidx[2 * i] = rand() % M; hidx[2 * i + 1] = rand() % N; }
    hidx[0] = 0; hidx[1] = 0; hidx[2] = M - 1; hidx[3] = N - 1;
    int* didx; double* dref; CK(cudaMalloc(&didx, 8 * ns)); CK(cudaMalloc(&dref, 8 * ns));
    CK(cudaMemcpy(didx, hidx.data(), 8 * ns, cudaMemcpyHostToDevice));
    ref_samples<<<(ns + 127) / 128, 128>>>(A, B, didx, dref, ns, N, K); CK(cudaDeviceSynchronize());
    std::vector<double> hr(ns); CK(cudaMemcpy(hr.data(), dref, 8 * ns, cudaMemcpyDeviceToHost));
    std::vector<float> hc(size_t(M) * N), hc2(size_t(M) * N);
    CK(cudaMemcpy(hc.data(), C, hc.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hc2.data(), C2, hc2.size() * 4, cudaMemcpyDeviceToHost));
    double e1 = 0, e2 = 0, r2 = 0; size_t nan = 0;
    for (size_t i = 0; i < hc.size(); ++i) if (!(hc[i] == hc[i])) ++nan;
    for (int i = 0; i < ns; ++i) {
      size_t o = size_t(hidx[2 * i]) * N + hidx[2 * i + 1];
      e1 += (hc[o] - hr[i]) * (hc[o] - hr[i]); e2 += (hc2[o] - hr[i]) * (hc2[o] - hr[i]); r2 += hr[i] * hr[i];
    }
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    auto time = [&](auto fn) {
      for (int i = 0; i < 5; ++i) fn();
      float best = 1e9;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEventRecord(a); for (int i = 0; i < 20; ++i) fn(); cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); best = std::min(best, ms / 20);
      }
      return best;
    };
    float t1 = time([&] { tf32p_kernel<<<grid, 384, kSmem>>>(A, B, C, M, N, K); });
    float t2 = time(cublas);
    float t3 = time([&] { tf32p_kernel<<<grid, 384, kSmem>>>(A, B, C, M, N, K); });
    CK(cudaGetLastError());
    printf("%dx%dx%d stages %d group %d round %d: NaN %zu, rel l2 err ours %.3e cuBLAS %.3e (ratio %.2f); "
           "ours %.3f / %.3f ms (%.0f TFLOP/s), cuBLAS %.3f ms (%.0f): ratio %.3f\n", M, N, K, kStages, TD_GROUP,
           TD_ROUND, nan, sqrt(e1 / r2), sqrt(e2 / r2), sqrt(e1 / e2), t1, t3, 2.0 * M * N * K / std::min(t1, t3) / 1e9,
           t2, 2.0 * M * N * K / t2 / 1e9, t2 / std::min(t1, t3));
    cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(C2); cudaFree(didx); cudaFree(dref);
  }
  return 0;
}

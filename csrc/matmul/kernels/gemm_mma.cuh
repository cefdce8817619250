// The portable tensor-core GEMM (sm_80+): mma.sync m16n8k16 for half/bfloat16, m16n8k8 TF32 for float.
//
// CTA tile 128 x 128 x (64 bytes of K: 32 half / 16 float), 8 warps as 2 (M) x 4 (N), each warp 64 x 32.
// A 4-stage cp.async pipeline fills shared memory; each operand tile is stored in its global orientation
// (K-major: [128][BK]; M/N-major: [BK][128]) with 16-byte chunks XOR-swizzled so that ldmatrix (and the TF32
// scalar fragment loads) hit every bank once; ldmatrix.trans turns M/N-major tiles into the mma fragments, so
// transposed operands are read in place at full speed. Loads are predicated per 16-byte chunk (cp.async
// zero-fills the bytes past an edge); operands whose base, leading dimension or batch stride is not 16-byte
// aligned take element loads instead. The epilogue stages the float accumulators through shared memory and
// writes 8 consecutive columns per thread (16-byte stores where aligned), or the split-K partial sums.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "matmul/kernels/gemm_common.cuh"

namespace torch_dnn {
namespace matmul {
namespace mma {

constexpr int kBM = 128, kBN = 128, kThreads = 256, kStages = 4, kGroupM = 8;
constexpr int kLdc = kBN + 8;  // float row stride of the staged accumulator tile (8: conflict-free float2 stores)

// ---- PTX wrappers ----

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  }
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

__device__ __forceinline__ void mma_1688_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// ---- shared-memory tiles ----

// One operand tile of a stage, stored [ROWS][COLS] elements: K-major [EXT][BK], or M/N-major [BK][EXT] (EXT: the
// tile's M or N extent, 128 here; the implicit-GEMM convolution also uses 64).
template <typename T, bool KMAJOR, int EXT = 128>
struct Tile {
  static constexpr int KE = 16 / sizeof(T);  // elements per 16-byte chunk
  static constexpr int BK = 64 / sizeof(T);  // K per stage
  static constexpr int ROWS = KMAJOR ? EXT : BK;
  static constexpr int COLS = KMAJOR ? BK : EXT;
  static constexpr int CPR = COLS / KE;  // chunks per row
  static constexpr int ELEMS = ROWS * COLS;
  // Physical chunk of logical chunk c in row r. 64-byte rows: pairs of rows share a 128-byte bank line, so the
  // chunk index turns with r / 2. Long rows: ldmatrix reads 8 consecutive rows (row & 7); TF32 fragments
  // read 4 consecutive rows two chunks wide ((row & 3) << 1).
  __device__ static __forceinline__ int swz(int r, int c) {
    if constexpr (CPR == 4) return c ^ ((r >> 1) & 3);
    else if constexpr (sizeof(T) == 4) return c ^ ((r & 3) << 1);
    else return c ^ (r & 7);
  }
  __device__ static __forceinline__ int off(int r, int c) { return r * COLS + swz(r, c / KE) * KE + (c % KE); }

  // Copies the tile at stored (r0, c0) of a matrix of R x C stored elements (element (r, c) at g[r * ld + c]).
  __device__ static __forceinline__ void load(T* s, const T* g, int64_t ld, int64_t r0, int64_t c0, int64_t R,
                                              int64_t C, bool vec, int tid) {
#pragma unroll
    for (int i = 0; i < ROWS * CPR / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx / CPR, ch = idx % CPR;
      const int64_t gr = r0 + r, gc = c0 + int64_t(ch) * KE;
      int64_t cnt = C - gc;
      cnt = gr < R ? (cnt < 0 ? 0 : (cnt > KE ? KE : cnt)) : 0;
      T* dst = s + r * COLS + swz(r, ch) * KE;
      if (vec) {
        cp_async16(dst, cnt > 0 ? g + gr * ld + gc : g, int(cnt) * int(sizeof(T)));
      } else {
        Vec<T, KE> v;
#pragma unroll
        for (int e = 0; e < KE; ++e) v.v[e] = e < cnt ? g[gr * ld + gc + e] : zero<T>();
        store_vec(dst, v);
      }
    }
  }
};

template <typename T>
struct Params {
  Operand<T> A, B;  // A stored [M][K] (AK) or [K][M]; B stored [N][K] (BK) or [K][N]
  int64_t M, N, K, batch;
  int64_t tiles_m, tiles_n;
  int splits, kt_per_split;  // split-K: split s covers k-tiles [s * kt_per_split, (s + 1) * kt_per_split)
  float* ws;                 // split-K partial sums (splits > 1)
  Epi<T> e;
};

template <typename T>
constexpr int smem_bytes() {
  constexpr int pipe = kStages * 2 * 128 * 64;  // two 8 KB operand tiles per stage
  constexpr int epi = kBM * kLdc * 4;
  return pipe > epi ? pipe : epi;
}

// One stage's MMAs for a warp of MI x 16 rows and 32 columns (the warp tile at rows wm * MI * 16, columns wn * 32):
// acc[i][j] is the 16 x 8 tile (warp row 16 i, warp column 8 j). AEXT / BEXT: the A / B tiles' M / N extents.
template <typename T, bool AK, bool BK, int MI = 4, int AEXT = 128, int BEXT = 128>
__device__ __forceinline__ void compute_stage(const T* sA, const T* sB, float (&acc)[MI][4][4], int wm, int wn,
                                              int lane) {
  using TA = Tile<T, AK, AEXT>;
  using TB = Tile<T, BK, BEXT>;
  if constexpr (sizeof(T) == 2) {
    const int r = lane & 7, j = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < TA::BK; ks += 16) {
      uint32_t a[MI][4], b[4][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int mb = wm * (MI * 16) + i * 16;
        if constexpr (AK) ldmatrix_x4<false>(a[i], sA + TA::off(mb + r + 8 * (j & 1), ks + 8 * (j >> 1)));
        else ldmatrix_x4<true>(a[i], sA + TA::off(ks + r + 8 * (j >> 1), mb + 8 * (j & 1)));
      }
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int nb = wn * 32 + p * 16;
        uint32_t q[4];
        if constexpr (BK) ldmatrix_x4<false>(q, sB + TB::off(nb + r + 8 * (j >> 1), ks + 8 * (j & 1)));
        else ldmatrix_x4<true>(q, sB + TB::off(ks + r + 8 * (j & 1), nb + 8 * (j >> 1)));
        b[2 * p][0] = q[0];
        b[2 * p][1] = q[1];
        b[2 * p + 1][0] = q[2];
        b[2 * p + 1][1] = q[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) mma_16816<T>(acc[i][jn], a[i], b[jn]);
    }
  } else {  // TF32: fragments element by element (ldmatrix.trans has no 32-bit form)
    const int g = lane >> 2, t = lane & 3;
    auto ea = [&](int m, int k) { return sA[AK ? TA::off(m, k) : TA::off(k, m)]; };
    auto eb = [&](int k, int n) { return sB[BK ? TB::off(n, k) : TB::off(k, n)]; };
#pragma unroll
    for (int ks = 0; ks < TA::BK; ks += 8) {
      uint32_t a[MI][4], b[4][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int mb = wm * (MI * 16) + i * 16;
        a[i][0] = to_tf32(ea(mb + g, ks + t));
        a[i][1] = to_tf32(ea(mb + g + 8, ks + t));
        a[i][2] = to_tf32(ea(mb + g, ks + t + 4));
        a[i][3] = to_tf32(ea(mb + g + 8, ks + t + 4));
      }
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
        const int nb = wn * 32 + jn * 8;
        b[jn][0] = to_tf32(eb(ks + t, nb + g));
        b[jn][1] = to_tf32(eb(ks + t + 4, nb + g));
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) mma_1688_tf32(acc[i][jn], a[i], b[jn]);
    }
  }
}

// AK: A is K-contiguous (row-major); BK: B is K-contiguous (column-major, an nn.Linear weight).
template <typename T, bool AK, bool BK>
__global__ void __launch_bounds__(kThreads, 2) gemm_kernel(const Params<T> p) {
  using TA = Tile<T, AK>;
  using TB = Tile<T, BK>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  constexpr int kStageElems = TA::ELEMS + TB::ELEMS;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;

  // grouped rasterisation: kGroupM tile rows walk the N tiles together (A and B tiles stay in L2)
  const int64_t id = blockIdx.x;
  const int64_t width = kGroupM * p.tiles_n;
  const int64_t first_m = (id / width) * kGroupM;
  const int64_t gsize = p.tiles_m - first_m < kGroupM ? p.tiles_m - first_m : kGroupM;
  const int64_t tm = first_m + (id % width) % gsize, tn = (id % width) / gsize;
  const int64_t m0 = tm * kBM, n0 = tn * kBN;
  const int64_t ktiles = (p.K + TA::BK - 1) / TA::BK;

  for (int64_t z = blockIdx.z; z < p.batch * p.splits; z += gridDim.z) {
    const int64_t b = z / p.splits, s = z % p.splits;
    const int64_t kt0 = s * p.kt_per_split;
    const int64_t kt1 = kt0 + p.kt_per_split < ktiles ? kt0 + p.kt_per_split : ktiles;
    const int nk = int(kt1 > kt0 ? kt1 - kt0 : 0);
    const T* gA = p.A.p + b * p.A.bs;
    const T* gB = p.B.p + b * p.B.bs;

    auto load_stage = [&](int stage, int64_t kt) {
      T* sA = smem + stage * kStageElems;
      T* sB = sA + TA::ELEMS;
      const int64_t k0 = kt * TA::BK;
      if constexpr (AK) TA::load(sA, gA, p.A.ld, m0, k0, p.M, p.K, p.A.vec, tid);
      else TA::load(sA, gA, p.A.ld, k0, m0, p.K, p.M, p.A.vec, tid);
      if constexpr (BK) TB::load(sB, gB, p.B.ld, n0, k0, p.N, p.K, p.B.vec, tid);
      else TB::load(sB, gB, p.B.ld, k0, n0, p.K, p.N, p.B.vec, tid);
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (st < nk) load_stage(st, kt0 + st);
      cp_async_commit();
    }
#pragma unroll 1
    for (int it = 0; it < nk; ++it) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // stage it is in; every warp is done with stage it - 1, which the next load refills
      const int nxt = it + kStages - 1;
      if (nxt < nk) load_stage(nxt % kStages, kt0 + nxt);
      cp_async_commit();
      const T* sA = smem + (it % kStages) * kStageElems;
      compute_stage<T, AK, BK>(sA, sA + TA::ELEMS, acc, wm, wn, lane);
    }
    cp_async_wait<0>();
    __syncthreads();

    // epilogue: accumulators -> shared (float [128][kLdc]) -> 8 columns per thread -> global
    float* cs = reinterpret_cast<float*>(smem_raw);
    {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) {
          const int r = wm * 64 + i * 16 + g, c = wn * 32 + jn * 8 + 2 * t;
          *reinterpret_cast<float2*>(cs + r * kLdc + c) = make_float2(acc[i][jn][0], acc[i][jn][1]);
          *reinterpret_cast<float2*>(cs + (r + 8) * kLdc + c) = make_float2(acc[i][jn][2], acc[i][jn][3]);
        }
    }
    __syncthreads();
#pragma unroll 1
    for (int pass = 0; pass < kBM / (kThreads / 16); ++pass) {
      const int r = pass * (kThreads / 16) + tid / 16, c = (tid % 16) * 8;
      const int64_t m = m0 + r, n = n0 + c;
      if (m >= p.M || n >= p.N) continue;
      float v[8];
      const float4 lo = *reinterpret_cast<const float4*>(cs + r * kLdc + c);
      const float4 hi = *reinterpret_cast<const float4*>(cs + r * kLdc + c + 4);
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
      if (p.splits > 1) {
        float* w = partial_ptr(p.ws, s, b, m, n, p.batch, p.M, p.N);
        if (n + 8 <= p.N && (p.N & 3) == 0) {
          *reinterpret_cast<float4*>(w) = lo;
          *reinterpret_cast<float4*>(w + 4) = hi;
        } else {
#pragma unroll 1
          for (int j = 0; j < 8; ++j)
            if (n + j < p.N) w[j] = v[j];
        }
      } else {
        epi_store8(p.e, b, m, n, p.N, v);
      }
    }
    __syncthreads();  // the next z reuses shared memory
  }
}

}  // namespace mma
}  // namespace matmul
}  // namespace torch_dnn

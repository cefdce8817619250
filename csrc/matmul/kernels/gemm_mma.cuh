// The portable tensor-core GEMM (sm_80+): mma.sync m16n8k16 for half/bfloat16, m16n8k8 TF32 for float (TF32
// allowed), or float32 accuracy from three TF32 products a step (3xTF32, the X3 instantiations; see
// compute_stage_3xtf32).
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
#include <cstring>
#include <type_traits>

#include "matmul/kernels/gemm_common.cuh"
#if defined(TORCH_DNN_EMULATE_CUDA)
#include "mma_emulation.h"
#endif

namespace torch_dnn {
namespace matmul {
namespace mma {

constexpr int kBM = 128, kBN = 128, kThreads = 256, kStages = 4, kGroupM = 8;
constexpr int kLdc = kBN + 8;  // float row stride of the staged accumulator tile (8: conflict-free float2 stores)

// ---- PTX wrappers ----

#if defined(TORCH_DNN_EMULATE_CUDA)
// computed on the host by tests/emulation/mma_emulation.h (the kernels' CPU emulation)
using ::torch_dnn_emu_ptx::cp_async16;
using ::torch_dnn_emu_ptx::cp_async_commit;
using ::torch_dnn_emu_ptx::cp_async_wait;
using ::torch_dnn_emu_ptx::ldmatrix_x4;
using ::torch_dnn_emu_ptx::mma_16816;
using ::torch_dnn_emu_ptx::mma_1688_tf32;
using ::torch_dnn_emu_ptx::to_tf32;
inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
#else
__device__ __forceinline__ uint32_t float_bits(float x) { return __float_as_uint(x); }


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
#endif

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

// ---- 3xTF32: float32 accuracy on the TF32 tensor cores ----
//
// Each float x is split into big = tf32(x) (11 significant bits, rounded to nearest) and small = x - big (exact,
// |small| <= 2^-11 |x|; split_tf32), and a b is taken as a_small b_big + a_big b_small + a_big b_big: the
// a_small b_small term dropped is below 2^-22 |a b|. The tensor cores accumulate with truncation (products exact,
// the sum rounded toward zero), a bias that grows with the number of MMAs chained into one accumulator: over
// K = 8192 of data in (0, 1), one chained accumulator had plain TF32's error in the CPU model
// (tests/emulation/gemm_mma_emulation.cpp). So each stage's products (two 8-deep steps) go into a fragment that
// starts from zero, the small ones of both steps first, then the big ones, and that is added to the float
// accumulators by FADD, rounded to nearest: the truncation acts on one stage's sum, and the result stayed below
// float32 FFMA's error in that model and on every emulated case.
//
// Fragment loads: K-major tiles by ldmatrix (an 8 x 4-float block is an 8 x 8 b16 matrix; lane (g, t) gets row
// g, float t: the m16n8k8 TF32 A and B layouts). M/N-major tiles by vector loads, which permutes the rows / columns
// a lane holds (a relabelling the epilogue undoes, rows3x / cols3x): A's fragment rows g and g + 8 of a 16-row
// block are rows 2g, 2g + 1 (one 8-byte load a k); B's column g of 8-column block jn is column 4g + jn of the
// warp's 32 (one 16-byte load a k for all four blocks). Both are conflict-free under Tile's swizzle.
//
// Registers: the accumulators, both steps' B splits and a 16-row block's A splits and stage sum need more than the
// 128 of two CTAs an SM (there ptxas spilled and serialised the MMA chains), so the X3 kernels run one CTA an SM.

// big: x rounded to nearest (ties away) at TF32's 10 fraction bits, cvt.rna's value for finite x in two integer
// operations (cvt.rna is four on sm_90: a finiteness test and a select around them). small: x - big, exact, passed
// unrounded: the tensor cores read a .tf32 operand's top 19 bits (ptxas itself leaves the rounding mask off operands
// that only an mma reads), so small enters truncated to 11 significant bits: an error below 2^-21 |x| with small's
// sign, which is as often + as - (big is rounded to nearest). A NaN x gives a NaN small whatever big is.
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = (float_bits(x) + 0x1000u) & 0xffffe000u;
  small = float_bits(x - __uint_as_float(big));
}

// The warp's output row of accumulator row g + 8h (h = e >> 1) of 16-row block i, and column 2t + c (c = e & 1)
// of 8-column block jn, under the fragment loads above.
template <bool AK>
__device__ __forceinline__ int rows3x(int wm, int i, int g, int h) {
  return wm * 64 + i * 16 + (AK ? g + 8 * h : 2 * g + h);
}
template <bool BK>
__device__ __forceinline__ int cols3x(int wn, int jn, int t, int c) {
  return wn * 32 + (BK ? jn * 8 + 2 * t + c : 4 * (2 * t + c) + jn);
}

template <bool AK, bool BK>
__device__ __forceinline__ void compute_stage_3xtf32(const float* sA, const float* sB, float (&acc)[4][4][4], int wm,
                                                     int wn, int lane) {
  using TA = Tile<float, AK>;
  using TB = Tile<float, BK>;
  constexpr int KS = TA::BK / 8;  // 8-deep MMA steps a stage
  const int g = lane >> 2, t = lane & 3, r = lane & 7, j = lane >> 3;
  uint32_t bb[KS][4][2], bs[KS][4][2];
#pragma unroll
  for (int s = 0; s < KS; ++s) {
    const int ks = s * 8;
    if constexpr (BK) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint32_t q[4];
        ldmatrix_x4<false>(q, sB + TB::off(wn * 32 + p * 16 + r + 8 * (j >> 1), ks + 4 * (j & 1)));
#pragma unroll
        for (int e = 0; e < 4; ++e) {  // q[e]: column block 2p + (e >> 1), k = t + 4 (e & 1)
          split_tf32(__uint_as_float(q[e]), bb[s][2 * p + (e >> 1)][e & 1], bs[s][2 * p + (e >> 1)][e & 1]);
        }
      }
    } else {
      const float4 lo = *reinterpret_cast<const float4*>(sB + TB::off(ks + t, wn * 32 + 4 * g));
      const float4 hi = *reinterpret_cast<const float4*>(sB + TB::off(ks + t + 4, wn * 32 + 4 * g));
      const float v[2][4] = {{lo.x, lo.y, lo.z, lo.w}, {hi.x, hi.y, hi.z, hi.w}};
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int h = 0; h < 2; ++h) split_tf32(v[h][jn], bb[s][jn][h], bs[s][jn][h]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int mb = wm * 64 + i * 16;
    uint32_t ab[KS][4], as[KS][4];
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      const int ks = s * 8;
      float x[4];
      if constexpr (AK) {
        uint32_t q[4];
        ldmatrix_x4<false>(q, sA + TA::off(mb + r + 8 * (j & 1), ks + 4 * (j >> 1)));
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = __uint_as_float(q[e]);
      } else {
        const float2 lo = *reinterpret_cast<const float2*>(sA + TA::off(ks + t, mb + 2 * g));
        const float2 hi = *reinterpret_cast<const float2*>(sA + TA::off(ks + t + 4, mb + 2 * g));
        x[0] = lo.x, x[1] = lo.y, x[2] = hi.x, x[3] = hi.y;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) split_tf32(x[e], ab[s][e], as[s][e]);
    }
    // the stage's products for rows of block i: the small ones of every step, then the big ones, into d from zero
    float d[4][4];
#pragma unroll
    for (int jn = 0; jn < 4; ++jn)
#pragma unroll
      for (int q = 0; q < 4; ++q) d[jn][q] = 0.f;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) mma_1688_tf32(d[jn], as[s], bb[s][jn]);
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) mma_1688_tf32(d[jn], ab[s], bs[s][jn]);
    }
#pragma unroll
    for (int s = 0; s < KS; ++s)
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) mma_1688_tf32(d[jn], ab[s], bb[s][jn]);
#pragma unroll
    for (int jn = 0; jn < 4; ++jn)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][jn][q] += d[jn][q];
  }
}

// AK: A is K-contiguous (row-major); BK: B is K-contiguous (column-major, an nn.Linear weight). X3 (float only):
// 3xTF32 (compute_stage_3xtf32) instead of one TF32 product.
template <typename T, bool AK, bool BK, bool X3 = false>
__global__ void __launch_bounds__(kThreads, X3 ? 1 : 2) gemm_kernel(const Params<T> p) {
  static_assert(!X3 || std::is_same_v<T, float>, "3xTF32 is for float");
  using TA = Tile<T, AK>;
  using TB = Tile<T, BK>;
#if defined(TORCH_DNN_EMULATE_CUDA)
  unsigned char* smem_raw = emu_dyn_smem();
#else
  extern __shared__ __align__(128) unsigned char smem_raw[];
#endif
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
      if constexpr (X3) compute_stage_3xtf32<AK, BK>(sA, sA + TA::ELEMS, acc, wm, wn, lane);
      else compute_stage<T, AK, BK>(sA, sA + TA::ELEMS, acc, wm, wn, lane);
    }
    cp_async_wait<0>();
    __syncthreads();

    // epilogue: accumulators -> shared (float [128][kLdc]) -> 8 columns per thread -> global
    float* cs = reinterpret_cast<float*>(smem_raw);
    if constexpr (X3 && !BK) {  // the 8 columns 8t .. 8t + 7 of each row a lane holds (cols3x)
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float* row = cs + rows3x<AK>(wm, i, g, h) * kLdc + cols3x<false>(wn, 0, t, 0);
          *reinterpret_cast<float4*>(row) =
              make_float4(acc[i][0][2 * h], acc[i][1][2 * h], acc[i][2][2 * h], acc[i][3][2 * h]);
          *reinterpret_cast<float4*>(row + 4) =
              make_float4(acc[i][0][2 * h + 1], acc[i][1][2 * h + 1], acc[i][2][2 * h + 1], acc[i][3][2 * h + 1]);
        }
    } else {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) {
          const int r0 = X3 ? rows3x<AK>(wm, i, g, 0) : wm * 64 + i * 16 + g;
          const int r1 = X3 ? rows3x<AK>(wm, i, g, 1) : r0 + 8;
          const int c = wn * 32 + jn * 8 + 2 * t;
          *reinterpret_cast<float2*>(cs + r0 * kLdc + c) = make_float2(acc[i][jn][0], acc[i][jn][1]);
          *reinterpret_cast<float2*>(cs + r1 * kLdc + c) = make_float2(acc[i][jn][2], acc[i][jn][3]);
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

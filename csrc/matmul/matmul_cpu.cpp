// CPU GEMM: our own cache-blocked loops (not at::mm, so that the tests compare two implementations), with the
// same fused epilogue as the CUDA kernels. Work splits over (batch, block of MB rows) with at::parallel_for;
// each task walks N in blocks of NB columns and K in blocks of KB, packs the A and B blocks into contiguous
// accumulation-type buffers (which also turns any operand layout into one; rows and columns padded with zeros to
// whole tiles; a B block that is already row-major, of whole tiles and in the accumulation type is read in place),
// and accumulates the MB x NB block in MR x NR register tiles (MicroTiles: GCC vector types, a
// broadcast of A times a row of B per k). Each output element is summed over k in increasing order, one
// multiply and one add per term: the result does not depend on the thread count or on the ISA (cpu_isa.h).
#include "matmul/matmul_cpu.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "activation/activation_cpu.h"
#include "activation/cpu_isa.h"

namespace torch_dnn {
namespace matmul {
namespace {

constexpr int64_t MR = 6;
constexpr int64_t MB = 8 * MR, NB = 256, KB = 256;
// a register tile is MR rows of 64 bytes: 16 floats or 8 doubles
template <typename A>
constexpr int64_t kNR = 64 / sizeof(A);

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A task's accumulator and packed blocks fit this many elements on its stack for small problems (no allocation per
// call: host time of small GEMMs); larger ones take one heap buffer.
constexpr int64_t kLocalElements = 4096;

template <typename T>
struct Operand {
  const T* p;
  int64_t ld, bs;
  bool col;
  Operand(const MatrixRef& r) : p(static_cast<const T*>(r.ptr)), ld(r.ld), bs(r.batch_stride), col(r.col_major) {}
};

// Packs op's block [r0, r0 + rows) x [c0, c0 + cols) (of batch bi) as dst[r * rs + c], in the accumulation
// type, zero-padded to rows_pad x cols_pad. The copy runs along the operand's contiguous dimension.
template <typename T, typename A>
void pack(const Operand<T>& op, int64_t bi, int64_t r0, int64_t c0, int64_t rows, int64_t cols, int64_t rows_pad,
          int64_t cols_pad, A* dst, int64_t rs) {
  const T* base = op.p + bi * op.bs;
  if (op.col) {
    for (int64_t c = 0; c < cols; ++c) {
      const T* src = base + (c0 + c) * op.ld + r0;
      for (int64_t r = 0; r < rows; ++r) dst[r * rs + c] = A(src[r]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const T* src = base + (r0 + r) * op.ld + c0;
      for (int64_t c = 0; c < cols; ++c) dst[r * rs + c] = A(src[c]);
    }
  }
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t c = r < rows ? cols : 0; c < cols_pad; ++c) dst[r * rs + c] = A(0);
}

// acc[mb x nb] (ld ldc) += ap[mb x kb] (ld lda) bp[kb x nb] (ld ldb), mb a multiple of MR and nb of NR, in
// vectors of W bytes (16 for the baseline x86-64 ISA, 32 for AVX2).
template <typename A, int W>
struct MicroTiles {
  static inline __attribute__((always_inline)) void tile(const A* __restrict ap, int64_t lda, const A* __restrict bp,
                                                         int64_t ldb, A* __restrict c, int64_t ldc, int64_t kb) {
    typedef A V __attribute__((vector_size(W)));
    constexpr int L = W / sizeof(A), NV = kNR<A> / L;
    V r[MR][NV];
    for (int i = 0; i < MR; ++i)
      for (int h = 0; h < NV; ++h) std::memcpy(&r[i][h], c + i * ldc + h * L, sizeof(V));
    for (int64_t k = 0; k < kb; ++k) {
      V b[NV];
      for (int h = 0; h < NV; ++h) std::memcpy(&b[h], bp + k * ldb + h * L, sizeof(V));
      for (int i = 0; i < MR; ++i) {
        const A a = ap[i * lda + k];
        for (int h = 0; h < NV; ++h) r[i][h] += a * b[h];
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int h = 0; h < NV; ++h) std::memcpy(c + i * ldc + h * L, &r[i][h], sizeof(V));
  }
  static inline __attribute__((always_inline)) void run(const A* ap, int64_t lda, const A* bp, int64_t ldb, A* c,
                                                        int64_t ldc, int64_t mb, int64_t nb, int64_t kb) {
    for (int64_t i = 0; i < mb; i += MR)
      for (int64_t j = 0; j < nb; j += kNR<A>) tile(ap + i * lda, lda, bp + j, ldb, c + i * ldc + j, ldc, kb);
  }
};

template <typename T>
void gemm_typed(const GemmArgs& g) {
  using A = at::opmath_type<T>;
  const Operand<T> a(g.A), b(g.B);
  const T* bias = static_cast<const T*>(g.bias);
  const T* res = static_cast<const T*>(g.residual);
  T* d = static_cast<T*>(g.D);
  T* pre = static_cast<T*>(g.preact);
  const A alpha = A(g.alpha), pa = A(g.act_params.a), pb = A(g.act_params.b);
  const int64_t M = g.M, N = g.N, K = g.K;
  const int64_t mblocks = (M + MB - 1) / MB;
  constexpr int64_t NR = kNR<A>;
  // buffer sizes: the blocks, no larger than the problem, padded to whole tiles
  const int64_t mbp_max = round_up(std::min(MB, M), MR), nbp_max = round_up(std::min(NB, N), NR);
  const int64_t kb_max = std::max<int64_t>(1, std::min(KB, K));
  const int64_t n_acc = mbp_max * nbp_max, n_ap = mbp_max * kb_max, n_buffers = n_acc + n_ap + kb_max * nbp_max;
  activation::dispatch_act(g.act, [&]<Act ACT>() {
    at::parallel_for(0, g.batch * mblocks, 1, [&](int64_t begin, int64_t end) {
      A local[kLocalElements];
      std::unique_ptr<A[]> heap(n_buffers > kLocalElements ? new A[n_buffers] : nullptr);
      A* const acc = heap ? heap.get() : local;
      A* const ap = acc + n_acc;
      A* const bp = ap + n_ap;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t bi = task / mblocks, m0 = (task % mblocks) * MB, mb = std::min(MB, M - m0);
        const int64_t mbp = round_up(mb, MR);
        for (int64_t n0 = 0; n0 < N; n0 += NB) {
          const int64_t nb = std::min(NB, N - n0), nbp = round_up(nb, NR);
          std::fill(acc, acc + mbp * nbp, A(0));
          for (int64_t k0 = 0; k0 < K; k0 += KB) {
            const int64_t kb = std::min(KB, K - k0);
            pack(a, bi, m0, k0, mb, kb, mbp, kb, ap, kb);
            // a row-major B block of whole tiles in the accumulation type is read in place: packing it would copy
            // the same values (x @ W's weight; host time of small GEMMs)
            const A* bk = bp;
            int64_t ldb = nbp;
            if (std::is_same_v<T, A> && !b.col && nb == nbp) {
              bk = reinterpret_cast<const A*>(b.p + bi * b.bs + k0 * b.ld + n0);
              ldb = b.ld;
            } else {
              pack(b, bi, k0, n0, kb, nb, kb, nbp, bp, nbp);
            }
            cpu_isa::run_kernel<MicroTiles<A, 16>, MicroTiles<A, 32>>(static_cast<const A*>(ap), kb, bk, ldb, acc,
                                                                      nbp, mbp, nbp, kb);
          }
          // epilogue: pre = alpha * acc + bias; D = act(pre) + residual
          for (int64_t i = 0; i < mb; ++i) {
            const int64_t m = m0 + i;
            for (int64_t j = 0; j < nb; ++j) {
              const int64_t n = n0 + j;
              A v = alpha * acc[i * nbp + j];
              if (bias) v += A(bias[n]);
              const int64_t o = bi * g.batch_stride_d + m * g.ldd + n;
              if (pre) pre[o] = T(v);
              A y = activation::act_forward<ACT, A>(v, pa, pb);
              if (res) y += A(res[bi * g.batch_stride_r + m * g.ldr + n]);
              d[o] = T(y);
            }
          }
        }
      }
    });
  });
}

}  // namespace

void gemm_cpu(const GemmArgs& g) {
  if (g.M <= 0 || g.N <= 0 || g.batch <= 0) return;
  switch (g.dtype) {
    case DType::Float32: return gemm_typed<float>(g);
    case DType::Float64: return gemm_typed<double>(g);
    case DType::Float16: return gemm_typed<at::Half>(g);
    case DType::BFloat16: return gemm_typed<at::BFloat16>(g);
  }
}

void CpuBackend::act_grad(const at::Tensor& g, const at::Tensor& pre, const at::Tensor& dpre, const at::Tensor& dbias,
                          int64_t rows, int64_t cols, Act k, ActParams p) {
  at::Tensor dx = dpre, db = dbias;
  activation::CpuBackend::bias_act_backward(g, pre, at::Tensor(), dx, db, activation::BiasActShape{rows, cols, 1}, k, p);
}

}  // namespace matmul
}  // namespace torch_dnn

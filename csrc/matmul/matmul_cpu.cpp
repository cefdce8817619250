// CPU GEMM: our own cache-blocked loops (not at::mm, so that the tests compare two implementations), with the
// same fused epilogue as the CUDA kernels. Work splits over (batch, block of MB rows) with at::parallel_for;
// each task walks N in blocks of NB columns and K in blocks of KB, packs the A and B blocks into contiguous
// accumulation-type buffers (which also turns any operand layout into one), and accumulates an MB x NB block
// in the accumulation type with a unit-stride inner loop the compiler vectorises. Each output element is
// summed over k in increasing order: the result does not depend on the thread count.
#include "matmul/matmul_cpu.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "activation/activation_cpu.h"

namespace torch_dnn {
namespace matmul {
namespace {

constexpr int64_t MB = 32, NB = 256, KB = 256;

template <typename T>
struct Operand {
  const T* p;
  int64_t ld, bs;
  bool col;
  Operand(const MatrixRef& r) : p(static_cast<const T*>(r.ptr)), ld(r.ld), bs(r.batch_stride), col(r.col_major) {}
  T at(int64_t b, int64_t r, int64_t c) const { return p[b * bs + (col ? c * ld + r : r * ld + c)]; }
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
  activation::dispatch_act(g.act, [&]<Act ACT>() {
    at::parallel_for(0, g.batch * mblocks, 1, [&](int64_t begin, int64_t end) {
      std::vector<A> acc(MB * NB), ap(MB * KB), bp(KB * NB);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t bi = task / mblocks, m0 = (task % mblocks) * MB, mb = std::min(MB, M - m0);
        for (int64_t n0 = 0; n0 < N; n0 += NB) {
          const int64_t nb = std::min(NB, N - n0);
          std::fill(acc.begin(), acc.end(), A(0));
          for (int64_t k0 = 0; k0 < K; k0 += KB) {
            const int64_t kb = std::min(KB, K - k0);
            for (int64_t i = 0; i < mb; ++i)
              for (int64_t k = 0; k < kb; ++k) ap[i * KB + k] = A(a.at(bi, m0 + i, k0 + k));
            for (int64_t k = 0; k < kb; ++k)
              for (int64_t j = 0; j < nb; ++j) bp[k * NB + j] = A(b.at(bi, k0 + k, n0 + j));
            for (int64_t i = 0; i < mb; ++i) {
              A* row = acc.data() + i * NB;
              for (int64_t k = 0; k < kb; ++k) {
                const A x = ap[i * KB + k];
                const A* brow = bp.data() + k * NB;
                for (int64_t j = 0; j < nb; ++j) row[j] += x * brow[j];
              }
            }
          }
          // epilogue: pre = alpha * acc + bias; D = act(pre) + residual
          for (int64_t i = 0; i < mb; ++i) {
            const int64_t m = m0 + i;
            for (int64_t j = 0; j < nb; ++j) {
              const int64_t n = n0 + j;
              A v = alpha * acc[i * NB + j];
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

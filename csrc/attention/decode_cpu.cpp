// flash_decode on the CPU: the readable reference of decode_kernels.h's contract (the append, then two passes over
// each query row's scores: their maximum, then the exponentials), accumulation in float (double for float64), and
// the CPU registration. One task a (batch row, query head).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention/decode_ops.h"

namespace torch_dnn {
namespace attention {
namespace {

int64_t key_offset(const DecodeArgs& a, const DecodeCache& c, int64_t b, int64_t hk, int64_t j) {
  if (a.block_table == nullptr) return b * c.s0 + j * c.s1 + hk * c.s2;
  const int64_t blk = a.block_table[b * a.bt_sb + j / a.block_size];
  return blk * c.s0 + (j % a.block_size) * c.s1 + hk * c.s2;
}

template <typename T>
void append(const DecodeArgs& a) {
  T* kc = static_cast<T*>(a.k.ptr);
  T* vc = static_cast<T*>(a.v.ptr);
  const T* kn = static_cast<const T*>(a.k_new);
  const T* vn = static_cast<const T*>(a.v_new);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t t = 0; t < a.Snew; ++t) {
      const int64_t pos = a.cache_seqlens[b] + t;
      for (int64_t hk = 0; hk < a.Hkv; ++hk) {
        std::copy_n(kn + b * a.kn_sb + t * a.kn_ss + hk * a.kn_sh, a.D, kc + key_offset(a, a.k, b, hk, pos));
        std::copy_n(vn + b * a.vn_sb + t * a.vn_ss + hk * a.vn_sh, a.D, vc + key_offset(a, a.v, b, hk, pos));
      }
    }
  }
}

template <typename T>
void attend(const DecodeArgs& a) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* kc = static_cast<const T*>(a.k.ptr);
  const T* vc = static_cast<const T*>(a.v.ptr);
  const T* q = static_cast<const T*>(a.q);
  T* out = static_cast<T*>(a.out);
  A* lse = static_cast<A*>(a.lse);
  const int64_t heads = a.Hq / a.Hkv, D = a.D;
  at::parallel_for(0, a.B * a.Hq, 1, [&](int64_t lo, int64_t hi) {
    std::vector<A> s, o(D);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / a.Hq, h = bh % a.Hq, hk = h / heads;
      const int64_t L = a.cache_seqlens[b] + a.Snew;
      for (int64_t i = 0; i < a.Sq; ++i) {
        // causal: the query rows are the last Sq positions of the L keys
        const int64_t n = a.causal ? std::min(L, L - a.Sq + i + 1) : L;
        T* orow = out + ((b * a.Sq + i) * a.Hq + h) * D;
        A* l = lse + (b * a.Hq + h) * a.Sq + i;
        if (n <= 0) {
          std::fill_n(orow, D, T(0));
          *l = std::numeric_limits<A>::infinity();
          continue;
        }
        const T* qrow = q + b * a.q_sb + i * a.q_ss + h * a.q_sh;
        s.resize(n);
        A mx = -std::numeric_limits<A>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          const T* krow = kc + key_offset(a, a.k, b, hk, j);
          A dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += A(qrow[d]) * A(krow[d]);
          s[j] = dot * A(a.scale);
          mx = std::max(mx, s[j]);
        }
        std::fill(o.begin(), o.end(), A(0));
        A sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const A p = std::exp(s[j] - mx);
          sum += p;
          const T* vrow = vc + key_offset(a, a.v, b, hk, j);
          for (int64_t d = 0; d < D; ++d) o[d] += p * A(vrow[d]);
        }
        for (int64_t d = 0; d < D; ++d) orow[d] = T(o[d] / sum);
        *l = mx + std::log(sum);
      }
    }
  });
}

struct CpuDecode {
  static void decode(const DecodeArgs& a, const at::Tensor& like) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, like.scalar_type(), "flash_decode_cpu", [&] {
      if (a.Snew > 0) append<scalar_t>(a);
      attend<scalar_t>(a);
    });
  }
};

}  // namespace
}  // namespace attention
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::attention::register_decode_impls<torch_dnn::attention::CpuDecode>(m);
}

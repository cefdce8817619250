// CPU attention: the readable reference of attention_kernels.h, two passes over the scores of a query row (its
// maximum, then the exponentials), which the CUDA reference kernels compute online; the same score pipeline, the
// same dropout mask (philox.h), the same conventions (fully masked rows: o = 0, lse = +inf; dbias written for
// every key of a row, 0 where masked). Forward: one task a (batch, query head); backward: one task a (batch,
// key/value head), which owns dk / dv of that head and dq of the query heads that share it (no two tasks write
// one element).
#include "attention/attention_cpu.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "attention/philox.h"

namespace torch_dnn {
namespace attention {

namespace {

template <typename A>
A load_dyn(const void* p, DType t, int64_t idx) {
  switch (t) {
    case DType::Float32: return A(static_cast<const float*>(p)[idx]);
    case DType::Float16: return A(float(static_cast<const c10::Half*>(p)[idx]));
    case DType::BFloat16: return A(float(static_cast<const c10::BFloat16*>(p)[idx]));
    case DType::Float64: return A(static_cast<const double*>(p)[idx]);
  }
  return A(0);
}

template <typename A>
void store_dyn(void* p, DType t, int64_t idx, A v) {
  switch (t) {
    case DType::Float32: static_cast<float*>(p)[idx] = float(v); break;
    case DType::Float16: static_cast<c10::Half*>(p)[idx] = c10::Half(float(v)); break;
    case DType::BFloat16: static_cast<c10::BFloat16*>(p)[idx] = c10::BFloat16(float(v)); break;
    case DType::Float64: static_cast<double*>(p)[idx] = double(v); break;
  }
}

// Whether row i sees key j: causal and the window, with i shifted by Sk - Sq of the sequence when bottom_right.
struct Visibility {
  int64_t shift = 0, left = -1, right = -1;
  bool visible(int64_t i, int64_t j) const {
    const int64_t ia = i + shift;
    return (right < 0 || j - ia <= right) && (left < 0 || ia - j <= left);
  }
};

Visibility make_visibility(const AttnArgs& a, const Seq& s) {
  Visibility v;
  v.shift = a.bottom_right ? s.sk - s.sq : 0;
  v.left = a.window_left;
  v.right = a.causal ? 0 : a.window_right;  // causal is window_right = 0
  return v;
}

// The score of (b, h, i, j) from dot = <q_i, k_j> (attention_kernels.h's pipeline); t = tanh(scale dot / softcap)
// for softcap's derivative (0 without softcap). -inf where the key is masked.
template <typename A>
A score(const AttnArgs& a, const Visibility& vis, int64_t b, int64_t h, int64_t i, int64_t j, A dot, A& t) {
  t = A(0);
  if (!vis.visible(i, j)) return -std::numeric_limits<A>::infinity();
  A s = A(a.scale) * dot;
  if (a.softcap > 0) {
    const A c = A(a.softcap);
    t = std::tanh(s / c);
    s = c * t;
  }
  if (a.mask_kind != MaskKind::None) {
    const int64_t mi = b * a.mask_sb + h * a.mask_sh + i * a.mask_sq + j * a.mask_sk;
    if (a.mask_kind == MaskKind::Bool) {
      if (!static_cast<const bool*>(a.mask)[mi]) return -std::numeric_limits<A>::infinity();
    } else {
      s += load_dyn<A>(a.mask, a.mask_dtype, mi);
    }
  }
  if (a.alibi_slopes != nullptr) s -= A(a.alibi_slopes[b * a.alibi_sb + h]) * A(std::abs(i + vis.shift - j));
  return s;
}

// The dropout factor of (b, h, i, j): 0 (dropped) or 1 / (1 - p) (philox.h's mask; p >= 1 drops everything).
template <typename A>
struct Dropout {
  bool on = false;
  uint32_t threshold = 0;
  A keep_scale = A(1);
  explicit Dropout(const AttnArgs& a)
      : on(a.dropout_p > 0.0),
        threshold(dropout_threshold(a.dropout_p)),
        keep_scale(a.dropout_p < 1.0 ? A(1.0 / (1.0 - a.dropout_p)) : A(0)) {}
  A factor(const AttnArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) const {
    const uint64_t n = uint64_t(((b * a.Hq + h) * a.Sq + i) * a.Sk + j);
    return dropout_keep(a.seed, a.offset, n, threshold) ? keep_scale : A(0);
  }
};

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void forward_typed(const AttnArgs& a) {
  using A = acc_t<T>;
  constexpr A kInf = std::numeric_limits<A>::infinity();
  const int64_t G = a.Hq / a.Hkv, Dqk = a.Dqk, Dv = a.Dv;
  const Dropout<A> drop(a);
  const T* q = static_cast<const T*>(a.q.ptr);
  const T* k = static_cast<const T*>(a.k.ptr);
  const T* v = static_cast<const T*>(a.v.ptr);
  T* o = static_cast<T*>(a.o.ptr);
  A* lse = static_cast<A*>(a.lse);
  at::parallel_for(0, a.B * a.Hq, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> s(std::max<int64_t>(a.Sk, 1)), qrow(Dqk), orow(Dv);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / a.Hq, h = bh % a.Hq, hk = h / G;
      const Seq seq = make_seq(a, b);
      const Visibility vis = make_visibility(a, seq);
      for (int64_t i = 0; i < seq.sq; ++i) {
        const T* qi = q + seq.q_off(a.q, b, h, i);
        for (int64_t d = 0; d < Dqk; ++d) qrow[d] = A(qi[d]);
        A m = -kInf;
        for (int64_t j = 0; j < seq.sk; ++j) {
          const T* kj = k + seq.k_off(a.k, b, hk, j);
          A dot = 0, t;
          for (int64_t d = 0; d < Dqk; ++d) dot += qrow[d] * A(kj[d]);
          s[j] = score<A>(a, vis, b, h, i, j, dot, t);
          if (s[j] > m) m = s[j];
        }
        A l = 0;
        std::fill(orow.begin(), orow.end(), A(0));
        if (m != -kInf) {
          for (int64_t j = 0; j < seq.sk; ++j) {
            if (s[j] == -kInf) continue;
            A p = std::exp(s[j] - m);
            l += p;
            if (drop.on) p *= drop.factor(a, b, h, i, j);
            if (p == A(0)) continue;
            const T* vj = v + seq.k_off(a.v, b, hk, j);
            for (int64_t d = 0; d < Dv; ++d) orow[d] += p * A(vj[d]);
          }
        }
        const A inv = l > 0 ? A(1) / l : A(0);
        T* oi = o + seq.q_off(a.o, b, h, i);
        for (int64_t d = 0; d < Dv; ++d) oi[d] = T(orow[d] * inv);
        if (lse != nullptr) lse[(b * a.Hq + h) * a.Sq + i] = l > 0 ? m + std::log(l) : kInf;
      }
    }
  });
}

template <typename T>
void backward_typed(const AttnArgs& a, const AttnGrads& g) {
  using A = acc_t<T>;
  constexpr A kInf = std::numeric_limits<A>::infinity();
  const int64_t G = a.Hq / a.Hkv, Dqk = a.Dqk, Dv = a.Dv;
  const Dropout<A> drop(a);
  const bool want_dbias = g.dbias != nullptr && a.mask_kind == MaskKind::Additive;
  const T* q = static_cast<const T*>(a.q.ptr);
  const T* k = static_cast<const T*>(a.k.ptr);
  const T* v = static_cast<const T*>(a.v.ptr);
  const T* o = static_cast<const T*>(a.o.ptr);
  const T* dout = static_cast<const T*>(g.dout.ptr);
  const A* lse_all = static_cast<const A*>(a.lse);
  at::parallel_for(0, a.B * a.Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> qrow(Dqk), dorow(Dv), dqrow(Dqk), dk, dv;
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / a.Hkv, hk = bk % a.Hkv;
      const Seq seq = make_seq(a, b);
      const Visibility vis = make_visibility(a, seq);
      dk.assign(seq.sk * Dqk, A(0));
      dv.assign(seq.sk * Dv, A(0));
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        for (int64_t i = 0; i < seq.sq; ++i) {
          const T* qi = q + seq.q_off(a.q, b, h, i);
          const T* oi = o + seq.q_off(a.o, b, h, i);
          const T* doi = dout + seq.q_off(g.dout, b, h, i);
          for (int64_t d = 0; d < Dqk; ++d) qrow[d] = A(qi[d]);
          A drow = 0;  // rowsum(dO * O)
          for (int64_t d = 0; d < Dv; ++d) {
            dorow[d] = A(doi[d]);
            drow += dorow[d] * A(oi[d]);
          }
          std::fill(dqrow.begin(), dqrow.end(), A(0));
          const A lse = lse_all[(b * a.Hq + h) * a.Sq + i];
          for (int64_t j = 0; j < seq.sk; ++j) {
            A ds = 0, t = 0, pf = 0;
            if (lse != kInf) {
              const T* kj = k + seq.k_off(a.k, b, hk, j);
              const T* vj = v + seq.k_off(a.v, b, hk, j);
              A dot = 0, dp = 0;
              for (int64_t d = 0; d < Dqk; ++d) dot += qrow[d] * A(kj[d]);
              for (int64_t d = 0; d < Dv; ++d) dp += dorow[d] * A(vj[d]);
              const A s = score<A>(a, vis, b, h, i, j, dot, t);
              const A p = s == -kInf ? A(0) : std::exp(s - lse);
              const A f = drop.on && p != A(0) ? drop.factor(a, b, h, i, j) : A(1);
              ds = p * (dp * f - drow);
              pf = p * f;
            }
            if (want_dbias)
              store_dyn<A>(g.dbias, a.mask_dtype, b * g.dbias_sb + h * g.dbias_sh + i * g.dbias_sq + j, ds);
            if (ds == A(0) && pf == A(0)) continue;
            const A dsr = ds * (A(1) - t * t) * A(a.scale);  // through softcap and the scale
            const T* kj = k + seq.k_off(a.k, b, hk, j);
            for (int64_t d = 0; d < Dqk; ++d) {
              dqrow[d] += dsr * A(kj[d]);
              dk[j * Dqk + d] += dsr * qrow[d];
            }
            for (int64_t d = 0; d < Dv; ++d) dv[j * Dv + d] += pf * dorow[d];
          }
          T* dqi = static_cast<T*>(g.dq.ptr) + seq.q_off(g.dq, b, h, i);
          for (int64_t d = 0; d < Dqk; ++d) dqi[d] = T(dqrow[d]);
        }
      }
      for (int64_t j = 0; j < seq.sk; ++j) {
        T* dkj = static_cast<T*>(g.dk.ptr) + seq.k_off(g.dk, b, hk, j);
        T* dvj = static_cast<T*>(g.dv.ptr) + seq.k_off(g.dv, b, hk, j);
        for (int64_t d = 0; d < Dqk; ++d) dkj[d] = T(dk[j * Dqk + d]);
        for (int64_t d = 0; d < Dv; ++d) dvj[d] = T(dv[j * Dv + d]);
      }
    }
  });
}

}  // namespace

void forward_cpu(const AttnArgs& a) {
  switch (a.dtype) {
    case DType::Float32: return forward_typed<float>(a);
    case DType::Float64: return forward_typed<double>(a);
    case DType::Float16: return forward_typed<c10::Half>(a);
    case DType::BFloat16: return forward_typed<c10::BFloat16>(a);
  }
}

void backward_cpu(const AttnArgs& a, const AttnGrads& g) {
  switch (a.dtype) {
    case DType::Float32: return backward_typed<float>(a, g);
    case DType::Float64: return backward_typed<double>(a, g);
    case DType::Float16: return backward_typed<c10::Half>(a, g);
    case DType::BFloat16: return backward_typed<c10::BFloat16>(a, g);
  }
}

std::pair<uint64_t, uint64_t> CpuBackend::philox_seed_offset(const at::Tensor& like) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return {at::check_generator<at::CPUGeneratorImpl>(gen)->random64(), 0};
}

}  // namespace attention
}  // namespace torch_dnn

// The flash kernels' score pipeline and online softmax on mma.sync accumulator fragments (torch-free).
//
// A warp owns 16 query rows; an m16n8 accumulator tile gives lane (g = lane / 4, t = lane % 4) the elements
// (row g, cols 2t, 2t+1) in c[0], c[1] and (row g + 8, same cols) in c[2], c[3]. Scores are kept in log2 units
// (multiplied by log2 e) so that exp is one ex2; the row maximum and sum are reduced over the 4 lanes of a quad.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "attention/kernels/attention_common.cuh"

namespace torch_dnn {
namespace attention {
namespace flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// What the score transform needs, folded on the host: s2 = log2e * s.
struct ScoreParams {
  float scale_log2;      // scale * log2e (no softcap)
  float cap_inv_scale;   // scale / softcap
  float cap_log2;        // softcap * log2e (> 0: softcap on)
  bool dropout;          // dropout_p > 0 (the flash kernels take p < 1 only)
  uint32_t drop_thr;     // philox.h's threshold
  float keep_scale;      // 1 / (1 - p)
};

__host__ __device__ __forceinline__ ScoreParams make_score_params(const AttnArgs& a) {
  ScoreParams p;
  p.scale_log2 = float(a.scale) * kLog2e;
  p.cap_inv_scale = a.softcap > 0 ? float(a.scale / a.softcap) : 0.f;
  p.cap_log2 = a.softcap > 0 ? float(a.softcap) * kLog2e : 0.f;
  p.dropout = a.dropout_p > 0.0;
  p.drop_thr = dropout_threshold(a.dropout_p);
  p.keep_scale = a.dropout_p < 1.0 ? float(1.0 / (1.0 - a.dropout_p)) : 0.f;
  return p;
}

// The dropout factor of probability (b, h, i, j): 0 or 1 / (1 - p) (philox.h: one Philox block an element).
__device__ __forceinline__ float drop_factor(const AttnArgs& a, const ScoreParams& sp, int64_t b, int64_t h,
                                             int64_t i, int64_t j) {
  const uint64_t n = uint64_t(((b * a.Hq + h) * a.Sq + i) * a.Sk + j);
  return dropout_keep(a.seed, a.offset, n, sp.drop_thr) ? sp.keep_scale : 0.f;
}

// Calls f(bool_constant<x>, bool_constant<y>): run-time switches taken once, outside the element loops they
// specialise.
template <class F>
__device__ __forceinline__ void with_flags(bool x, bool y, F&& f) {
  using T = std::true_type;
  using N = std::false_type;
  if (x) {
    if (y) f(T{}, T{});
    else f(T{}, N{});
  } else {
    if (y) f(N{}, T{});
    else f(N{}, N{});
  }
}

// The visible keys of a lane's two rows (g, g + 8) within one key tile, as tile columns [lo, hi), and the
// ALiBi distance base (i + shift - n0: the distance to tile column c is |base - c|).
struct TileRows {
  int lo[2], hi[2];
  float base[2];
};

template <int BN>
__device__ __forceinline__ TileRows tile_rows(const Visibility& vis, int64_t row0, int64_t n0, int lane) {
  TileRows tr;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = row0 + (lane >> 2) + 8 * hr;
    if (i >= vis.sq) {
      tr.lo[hr] = BN, tr.hi[hr] = 0;
    } else {
      const int64_t lo = vis.lo(i) - n0, hi = vis.hi(i) - n0;  // hi(i) <= sk
      tr.lo[hr] = int(lo < 0 ? 0 : (lo > BN ? BN : lo));
      tr.hi[hr] = int(hi < 0 ? 0 : (hi > BN ? BN : hi));
    }
    tr.base[hr] = float(i + vis.shift - n0);
  }
  return tr;
}

// Raw dot products -> log2-unit scores for the NT accumulator tiles of one key tile (8 NT keys). CAP: softcap.
// MASK: -inf outside each row's visible columns, ALiBi (slope_log2 = slope * log2e; 0 without ALiBi).
template <int NT, bool CAP, bool MASK>
__device__ __forceinline__ void scores_log2(float (&s)[NT][4], const ScoreParams& sp, const TileRows& tr,
                                            float slope_log2, int lane) {
  const int t = lane & 3;
#pragma unroll
  for (int jn = 0; jn < NT; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[jn][e];
      if constexpr (CAP) x = sp.cap_log2 * tanhf(x * sp.cap_inv_scale);
      else x *= sp.scale_log2;
      if constexpr (MASK) {
        const int hr = e >> 1, c = jn * 8 + 2 * t + (e & 1);
        if (c < tr.lo[hr] || c >= tr.hi[hr]) x = -INFINITY;
        else x -= slope_log2 * fabsf(tr.base[hr] - float(c));
      }
      s[jn][e] = x;
    }
}

// scores_log2 with its two switches taken once a tile.
template <int NT, int BN>
__device__ __forceinline__ void scores_tile(float (&s)[NT][4], const ScoreParams& sp, const Visibility& vis,
                                            int64_t row0, int64_t n0, bool need_mask, float slope_log2, int lane) {
  if (need_mask) {
    const TileRows tr = tile_rows<BN>(vis, row0, n0, lane);
    if (sp.cap_log2 > 0.f) scores_log2<NT, true, true>(s, sp, tr, slope_log2, lane);
    else scores_log2<NT, false, true>(s, sp, tr, slope_log2, lane);
  } else {
    const TileRows tr{};
    if (sp.cap_log2 > 0.f) scores_log2<NT, true, false>(s, sp, tr, slope_log2, lane);
    else scores_log2<NT, false, false>(s, sp, tr, slope_log2, lane);
  }
}

// One raw dot product -> its log2-unit score, and (CAP) softcap's derivative 1 - tanh^2 (1 without softcap).
template <bool CAP>
__device__ __forceinline__ float score_log2(float dot, const ScoreParams& sp, float& dcap) {
  if constexpr (CAP) {
    const float t = tanhf(dot * sp.cap_inv_scale);
    dcap = 1.f - t * t;
    return sp.cap_log2 * t;
  } else {
    dcap = 1.f;
    return dot * sp.scale_log2;
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The online softmax state of a lane's two rows: running max m (log2 units, quad-uniform) and this lane's
// share of the running sum l (summed over the quad at the end).
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
};

// Folds a tile of scores into the state: s becomes p = exp2(s - m_new) (0 where s is -inf), the output
// accumulator o (DT tiles) is rescaled by exp2(m_old - m_new). A row that has seen nothing visible keeps
// m = -inf and is rescaled against 0 instead (no inf - inf).
template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&o)[DT][4], RowState& st) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = st.m[hr];
#pragma unroll
    for (int jn = 0; jn < NT; ++jn) mx = fmaxf(mx, fmaxf(s[jn][2 * hr], s[jn][2 * hr + 1]));
    mx = quad_max(mx);
    const float m_use = mx == -INFINITY ? 0.f : mx;
    const float alpha = td_exp2_fast(st.m[hr] - m_use);
    st.m[hr] = mx;
    float sum = 0.f;
#pragma unroll
    for (int jn = 0; jn < NT; ++jn)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = td_exp2_fast(s[jn][2 * hr + e] - m_use);
        s[jn][2 * hr + e] = p;
        sum += p;
      }
    st.l[hr] = st.l[hr] * alpha + sum;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][2 * hr] *= alpha;
      o[dt][2 * hr + 1] *= alpha;
    }
  }
}

// Dropout on a warp's probabilities in place (after the row sums took them whole): rows row0 + g (+ 8), columns
// n0 + 8 jn + 2t (+ 1).
template <int NT>
__device__ __forceinline__ void apply_dropout(float (&s)[NT][4], const AttnArgs& a, const ScoreParams& sp, int64_t b,
                                              int64_t h, int64_t row0, int64_t n0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jn = 0; jn < NT; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[jn][e] *= drop_factor(a, sp, b, h, row0 + g + 8 * (e >> 1), n0 + jn * 8 + 2 * t + (e & 1));
}

}  // namespace flash
}  // namespace attention
}  // namespace torch_dnn

// CPU convolution: direct loops over conv_kernels.h's 3-D problem (1-D and 2-D ones have unit leading dims), every
// operand read through its strides. Each pass owns a disjoint part of its result, so threads never share an
// accumulator and the result does not depend on the thread count:
//   fprop: one (n, k) output plane per task, accumulated over the group's channels and the taps;
//   dgrad: one (n, c) input plane per task, the output gradient scattered back through each tap;
//   wgrad: one (k, c) filter per task, a sum over the batch and the output positions for each tap.
// The innermost loop runs along the output's last spatial dim (contiguous in NCHW) over the positions whose tap
// lands inside the input, so no bounds test sits inside it. Where the channels are innermost in memory
// (channels-last layouts) the loops run per pixel instead, the channels innermost (*_channels_inner), with the same
// ownership: an output pixel's channels (fprop), an input pixel's (dgrad), a (group, tap, block of output channels)
// filter slice (wgrad).
#include "conv/conv_cpu.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace torch_dnn {
namespace conv {

namespace {

// The output positions o in [lo, hi) whose input position o * stride + off lies in [0, in).
struct Range {
  int64_t lo, hi;
};
inline Range inside(int64_t in, int64_t out, int64_t stride, int64_t off) {
  const int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  const int64_t last = in - 1 - off;  // o * stride <= last
  const int64_t hi = last < 0 ? 0 : std::min(out, last / stride + 1);
  return {std::min(lo, hi), hi};
}

// Element offsets of the three spatial dims of an operand.
inline int64_t at3(const int64_t* st, int64_t a, int64_t b, int64_t c) { return a * st[2] + b * st[3] + c * st[4]; }

// One filter tap (t, r, s) as the NCHW passes walk it: the offsets of its input positions from the strided output
// positions along each spatial dim (input = output * stride + off) and the output ranges whose input position lies
// inside the input, so that no bounds test sits in the loops over them.
struct Tap {
  int64_t t, r, s;
  int64_t off0, off1, off2;
  Range rp, rq, ro;
};

// f(tap) for every tap of the filter, t outermost, s innermost.
template <class F>
void for_each_tap(const ConvGeometry& g, F&& f) {
  Tap k;
  for (k.t = 0; k.t < g.ker[0]; ++k.t) {
    k.off0 = k.t * g.dil[0] - g.pad[0];
    k.rp = inside(g.in[0], g.out[0], g.stride[0], k.off0);
    for (k.r = 0; k.r < g.ker[1]; ++k.r) {
      k.off1 = k.r * g.dil[1] - g.pad[1];
      k.rq = inside(g.in[1], g.out[1], g.stride[1], k.off1);
      for (k.s = 0; k.s < g.ker[2]; ++k.s) {
        k.off2 = k.s * g.dil[2] - g.pad[2];
        k.ro = inside(g.in[2], g.out[2], g.stride[2], k.off2);
        f(static_cast<const Tap&>(k));
      }
    }
  }
}

// fprop's epilogue (conv_kernels.h): act(acc + bias[k] + residual), in the accumulation type, one rounding to T.
template <typename T, typename A>
struct Epilogue {
  const T* bias;
  const T* res;  // shaped as y, or null
  const int64_t* rs;
  Act act;
  A pa, pb;
  explicit Epilogue(const ConvArgs& a)
      : bias(static_cast<const T*>(a.bias)), res(static_cast<const T*>(a.residual.ptr)), rs(a.residual.stride),
        act(a.act), pa(A(a.act_params.a)), pb(A(a.act_params.b)) {}
  A bias_of(int64_t k) const { return bias != nullptr ? A(bias[k]) : A(0); }
  // the residual of output (n, k, p, q, o), or 0
  A res_at(int64_t n, int64_t k, int64_t p, int64_t q, int64_t o) const {
    return res != nullptr ? A(res[n * rs[0] + k * rs[1] + at3(rs, p, q, o)]) : A(0);
  }
  // f(act_fn) with act_fn(v) = the activation of v, the activation fixed at compile time
  template <class F>
  void with_act(F&& f) const {
    activation::dispatch_act(act, [&]<Act K>() { f([this](A v) { return activation::act_forward<K, A>(v, pa, pb); }); });
  }
};

// A pass's operands as T, the one it writes T* and the ones it reads const T* (fprop writes y, dgrad x, wgrad w),
// with their strides.
template <typename T, Pass P>
struct Operands {
  std::conditional_t<P == Pass::Dgrad, T*, const T*> x;
  std::conditional_t<P == Pass::Wgrad, T*, const T*> w;
  std::conditional_t<P == Pass::Fprop, T*, const T*> y;
  const int64_t *xs, *ws, *ys;
};

template <typename T, Pass P>
Operands<T, P> operands(const ConvArgs& a) {
  using O = Operands<T, P>;
  return {static_cast<decltype(O::x)>(a.x.ptr), static_cast<decltype(O::w)>(a.w.ptr),
          static_cast<decltype(O::y)>(a.y.ptr), a.x.stride, a.w.stride, a.y.stride};
}

template <typename T>
void fprop(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const auto [x, w, y, xs, ws, ys] = operands<T, Pass::Fprop>(a);
  const Epilogue<T, A> ep(a);
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group();
  const int64_t P = g.out[0], Q = g.out[1], O = g.out[2];
  at::parallel_for(0, g.N * g.K, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(size_t(P * Q * O));
    for (int64_t nk = begin; nk < end; ++nk) {
      const int64_t n = nk / g.K, k = nk % g.K, c0 = (k / Kg) * Cg;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t cc = 0; cc < Cg; ++cc) {
        const T* xc = x + n * xs[0] + (c0 + cc) * xs[1];
        const T* wk = w + k * ws[0] + cc * ws[1];
        for_each_tap(g, [&](const Tap& tp) {
          if (tp.ro.lo >= tp.ro.hi) return;
          const A wv = A(wk[at3(ws, tp.t, tp.r, tp.s)]);
          const int64_t step = g.stride[2] * xs[4], n_o = tp.ro.hi - tp.ro.lo;
          for (int64_t p = tp.rp.lo; p < tp.rp.hi; ++p) {
            for (int64_t q = tp.rq.lo; q < tp.rq.hi; ++q) {
              const T* xr = xc + at3(xs, p * g.stride[0] + tp.off0, q * g.stride[1] + tp.off1,
                                     tp.ro.lo * g.stride[2] + tp.off2);
              A* ar = acc.data() + (p * Q + q) * O + tp.ro.lo;
              for (int64_t o = 0; o < n_o; ++o) ar[o] += wv * A(xr[o * step]);
            }
          }
        });
      }
      const A b = ep.bias_of(k);
      T* yk = y + n * ys[0] + k * ys[1];
      ep.with_act([&](auto act) {
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q) {
            const A* ar = acc.data() + (p * Q + q) * O;
            T* yr = yk + at3(ys, p, q, 0);
            for (int64_t o = 0; o < O; ++o) yr[o * ys[4]] = T(act(ar[o] + b + ep.res_at(n, k, p, q, o)));
          }
      });
    }
  });
}

template <typename T>
void dgrad(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const auto [dx, w, dy, xs, ws, ys] = operands<T, Pass::Dgrad>(a);
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group();
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  at::parallel_for(0, g.N * g.C, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(size_t(D * H * W));
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t n = nc / g.C, c = nc % g.C, cc = c % Cg, k0 = (c / Cg) * Kg;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t kk = 0; kk < Kg; ++kk) {
        const T* dyk = dy + n * ys[0] + (k0 + kk) * ys[1];
        const T* wk = w + (k0 + kk) * ws[0] + cc * ws[1];
        for_each_tap(g, [&](const Tap& tp) {
          if (tp.ro.lo >= tp.ro.hi) return;
          const A wv = A(wk[at3(ws, tp.t, tp.r, tp.s)]);
          const int64_t n_o = tp.ro.hi - tp.ro.lo, sw = g.stride[2];
          for (int64_t p = tp.rp.lo; p < tp.rp.hi; ++p) {
            for (int64_t q = tp.rq.lo; q < tp.rq.hi; ++q) {
              const T* dr = dyk + at3(ys, p, q, tp.ro.lo);
              A* ar = acc.data() + ((p * g.stride[0] + tp.off0) * H + q * g.stride[1] + tp.off1) * W + tp.ro.lo * sw +
                      tp.off2;
              for (int64_t o = 0; o < n_o; ++o) ar[o * sw] += wv * A(dr[o * ys[4]]);
            }
          }
        });
      }
      T* dxc = dx + n * xs[0] + c * xs[1];
      for (int64_t d = 0; d < D; ++d)
        for (int64_t h = 0; h < H; ++h) {
          const A* ar = acc.data() + (d * H + h) * W;
          T* xr = dxc + at3(xs, d, h, 0);
          for (int64_t i = 0; i < W; ++i) xr[i * xs[4]] = T(ar[i]);
        }
    }
  });
}

template <typename T>
void wgrad(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const auto [x, dw, dy, xs, ws, ys] = operands<T, Pass::Wgrad>(a);
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group();
  at::parallel_for(0, g.K * Cg, 1, [&](int64_t begin, int64_t end) {
    for (int64_t kc = begin; kc < end; ++kc) {
      const int64_t k = kc / Cg, cc = kc % Cg, c = (k / Kg) * Cg + cc;
      for_each_tap(g, [&](const Tap& tp) {
        const int64_t n_o = tp.ro.hi - tp.ro.lo, step = g.stride[2] * xs[4];
        A total = 0;
        for (int64_t n = 0; n < g.N && n_o > 0; ++n) {
          const T* xc = x + n * xs[0] + c * xs[1];
          const T* dyk = dy + n * ys[0] + k * ys[1];
          A part = 0;  // one sample's sum, then the batch's (a shorter chain of float additions)
          for (int64_t p = tp.rp.lo; p < tp.rp.hi; ++p) {
            for (int64_t q = tp.rq.lo; q < tp.rq.hi; ++q) {
              const T* dr = dyk + at3(ys, p, q, tp.ro.lo);
              const T* xr = xc + at3(xs, p * g.stride[0] + tp.off0, q * g.stride[1] + tp.off1,
                                     tp.ro.lo * g.stride[2] + tp.off2);
              A row = 0;
              for (int64_t o = 0; o < n_o; ++o) row += A(dr[o * ys[4]]) * A(xr[o * step]);
              part += row;
            }
          }
          total += part;
        }
        dw[k * ws[0] + cc * ws[1] + at3(ws, tp.t, tp.r, tp.s)] = T(total);
      });
    }
  });
}

template <typename T>
void bias_grad(const ConvGeometry& g, const Operand5& dyo, T* db) {
  using A = at::opmath_type<T>;
  const T* dy = static_cast<const T*>(dyo.ptr);
  const int64_t* ys = dyo.stride;
  at::parallel_for(0, g.K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      A total = 0;
      for (int64_t n = 0; n < g.N; ++n) {
        A part = 0;
        const T* dyk = dy + n * ys[0] + k * ys[1];
        for (int64_t p = 0; p < g.out[0]; ++p)
          for (int64_t q = 0; q < g.out[1]; ++q) {
            const T* dr = dyk + at3(ys, p, q, 0);
            A row = 0;
            for (int64_t o = 0; o < g.out[2]; ++o) row += A(dr[o * ys[4]]);
            part += row;
          }
        total += part;
      }
      db[k] = T(total);
    }
  });
}

// ---- channels innermost (channels_last, channels_last_3d, (N, L, C)): per output or input pixel, the channels as
// the innermost loop (contiguous in memory), the weight copied once into the order that loop wants ----

// Whether the channels of an operand with `channels` of them sit next to each other in memory.
inline bool channels_inner(const Operand5& o, int64_t channels) { return channels == 1 || o.stride[1] == 1; }

// Filter tap `tap` as (t, r, s), t outermost, s innermost.
struct Trs {
  int64_t t, r, s;
};
inline Trs tap_trs(const ConvGeometry& g, int64_t tap) {
  return {tap / (g.ker[1] * g.ker[2]), (tap / g.ker[2]) % g.ker[1], tap % g.ker[2]};
}

// The weight as [G][tap][outer][inner] in the accumulation type: inner = Kg (fprop) or Cg (dgrad).
template <typename T, typename A>
std::vector<A> weight_by_tap(const ConvArgs& a, bool k_inner) {
  const ConvGeometry& g = a.g;
  const T* w = static_cast<const T*>(a.w.ptr);
  const int64_t* ws = a.w.stride;
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group(), taps = g.ker[0] * g.ker[1] * g.ker[2];
  std::vector<A> out(size_t(g.K * Cg * taps));
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t cc = 0; cc < Cg; ++cc)
      for (int64_t tap = 0; tap < taps; ++tap) {
        const auto [t, r, s] = tap_trs(g, tap);
        const int64_t grp = k / Kg, kk = k % Kg;
        const int64_t at = k_inner ? ((grp * taps + tap) * Cg + cc) * Kg + kk : ((grp * taps + tap) * Kg + kk) * Cg + cc;
        out[size_t(at)] = A(w[k * ws[0] + cc * ws[1] + at3(ws, t, r, s)]);
      }
  return out;
}

// acc[grp Out + j] += src[grp group_step + i] * w[i][j] for every group, i < In and j < Out, w being tap `tap` of the
// group in weight_by_tap's copy `wt` ([G][tap][In][Out]): one source pixel (channels contiguous) through one tap,
// fprop's x into y's channels (In = Cg, Out = Kg) or dgrad's dy into dx's (In = Kg, Out = Cg).
template <typename T, typename A>
void accumulate_pixel(A* acc, const T* src, int64_t group_step, const A* wt, int64_t G, int64_t taps, int64_t tap,
                      int64_t In, int64_t Out) {
  for (int64_t grp = 0; grp < G; ++grp) {
    const T* sp = src + grp * group_step;
    const A* wr = wt + (grp * taps + tap) * In * Out;
    A* ag = acc + grp * Out;
    for (int64_t i = 0; i < In; ++i) {
      const A sv = A(sp[i]);
      const A* wi = wr + i * Out;
      for (int64_t j = 0; j < Out; ++j) ag[j] += sv * wi[j];
    }
  }
}

template <typename T>
void fprop_channels_inner(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const auto [x, w, y, xs, ws, ys] = operands<T, Pass::Fprop>(a);  // w: through weight_by_tap
  const Epilogue<T, A> ep(a);
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group(), taps = g.ker[0] * g.ker[1] * g.ker[2];
  const int64_t P = g.out[0], Q = g.out[1], O = g.out[2];
  const std::vector<A> wt = weight_by_tap<T, A>(a, /*k_inner=*/true);
  at::parallel_for(0, g.N * P * Q, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(size_t(g.K));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (P * Q), p = (row / Q) % P, q = row % Q;
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t k = 0; k < g.K; ++k) acc[k] = ep.bias_of(k);
        for (int64_t tap = 0; tap < taps; ++tap) {
          const auto [t, r, s] = tap_trs(g, tap);
          const int64_t id = p * g.stride[0] - g.pad[0] + t * g.dil[0];
          const int64_t ih = q * g.stride[1] - g.pad[1] + r * g.dil[1];
          const int64_t iw = o * g.stride[2] - g.pad[2] + s * g.dil[2];
          if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2]) continue;
          accumulate_pixel(acc.data(), x + n * xs[0] + at3(xs, id, ih, iw), Cg * xs[1], wt.data(), g.G, taps, tap, Cg,
                           Kg);
        }
        T* yp = y + n * ys[0] + at3(ys, p, q, o);
        ep.with_act([&](auto act) {
          for (int64_t k = 0; k < g.K; ++k) yp[k] = T(act(acc[k] + ep.res_at(n, k, p, q, o)));
        });
      }
    }
  });
}

template <typename T>
void dgrad_channels_inner(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const auto [dx, w, dy, xs, ws, ys] = operands<T, Pass::Dgrad>(a);  // w: through weight_by_tap
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group(), taps = g.ker[0] * g.ker[1] * g.ker[2];
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  const std::vector<A> wt = weight_by_tap<T, A>(a, /*k_inner=*/false);
  // output position along one dim whose tap `i` reads input position `in`, or -1
  const auto source = [&](int dim, int64_t in, int64_t i) -> int64_t {
    const int64_t num = in + g.pad[dim] - i * g.dil[dim];
    if (num < 0 || num % g.stride[dim] != 0) return -1;
    const int64_t o = num / g.stride[dim];
    return o < g.out[dim] ? o : -1;
  };
  at::parallel_for(0, g.N * D * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(size_t(g.C));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (D * H), d = (row / H) % D, h = row % H;
      for (int64_t iw = 0; iw < W; ++iw) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t tap = 0; tap < taps; ++tap) {
          const auto [t, r, s] = tap_trs(g, tap);
          const int64_t p = source(0, d, t), q = source(1, h, r), o = source(2, iw, s);
          if (p < 0 || q < 0 || o < 0) continue;
          accumulate_pixel(acc.data(), dy + n * ys[0] + at3(ys, p, q, o), Kg * ys[1], wt.data(), g.G, taps, tap, Kg,
                           Cg);
        }
        T* xp = dx + n * xs[0] + at3(xs, d, h, iw);
        for (int64_t c = 0; c < g.C; ++c) xp[c] = T(acc[c]);
      }
    }
  });
}

template <typename T>
void wgrad_channels_inner(const ConvArgs& a) {
  using A = at::opmath_type<T>;
  const ConvGeometry& g = a.g;
  const auto [x, dw, dy, xs, ws, ys] = operands<T, Pass::Wgrad>(a);
  const int64_t Cg = g.c_per_group(), Kg = g.k_per_group(), taps = g.ker[0] * g.ker[1] * g.ker[2];
  const int64_t P = g.out[0], Q = g.out[1], O = g.out[2];
  constexpr int64_t kChunk = 32;  // output channels per task: a 1x1 filter still splits across threads
  const int64_t chunks = (Kg + kChunk - 1) / kChunk;
  at::parallel_for(0, g.G * taps * chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> total, part;
    std::vector<A> xrow(static_cast<size_t>(Cg));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t grp = task / (taps * chunks), tap = (task / chunks) % taps, k0 = (task % chunks) * kChunk;
      const int64_t nk = std::min(kChunk, Kg - k0);
      const auto [t, r, s] = tap_trs(g, tap);
      const int64_t off0 = t * g.dil[0] - g.pad[0], off1 = r * g.dil[1] - g.pad[1], off2 = s * g.dil[2] - g.pad[2];
      const Range rp = inside(g.in[0], P, g.stride[0], off0), rq = inside(g.in[1], Q, g.stride[1], off1),
                  ro = inside(g.in[2], O, g.stride[2], off2);
      total.assign(size_t(nk * Cg), A(0));
      for (int64_t n = 0; n < g.N; ++n) {
        part.assign(size_t(nk * Cg), A(0));  // one sample's sum, then the batch's
        for (int64_t p = rp.lo; p < rp.hi; ++p)
          for (int64_t q = rq.lo; q < rq.hi; ++q)
            for (int64_t o = ro.lo; o < ro.hi; ++o) {
              const T* xp = x + n * xs[0] + grp * Cg * xs[1] +
                            at3(xs, p * g.stride[0] + off0, q * g.stride[1] + off1, o * g.stride[2] + off2);
              const T* dyp = dy + n * ys[0] + (grp * Kg + k0) * ys[1] + at3(ys, p, q, o);
              for (int64_t cc = 0; cc < Cg; ++cc) xrow[cc] = A(xp[cc]);
              for (int64_t kk = 0; kk < nk; ++kk) {
                const A dv = A(dyp[kk]);
                A* ak = part.data() + kk * Cg;
                for (int64_t cc = 0; cc < Cg; ++cc) ak[cc] += dv * xrow[cc];
              }
            }
        for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
      }
      for (int64_t kk = 0; kk < nk; ++kk)
        for (int64_t cc = 0; cc < Cg; ++cc)
          dw[(grp * Kg + k0 + kk) * ws[0] + cc * ws[1] + at3(ws, t, r, s)] = T(total[kk * Cg + cc]);
    }
  });
}

template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Float16: return f(c10::Half{});
    case DType::BFloat16: return f(c10::BFloat16{});
  }
  TORCH_CHECK(false, "torch_dnn: convolution: unsupported dtype");
}

}  // namespace

void conv_cpu(Pass pass, const ConvArgs& a) {
  dispatch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool x_inner = channels_inner(a.x, a.g.C), y_inner = channels_inner(a.y, a.g.K);
    switch (pass) {
      case Pass::Fprop: return x_inner && y_inner ? fprop_channels_inner<T>(a) : fprop<T>(a);
      case Pass::Dgrad: return x_inner && y_inner ? dgrad_channels_inner<T>(a) : dgrad<T>(a);
      case Pass::Wgrad: return x_inner && y_inner ? wgrad_channels_inner<T>(a) : wgrad<T>(a);
    }
  });
}

void conv_bias_grad_cpu(DType dtype, const ConvGeometry& g, const Operand5& dy, void* db) {
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    bias_grad<T>(g, dy, static_cast<T*>(db));
  });
}

}  // namespace conv
}  // namespace torch_dnn

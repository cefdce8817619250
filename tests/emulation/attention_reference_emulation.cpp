// The reference attention kernels (csrc/attention/attention_reference.cu) run on the CPU through cuda_host_shim.h
// against a direct float64 evaluation of attention_kernels.h's formulas: a check of the kernels' index arithmetic
// (strides, GQA, masks, causal/window alignment, softcap, ALiBi, dropout, variable lengths, tile edges) without a
// GPU. A standalone program: tests/test_attention_emulation.py builds it with g++ and reads its verdict.
#include "cuda_host_shim.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "warp_emulation.h"

#include "attention/attention_reference.cu"

using namespace torch_dnn;
using namespace torch_dnn::attention;

namespace {

std::mt19937_64 rng(1234);
double urand(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

struct Case {
  const char* name;
  int B = 2, Hq = 2, Hkv = 2, Sq = 5, Sk = 7, Dqk = 8, Dv = 8;
  bool causal = false, bottom_right = false;
  int wl = -1, wr = -1;
  double softcap = 0, dropout = 0;
  MaskKind mask = MaskKind::None;
  bool mask_bcast = false;  // mask [1][Hq][1][Sk] broadcast, else full
  bool alibi = false;
  bool varlen = false;
  std::vector<int> lens_q, lens_k;  // varlen
  bool mask_all_row = false;        // a bool mask that hides every key of some rows
};

// A [B][H][S][D] operand laid out as [B][S][H][D] (or packed [total][H][D]) in T.
template <typename T>
struct Buf {
  std::vector<T> data;
  Operand4 op;
  int H = 0, D = 0;
  bool varlen = false;
  int S = 0;
  void init(int B, int H_, int S_, int D_, bool vl, int total) {
    H = H_, D = D_, S = S_, varlen = vl;
    const int rows = vl ? total : B * S;
    data.assign(size_t(rows) * H * D, T(0));
    op.ptr = data.data();
    op.ss = int64_t(H) * D;
    op.sh = D;
    op.sb = vl ? 0 : int64_t(S) * H * D;
  }
  // element (b, h, s, d); s is the packed row (row0 + s) for varlen
  T& at(int b, int h, int64_t s, int d) { return data[size_t(b * op.sb + h * op.sh + s * op.ss + d)]; }
};


void* ws_get(void*, int64_t bytes) {
  static std::vector<std::vector<unsigned char>> keep;
  keep.emplace_back(size_t(bytes), 0xff);
  return keep.back().data();
}

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<__half>() { return DType::Float16; }
template <> constexpr DType dtype_of<__nv_bfloat16>() { return DType::BFloat16; }

template <typename T>
bool run_case(const Case& c, double tol) {
  using A = acc_t<T>;
  const int B = c.B, Hq = c.Hq, Hkv = c.Hkv, Dqk = c.Dqk, Dv = c.Dv;
  std::vector<int> cuq(B + 1, 0), cuk(B + 1, 0);
  int Sq = c.Sq, Sk = c.Sk;
  if (c.varlen) {
    Sq = Sk = 0;
    for (int b = 0; b < B; ++b) {
      cuq[b + 1] = cuq[b] + c.lens_q[b];
      cuk[b + 1] = cuk[b] + c.lens_k[b];
      Sq = std::max(Sq, c.lens_q[b]);
      Sk = std::max(Sk, c.lens_k[b]);
    }
  }
  auto lq = [&](int b) { return c.varlen ? c.lens_q[b] : Sq; };
  auto lk = [&](int b) { return c.varlen ? c.lens_k[b] : Sk; };
  auto r0q = [&](int b) { return c.varlen ? cuq[b] : 0; };
  auto r0k = [&](int b) { return c.varlen ? cuk[b] : 0; };
  Buf<T> q, k, v, o, dout, dq, dk, dv;
  q.init(B, Hq, Sq, Dqk, c.varlen, cuq[B]);
  o.init(B, Hq, Sq, Dv, c.varlen, cuq[B]);
  dout.init(B, Hq, Sq, Dv, c.varlen, cuq[B]);
  dq.init(B, Hq, Sq, Dqk, c.varlen, cuq[B]);
  k.init(B, Hkv, Sk, Dqk, c.varlen, cuk[B]);
  v.init(B, Hkv, Sk, Dv, c.varlen, cuk[B]);
  dk.init(B, Hkv, Sk, Dqk, c.varlen, cuk[B]);
  dv.init(B, Hkv, Sk, Dv, c.varlen, cuk[B]);
  for (auto* x : {&q, &k, &v, &dout})
    for (auto& e : x->data) e = fromd<T>(urand(-1.5, 1.5));

  // mask over [B][Hq][Sq][Sk] (full) or [1][Hq][1][Sk] (broadcast)
  const int64_t mB = c.mask_bcast ? 1 : B, mS = c.mask_bcast ? 1 : Sq;
  std::vector<unsigned char> bmask(size_t(mB * Hq * mS * Sk));
  std::vector<T> amask(bmask.size());
  for (size_t x = 0; x < bmask.size(); ++x) {
    bmask[x] = urand(0, 1) < 0.7;
    amask[x] = fromd<T>(urand(0, 1) < 0.1 ? -INFINITY : urand(-2, 2));
  }
  const int64_t msb = c.mask_bcast ? 0 : int64_t(Hq) * Sq * Sk, msh = c.mask_bcast ? Sk : int64_t(Sq) * Sk,
                msq = c.mask_bcast ? 0 : Sk;
  if (c.mask_all_row && c.mask == MaskKind::Bool && !c.mask_bcast)
    for (int j = 0; j < Sk; ++j) bmask[size_t(1 * msh + 2 * msq + j)] = 0;  // (b 0, h 1, i 2) sees nothing
  std::vector<float> slopes(size_t(B) * Hq);
  for (auto& s : slopes) s = float(urand(0.05, 0.5));

  AttnArgs a;
  a.dtype = dtype_of<T>();
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Sk = Sk, a.Dqk = Dqk, a.Dv = Dv;
  a.q = q.op, a.k = k.op, a.v = v.op, a.o = o.op;
  std::vector<A> lse(size_t(B) * Hq * Sq, A(-7));
  a.lse = lse.data();
  a.scale = 1.0 / std::sqrt(double(Dqk)) * 1.3;
  a.causal = c.causal, a.bottom_right = c.bottom_right, a.window_left = c.wl, a.window_right = c.wr;
  a.softcap = c.softcap;
  a.mask_kind = c.mask;
  a.mask = c.mask == MaskKind::Bool ? static_cast<const void*>(bmask.data()) : static_cast<const void*>(amask.data());
  a.mask_dtype = dtype_of<T>();
  a.mask_sb = msb, a.mask_sh = msh, a.mask_sq = msq, a.mask_sk = 1;
  a.alibi_slopes = c.alibi ? slopes.data() : nullptr;
  a.alibi_sb = Hq;
  a.dropout_p = c.dropout;
  a.seed = 0x1234567890abull, a.offset = 77;
  if (c.varlen) a.cu_seqlens_q = cuq.data(), a.cu_seqlens_k = cuk.data();
  Workspace ws{ws_get, nullptr};

  // float64 evaluation of the contract
  const int G = Hq / Hkv;
  std::vector<double> ro(o.data.size(), 0), rdq(dq.data.size(), 0), rdk(dk.data.size(), 0), rdv(dv.data.size(), 0);
  std::vector<double> rlse(lse.size(), 0), rdbias(size_t(B) * Hq * Sq * Sk, 0);
  const uint32_t thr = dropout_threshold(c.dropout);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / G, nq = lq(b), nk = lk(b);
      const int64_t shift = c.bottom_right ? nk - nq : 0;
      for (int i = 0; i < nq; ++i) {
        std::vector<double> s(nk), t(nk, 0), p(nk, 0), f(nk, 1);
        std::vector<bool> vis(nk);
        double mx = -INFINITY;
        for (int j = 0; j < nk; ++j) {
          const int64_t ia = i + shift;
          int64_t right = c.causal ? 0 : c.wr;
          bool ok = (right < 0 || j <= ia + right) && (c.wl < 0 || ia - j <= c.wl);
          const int64_t mi = b * msb + h * msh + i * msq + j;
          if (c.mask == MaskKind::Bool && !bmask[size_t(mi)]) ok = false;
          vis[j] = ok;
          if (!ok) {
            s[j] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int d = 0; d < Dqk; ++d) dot += tod(q.at(b, h, r0q(b) + i, d)) * tod(k.at(b, hk, r0k(b) + j, d));
          double x = a.scale * dot;
          if (c.softcap > 0) {
            t[j] = std::tanh(x / c.softcap);
            x = c.softcap * t[j];
          }
          if (c.mask == MaskKind::Additive) x += tod(amask[size_t(mi)]);
          if (c.alibi) x -= double(slopes[size_t(b * Hq + h)]) * std::fabs(double(ia - j));
          s[j] = x;
          mx = std::max(mx, x);
        }
        double l = 0;
        if (mx != -INFINITY)
          for (int j = 0; j < nk; ++j) l += s[j] == -INFINITY ? 0 : std::exp(s[j] - mx);
        const size_t li = size_t((b * Hq + h) * Sq + i);
        rlse[li] = l > 0 ? mx + std::log(l) : INFINITY;
        for (int j = 0; j < nk; ++j) {
          p[j] = (l > 0 && s[j] != -INFINITY) ? std::exp(s[j] - mx) / l : 0;
          if (c.dropout > 0) {
            const uint64_t n = uint64_t(((int64_t(b) * Hq + h) * Sq + i) * Sk + j);
            f[j] = dropout_keep(a.seed, a.offset, n, thr) ? 1.0 / (1.0 - c.dropout) : 0.0;
          }
        }
        std::vector<double> orow(Dv, 0);
        for (int j = 0; j < nk; ++j)
          for (int d = 0; d < Dv; ++d) orow[d] += p[j] * f[j] * tod(v.at(b, hk, r0k(b) + j, d));
        for (int d = 0; d < Dv; ++d) {
          ro[size_t(&o.at(b, h, r0q(b) + i, d) - o.data.data())] = orow[d];
          o.at(b, h, r0q(b) + i, d) = fromd<T>(orow[d]);  // backward reads the rounded output, as the op's
        }
        double D = 0;
        for (int d = 0; d < Dv; ++d) D += tod(dout.at(b, h, r0q(b) + i, d)) * tod(o.at(b, h, r0q(b) + i, d));
        for (int j = 0; j < nk; ++j) {
          double dp = 0;
          for (int d = 0; d < Dv; ++d) dp += tod(dout.at(b, h, r0q(b) + i, d)) * tod(v.at(b, hk, r0k(b) + j, d));
          const double ds = p[j] * (dp * f[j] - D);
          rdbias[size_t(((b * Hq + h) * int64_t(Sq) + i) * Sk + j)] = ds;
          const double dsr = ds * (1 - t[j] * t[j]) * a.scale;
          for (int d = 0; d < Dqk; ++d) {
            rdq[size_t(&dq.at(b, h, r0q(b) + i, d) - dq.data.data())] += dsr * tod(k.at(b, hk, r0k(b) + j, d));
            rdk[size_t(&dk.at(b, hk, r0k(b) + j, d) - dk.data.data())] += dsr * tod(q.at(b, h, r0q(b) + i, d));
          }
          for (int d = 0; d < Dv; ++d)
            rdv[size_t(&dv.at(b, hk, r0k(b) + j, d) - dv.data.data())] +=
                p[j] * f[j] * tod(dout.at(b, h, r0q(b) + i, d));
        }
      }
    }

  // the kernels: forward into a fresh output (the reference above rounded o in place for backward)
  std::vector<T> o_ref_rounded = o.data;
  for (auto& e : o.data) e = fromd<T>(12345.0);
  bool ok = true;
  auto fail = [&](const char* what, double got, double want, size_t at) {
    if (ok) std::printf("FAIL %s [%s] %s at %zu: got %.9g want %.9g\n", c.name, dtype_name(a.dtype), what, at, got, want);
    ok = false;
  };
  auto close = [&](double got, double want) {
    if (std::isinf(want) || std::isinf(got)) return got == want;
    return std::fabs(got - want) <= tol * (1 + std::fabs(want));
  };
  if (reference_forward(a, ws, nullptr) != cudaSuccess) {
    std::printf("FAIL %s: forward refused\n", c.name);
    return false;
  }
  // o: compare the written rows against ro (rows outside every sequence keep the poison)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < lq(b); ++i) {
        for (int d = 0; d < Dv; ++d) {
          const size_t x = size_t(&o.at(b, h, r0q(b) + i, d) - o.data.data());
          if (!close(tod(o.data[x]), ro[x])) fail("o", tod(o.data[x]), ro[x], x);
        }
        const size_t li = size_t((b * Hq + h) * Sq + i);
        if (!close(double(lse[li]), rlse[li])) fail("lse", double(lse[li]), rlse[li], li);
      }
  // backward from the reference's rounded output, so that D matches
  o.data = o_ref_rounded;
  for (auto* x : {&dq, &dk, &dv})
    for (auto& e : x->data) e = fromd<T>(12345.0);
  std::vector<T> dbias(rdbias.size(), fromd<T>(12345.0));
  AttnGrads g;
  g.dout = dout.op, g.dq = dq.op, g.dk = dk.op, g.dv = dv.op;
  if (c.mask == MaskKind::Additive) {
    g.dbias = dbias.data();
    g.dbias_sq = Sk, g.dbias_sh = int64_t(Sq) * Sk, g.dbias_sb = int64_t(Hq) * Sq * Sk;
  }
  if (reference_backward(a, g, ws, nullptr) != cudaSuccess) {
    std::printf("FAIL %s: backward refused\n", c.name);
    return false;
  }
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < lq(b); ++i) {
        for (int d = 0; d < Dqk; ++d) {
          const size_t x = size_t(&dq.at(b, h, r0q(b) + i, d) - dq.data.data());
          if (!close(tod(dq.data[x]), rdq[x])) fail("dq", tod(dq.data[x]), rdq[x], x);
        }
        if (c.mask == MaskKind::Additive)
          for (int j = 0; j < lk(b); ++j) {
            const size_t x = size_t(((b * Hq + h) * int64_t(Sq) + i) * Sk + j);
            if (!close(tod(dbias[x]), rdbias[x])) fail("dbias", tod(dbias[x]), rdbias[x], x);
          }
      }
    for (int h = 0; h < Hkv; ++h)
      for (int j = 0; j < lk(b); ++j) {
        for (int d = 0; d < Dqk; ++d) {
          const size_t x = size_t(&dk.at(b, h, r0k(b) + j, d) - dk.data.data());
          if (!close(tod(dk.data[x]), rdk[x])) fail("dk", tod(dk.data[x]), rdk[x], x);
        }
        for (int d = 0; d < Dv; ++d) {
          const size_t x = size_t(&dv.at(b, h, r0k(b) + j, d) - dv.data.data());
          if (!close(tod(dv.data[x]), rdv[x])) fail("dv", tod(dv.data[x]), rdv[x], x);
        }
      }
  }
  if (ok) std::printf("ok   %s [%s]\n", c.name, dtype_name(a.dtype));
  return ok;
}

}  // namespace

int main() {
  std::vector<Case> cases;
  auto add = [&](Case c) { cases.push_back(c); };
  { Case c; c.name = "plain"; add(c); }
  { Case c; c.name = "odd dims, long keys"; c.Sq = 3; c.Sk = 70; c.Dqk = 13; c.Dv = 37; add(c); }
  { Case c; c.name = "many rows"; c.Sq = 19; c.Sk = 33; c.B = 1; c.Hq = 1; c.Hkv = 1; add(c); }
  { Case c; c.name = "gqa 4:1"; c.Hq = 4; c.Hkv = 1; c.Sq = 9; c.Sk = 11; add(c); }
  { Case c; c.name = "causal top-left Sq<Sk"; c.causal = true; c.Sq = 10; c.Sk = 37; add(c); }
  { Case c; c.name = "causal top-left Sq>Sk"; c.causal = true; c.Sq = 21; c.Sk = 6; add(c); }
  { Case c; c.name = "causal bottom-right Sq<Sk"; c.causal = true; c.bottom_right = true; c.Sq = 10; c.Sk = 37; add(c); }
  { Case c; c.name = "causal bottom-right Sq>Sk (empty rows)"; c.causal = true; c.bottom_right = true; c.Sq = 21; c.Sk = 6; add(c); }
  { Case c; c.name = "window (3, 2)"; c.wl = 3; c.wr = 2; c.Sq = 18; c.Sk = 40; add(c); }
  { Case c; c.name = "window (5, 0) bottom-right"; c.wl = 5; c.wr = 0; c.bottom_right = true; c.Sq = 12; c.Sk = 45; add(c); }
  { Case c; c.name = "causal + window left 4"; c.causal = true; c.wl = 4; c.Sq = 30; c.Sk = 30; add(c); }
  { Case c; c.name = "softcap"; c.softcap = 1.5; c.Sq = 9; c.Sk = 40; add(c); }
  { Case c; c.name = "bool mask full + fully masked row"; c.mask = MaskKind::Bool; c.mask_all_row = true; c.Sq = 9; c.Sk = 35; add(c); }
  { Case c; c.name = "bool mask broadcast"; c.mask = MaskKind::Bool; c.mask_bcast = true; c.Sq = 9; c.Sk = 35; add(c); }
  { Case c; c.name = "additive mask full (dbias)"; c.mask = MaskKind::Additive; c.Sq = 9; c.Sk = 35; add(c); }
  { Case c; c.name = "additive mask broadcast + causal"; c.mask = MaskKind::Additive; c.mask_bcast = true; c.causal = true; c.Sq = 9; c.Sk = 35; add(c); }
  { Case c; c.name = "alibi bottom-right causal"; c.alibi = true; c.causal = true; c.bottom_right = true; c.Sq = 7; c.Sk = 20; add(c); }
  { Case c; c.name = "dropout 0.3"; c.dropout = 0.3; c.Sq = 9; c.Sk = 40; add(c); }
  { Case c; c.name = "dropout + gqa + softcap + causal"; c.dropout = 0.2; c.Hq = 4; c.Hkv = 2; c.softcap = 2; c.causal = true; c.Sq = 17; c.Sk = 17; add(c); }
  { Case c; c.name = "varlen (with an empty sequence)"; c.varlen = true; c.B = 3; c.lens_q = {5, 0, 13}; c.lens_k = {9, 4, 40}; add(c); }
  { Case c; c.name = "varlen causal bottom-right gqa"; c.varlen = true; c.B = 3; c.Hq = 4; c.Hkv = 2; c.causal = true; c.bottom_right = true; c.lens_q = {5, 3, 13}; c.lens_k = {9, 0, 40}; add(c); }
  { Case c; c.name = "Sk = 0"; c.Sk = 0; add(c); }
  { Case c; c.name = "Sq = 1"; c.Sq = 1; c.Sk = 70; c.Dqk = 40; c.Dv = 72; add(c); }
  // head dims past 48 KB of K/V tiles: fewer keys a tile, each dot product split over lanes
  { Case c; c.name = "wide heads (2 keys a tile)"; c.Dqk = 300; c.Dv = 290; c.Sq = 11; c.Sk = 9; c.causal = true; add(c); }
  bool ok = true;
  for (const Case& c : cases) {
    ok &= run_case<double>(c, 1e-9);
    ok &= run_case<float>(c, 2e-4);
  }
  for (int x : {0, 4, 12, 18}) ok &= run_case<__nv_bfloat16>(cases[size_t(x)], 6e-2);
  for (int x : {0, 4, 12, 18}) ok &= run_case<__half>(cases[size_t(x)], 1e-2);
  std::printf(ok ? "ALL OK\n" : "SOME FAILED\n");
  return ok ? 0 : 1;
}

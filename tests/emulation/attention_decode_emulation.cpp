// flash_decode's CUDA kernels (csrc/attention/flash_decode.cu: the append, the split-KV attention and the combine)
// run on the CPU through cuda_host_shim.h (a pretend device of two SMs, so several splits and row chunks run),
// against a float64 evaluation of decode_kernels.h's contract: contiguous and paged caches (scattered blocks, block
// sizes a power of two or not), the append in place (the cache checked after), ragged lengths from 0 to the
// capacity, causal with Sq > the length, GQA ratios 1 to 8 (one and several row chunks), head dims 64 / 128 / 256,
// every dtype, both variants of the split kernel (staged through shared memory, and registers). The outputs
// are poisoned (NaN) before the launch. A standalone program:
// tests/test_attention_emulation.py builds it with g++ and reads its verdict.
#include "cuda_host_shim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "attention/flash_decode.cu"

using namespace torch_dnn;
using namespace torch_dnn::attention;

namespace {

std::mt19937_64 rng(1234);
double urand(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<__half>() { return DType::Float16; }
template <> constexpr DType dtype_of<__nv_bfloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
// max-norm error allowed against float64: a few roundings of the output (16-bit), float's accumulation
template <typename T> double tolerance() {
  return sizeof(T) == 2 ? (dtype_of<T>() == DType::BFloat16 ? 8e-3 : 1e-3) : sizeof(T) == 4 ? 5e-6 : 1e-12;
}

void* ws_get(void*, int64_t bytes) {
  static std::vector<std::vector<unsigned char>> keep;
  keep.emplace_back(size_t(bytes), 0xff);  // NaN-ish floats: a read before a write shows
  return keep.back().data();
}

struct Case {
  const char* name;
  int B = 2, Sq = 1, Hq = 4, Hkv = 1, D = 64;
  int capacity = 300;  // keys a batch row can hold
  int block = 0;       // 0: contiguous; else paged with this block size
  int Snew = 0;
  bool causal = false;
  std::vector<int> lens;  // cache_seqlens (before the append)
};

template <typename T>
bool run_case(const Case& c, bool staged) {
  const int B = c.B, Sq = c.Sq, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const bool paged = c.block > 0;
  const int max_blocks = paged ? (c.capacity + c.block - 1) / c.block : 0;
  const int capacity = paged ? max_blocks * c.block : c.capacity;
  const int num_blocks = paged ? B * max_blocks + 3 : 0;
  const int64_t rows_cache = paged ? int64_t(num_blocks) * c.block : int64_t(B) * capacity;
  // caches [rows][Hkv][D] (contiguous: row b * capacity + j; paged: block * block + offset), NaN where unused
  std::vector<T> kc(size_t(rows_cache * Hkv * D)), vc(kc.size());
  std::vector<int32_t> table;
  if (paged) {
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(perm.begin(), perm.begin() + B * max_blocks);
  }
  auto row_of = [&](int b, int j) -> int64_t {
    return paged ? int64_t(table[b * max_blocks + j / c.block]) * c.block + j % c.block : int64_t(b) * capacity + j;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto& x : kc) x = fromd<T>(nan);
  for (auto& x : vc) x = fromd<T>(nan);
  std::vector<int32_t> lens = c.lens;
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < lens[b]; ++j) {
      for (int e = 0; e < Hkv * D; ++e) {
        kc[row_of(b, j) * Hkv * D + e] = fromd<T>(urand(-1, 1));
        vc[row_of(b, j) * Hkv * D + e] = fromd<T>(urand(-1, 1));
      }
    }
  }
  std::vector<T> q(size_t(B) * Sq * Hq * D), kn(size_t(B) * c.Snew * Hkv * D), vn(kn.size());
  for (auto& x : q) x = fromd<T>(urand(-2, 2));
  for (auto& x : kn) x = fromd<T>(urand(-1, 1));
  for (auto& x : vn) x = fromd<T>(urand(-1, 1));
  // the expected caches after the append
  std::vector<T> kc_ref = kc, vc_ref = vc;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < c.Snew; ++t) {
      for (int e = 0; e < Hkv * D; ++e) {
        kc_ref[row_of(b, lens[b] + t) * Hkv * D + e] = kn[(size_t(b) * c.Snew + t) * Hkv * D + e];
        vc_ref[row_of(b, lens[b] + t) * Hkv * D + e] = vn[(size_t(b) * c.Snew + t) * Hkv * D + e];
      }
    }
  }
  using L = std::conditional_t<std::is_same_v<T, double>, double, float>;
  std::vector<T> out(q.size(), fromd<T>(nan));
  std::vector<L> lse(size_t(B) * Hq * Sq, L(nan));

  DecodeArgs a;
  a.dtype = dtype_of<T>();
  a.B = B;
  a.Sq = Sq;
  a.Hq = Hq;
  a.Hkv = Hkv;
  a.D = D;
  a.Snew = c.Snew;
  a.q = q.data();
  a.q_sb = int64_t(Sq) * Hq * D;
  a.q_ss = int64_t(Hq) * D;
  a.q_sh = D;
  const int64_t s0 = paged ? int64_t(c.block) * Hkv * D : int64_t(capacity) * Hkv * D;
  a.k = {kc.data(), s0, int64_t(Hkv) * D, D};
  a.v = {vc.data(), s0, int64_t(Hkv) * D, D};
  if (c.Snew > 0) {
    a.k_new = kn.data();
    a.v_new = vn.data();
    a.kn_sb = a.vn_sb = int64_t(c.Snew) * Hkv * D;
    a.kn_ss = a.vn_ss = int64_t(Hkv) * D;
    a.kn_sh = a.vn_sh = D;
  }
  a.cache_seqlens = lens.data();
  if (paged) {
    a.block_table = table.data();
    a.bt_sb = max_blocks;
  }
  a.block_size = paged ? c.block : capacity;
  a.capacity = capacity;
  a.out = out.data();
  a.lse = lse.data();
  a.scale = 1.0 / std::sqrt(double(D));
  a.causal = c.causal;
  a.staged = staged;
  const char* variant = staged ? "staged" : "registers";
  const cudaError_t err = flash_decode(a, Workspace{&ws_get, nullptr}, nullptr);
  bool ok = err == cudaSuccess;
  if (!ok) std::printf("FAIL %s [%s, %s]: error %d\n", c.name, dtype_name(a.dtype), variant, int(err));

  // the caches: bitwise the expected ones (NaN where unused)
  for (size_t e = 0; ok && e < kc.size(); ++e) {
    const double x = tod(kc[e]), y = tod(kc_ref[e]), u = tod(vc[e]), w = tod(vc_ref[e]);
    if (!((x == y || (std::isnan(x) && std::isnan(y))) && (u == w || (std::isnan(u) && std::isnan(w))))) {
      std::printf("FAIL %s [%s, %s]: cache element %zu after the append\n", c.name, dtype_name(a.dtype), variant, e);
      ok = false;
    }
  }
  // the outputs against float64
  double worst = 0, worst_lse = 0, scale_o = 0;
  std::vector<double> ref_o(out.size(), 0.0), ref_lse(lse.size());
  for (int b = 0; b < B; ++b) {
    const int64_t Lk = lens[b] + c.Snew;
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / (Hq / Hkv);
      for (int i = 0; i < Sq; ++i) {
        const int64_t n = c.causal ? std::min<int64_t>(Lk, Lk - Sq + i + 1) : Lk;
        double* o = &ref_o[((size_t(b) * Sq + i) * Hq + h) * D];
        double& l = ref_lse[(size_t(b) * Hq + h) * Sq + i];
        if (n <= 0) {
          l = INFINITY;
          continue;
        }
        std::vector<double> s(n);
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += tod(q[((size_t(b) * Sq + i) * Hq + h) * D + d]) * tod(kc_ref[(row_of(b, j) * Hkv + hk) * D + d]);
          s[j] = dot * a.scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - mx);
          sum += p;
          for (int d = 0; d < D; ++d) o[d] += p * tod(vc_ref[(row_of(b, j) * Hkv + hk) * D + d]);
        }
        for (int d = 0; d < D; ++d) o[d] /= sum;
        l = mx + std::log(sum);
      }
    }
  }
  for (double v : ref_o) scale_o = std::max(scale_o, std::fabs(v));
  for (size_t e = 0; ok && e < out.size(); ++e) {
    const double x = tod(out[e]);
    if (std::isnan(x)) {
      std::printf("FAIL %s [%s, %s]: output %zu is NaN (not written?)\n", c.name, dtype_name(a.dtype), variant, e);
      ok = false;
    }
    worst = std::max(worst, std::fabs(x - ref_o[e]) / std::max(scale_o, 1e-30));
  }
  for (size_t e = 0; ok && e < lse.size(); ++e) {
    const double x = double(lse[e]), y = ref_lse[e];
    if (std::isinf(y) || std::isinf(x)) {
      if (x != y) {
        std::printf("FAIL %s [%s, %s]: lse %zu is %g, expected %g\n", c.name, dtype_name(a.dtype), variant, e, x, y);
        ok = false;
      }
      continue;
    }
    worst_lse = std::max(worst_lse, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  }
  const double tol = tolerance<T>(), tol_lse = sizeof(T) == 8 ? 1e-12 : 1e-5;
  if (ok && (worst > tol || worst_lse > tol_lse)) {
    std::printf("FAIL %s [%s, %s]: max error %.2e (allowed %.1e), lse %.2e (allowed %.1e)\n", c.name,
                dtype_name(a.dtype), variant,
                worst, tol, worst_lse, tol_lse);
    ok = false;
  }
  if (ok) {
    std::printf("ok   %s [%s, %s] (max error %.2e, lse %.2e)\n", c.name, dtype_name(a.dtype), variant, worst,
                worst_lse);
  }
  return ok;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto add = [&](Case c) { v.push_back(c); };
  add({"Sq1 MQA-like ratio 4 d128 contiguous", 2, 1, 4, 1, 128, 300, 0, 0, false, {300, 1}});
  add({"Sq1 ratio 1 d64 ragged", 3, 1, 2, 2, 64, 300, 0, 0, false, {0, 299, 77}});
  add({"Sq4 ratio 4 causal d64 (rows that see nothing)", 2, 4, 8, 2, 64, 200, 0, 0, true, {2, 200}});
  add({"Sq4 ratio 1 causal append d128", 2, 4, 2, 2, 128, 260, 0, 4, true, {0, 100}});
  add({"Sq1 ratio 8 (two row chunks at RC 4 for double) d256", 1, 1, 8, 1, 256, 150, 0, 0, false, {150}});
  add({"Sq16 ratio 1 causal (two row chunks) d64", 1, 16, 1, 1, 64, 100, 0, 0, true, {100}});
  add({"paged block 16 scattered d128", 2, 1, 4, 1, 128, 300, 16, 0, false, {300, 37}});
  add({"paged block 24 (not a power of two) append causal d64", 2, 2, 4, 2, 64, 200, 24, 2, true, {1, 150}});
  add({"paged block 64 append Sq1 d256", 2, 1, 2, 1, 256, 256, 64, 1, false, {255, 0}});
  add({"contiguous long (several splits) ratio 4 d64", 1, 1, 4, 1, 64, 1100, 0, 1, false, {1050}});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  bool ok = true;
  const std::vector<Case> cs = cases();
  for (size_t k = 0; k < cs.size(); ++k) {
    if (quick && k >= 2) break;
    for (bool staged : {true, false}) {
      ok &= run_case<__nv_bfloat16>(cs[k], staged);
      ok &= run_case<__half>(cs[k], staged);
      ok &= run_case<float>(cs[k], staged);
      ok &= run_case<double>(cs[k], staged);
    }
  }
  std::printf(ok ? "ALL OK\n" : "SOME FAILED\n");
  return ok ? 0 : 1;
}

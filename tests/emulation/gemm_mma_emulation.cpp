// The portable path's tensor-core GEMM kernel for float32 (csrc/matmul/kernels/gemm_mma.cuh: 3xTF32, the X3
// instantiations, and plain TF32) run on the CPU through cuda_host_shim.h, with cp.async / ldmatrix / mma.sync
// computed by mma_emulation.h, against a float64 reference, held to the project's error rule with a float32 FFMA
// dot product (k in order, as a SIMT kernel sums) as the peer: error <= 2x max(peer's, 1e-5), max-norm and l2;
// and, below that floor, within 1.5x of the peer's error.
// This checks the 3xTF32 fragment loads (ldmatrix for K-major tiles, permuted vector loads for M/N-major ones),
// the split, the epilogue's relabelling, split-K and element loads, for every operand layout; that plain TF32 fails
// the rule where 3xTF32 passes; and that under the tensor cores' truncating accumulation (the Truncate model of
// mma_emulation.h) the kernel's per-stage accumulation order keeps float32 accuracy where one chained accumulator
// does not (the reason for that order). A standalone program: tests/test_matmul_emulation.py builds it with g++
// and reads its verdict; --quick runs a subset.
#include "cuda_host_shim.h"

#include "warp_emulation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#if !defined(__noinline__)
#define __noinline__ __attribute__((noinline))  // gemm_common.cuh's apply_act
#endif
#include "matmul/kernels/gemm_mma.cuh"

using namespace torch_dnn;
using namespace torch_dnn::matmul;
namespace ptx = ::torch_dnn_emu_ptx;

namespace {

constexpr double kFloor = 1e-5;  // the rule's float32 error floor (torch_dnn/testing.py)
constexpr double kFactor = 2.0;

std::mt19937_64 rng(2024);

// Uniform in [lo, hi), never zero (|x| >= 1e-3).
float draw(double lo, double hi) {
  double v = std::uniform_real_distribution<double>(lo, hi)(rng);
  if (std::fabs(v) < 1e-3) v = v < 0 ? -1e-3 : 1e-3;
  return float(v);
}

struct Errors {
  double max = 0, l2 = 0;
};

Errors errors(const std::vector<float>& out, const std::vector<double>& ref) {
  double dmax = 0, rmax = 0, d2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(out[i]) - ref[i];
    dmax = std::max(dmax, std::fabs(d));
    rmax = std::max(rmax, std::fabs(ref[i]));
    d2 += d * d;
    r2 += ref[i] * ref[i];
  }
  if (!(dmax == dmax)) return {INFINITY, INFINITY};  // NaN
  return {dmax / rmax, std::sqrt(d2 / r2)};
}

bool passes(const Errors& ours, const Errors& peer) {
  return ours.max <= kFactor * std::max(peer.max, kFloor) && ours.l2 <= kFactor * std::max(peer.l2, kFloor);
}

// Below the floor too: 3xTF32 keeps float32's precision (its error within 1.5x of FFMA's, unfloored; the rule alone
// would let a split that keeps a bit less of each operand through on these small problems).
bool float32_precision(const Errors& ours, const Errors& peer) {
  return ours.max <= 1.5 * peer.max && ours.l2 <= 1.5 * peer.l2;
}

struct Case {
  const char* name;
  int M, N, K, batch;
  bool ak, bk;     // A K-contiguous ([M][K]), B K-contiguous ([N][K])
  int splits = 1;  // K splits asked for
  int pad = 4;     // leading-dimension padding (elements); odd: element loads (not 16-byte aligned)
  double lo = -2, hi = 2;
  bool bias = false;
  bool quick = false;  // in the --quick subset
};

template <bool AK, bool BK, bool X3>
void launch(const mma::Params<float>& p, unsigned grid) {
  emulate_launch_smem(mma::gemm_kernel<float, AK, BK, X3>, grid, unsigned(mma::kThreads),
                      size_t(mma::smem_bytes<float>()), p);
}

template <bool X3>
void launch_layout(bool ak, bool bk, const mma::Params<float>& p, unsigned grid) {
  if (ak && bk) launch<true, true, X3>(p, grid);
  else if (ak) launch<true, false, X3>(p, grid);
  else if (bk) launch<false, true, X3>(p, grid);
  else launch<false, false, X3>(p, grid);
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Problem {
  const Case& c;
  int64_t lda, ldb, bsa, bsb;
  std::vector<float> a, b, bias;
  std::vector<double> ref;  // [batch][M][N]
  std::vector<float> ffma;  // the peer: float FFMA in k order

  explicit Problem(const Case& cs) : c(cs) {
    lda = (c.ak ? c.K : c.M) + c.pad;
    ldb = (c.bk ? c.K : c.N) + c.pad;
    bsa = lda * (c.ak ? c.M : c.K);
    bsb = ldb * (c.bk ? c.N : c.K);
    a.resize(size_t(bsa * c.batch));
    b.resize(size_t(bsb * c.batch));
    for (auto& v : a) v = draw(c.lo, c.hi);
    for (auto& v : b) v = draw(c.lo, c.hi);
    if (c.bias) {
      bias.resize(size_t(c.N));
      for (auto& v : bias) v = draw(-1, 1);
    }
    ref.resize(size_t(c.batch) * c.M * c.N);
    ffma.resize(ref.size());
    for (int bt = 0; bt < c.batch; ++bt)
      for (int m = 0; m < c.M; ++m)
        for (int n = 0; n < c.N; ++n) {
          double s = 0;
          float f = 0;
          for (int k = 0; k < c.K; ++k) {
            const float x = A(bt, m, k), y = B(bt, k, n);
            s += double(x) * double(y);
            f = std::fma(x, y, f);
          }
          if (c.bias) s += bias[size_t(n)], f += bias[size_t(n)];
          ref[(size_t(bt) * c.M + m) * c.N + n] = s;
          ffma[(size_t(bt) * c.M + m) * c.N + n] = f;
        }
  }
  float A(int bt, int m, int k) const { return a[size_t(bt * bsa + (c.ak ? m * lda + k : k * lda + m))]; }
  float B(int bt, int k, int n) const { return b[size_t(bt * bsb + (c.bk ? n * ldb + k : k * ldb + n))]; }

  // The kernel's output (X3: 3xTF32, else plain TF32), split-K reduced by splitk_reduce_kernel.
  std::vector<float> run(bool x3) const {
    const auto vec = [](const void* p, int64_t ld, int64_t bs) {
      return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0 && bs % 4 == 0;
    };
    mma::Params<float> p;
    p.A = {a.data(), lda, bsa, vec(a.data(), lda, bsa)};
    p.B = {b.data(), ldb, bsb, vec(b.data(), ldb, bsb)};
    p.M = c.M, p.N = c.N, p.K = c.K, p.batch = c.batch;
    p.tiles_m = cdiv(c.M, mma::kBM);
    p.tiles_n = cdiv(c.N, mma::kBN);
    const int64_t ktiles = cdiv(c.K, 16);
    p.kt_per_split = int(cdiv(ktiles, c.splits));
    p.splits = int(cdiv(ktiles, p.kt_per_split));
    std::vector<float> out(ref.size(), NAN), ws(size_t(p.splits) * ref.size(), NAN);
    p.ws = ws.data();
    Epi<float> e{};
    e.d = out.data();
    e.ldd = c.N;
    e.bsd = int64_t(c.M) * c.N;
    e.pre = nullptr;
    e.bias = c.bias ? bias.data() : nullptr;
    e.res = nullptr;
    e.alpha = 1.f;
    e.act = Act::Identity;
    e.vec_d = c.N % 4 == 0;
    e.vec_r = false;
    p.e = e;
    const unsigned grid = unsigned(p.tiles_m * p.tiles_n);
    if (x3) launch_layout<true>(c.ak, c.bk, p, grid);
    else launch_layout<false>(c.ak, c.bk, p, grid);
    if (p.splits > 1)
      emulate_launch(splitk_reduce_kernel<float>, 4, 256, static_cast<const float*>(ws.data()), p.splits,
                     int64_t(c.batch), int64_t(c.M), int64_t(c.N), e);
    return out;
  }
};

const char* model_name() {
  return ptx::tf32_accumulation() == ptx::Tf32Accumulation::Float ? "float" : "truncate";
}

// 3xTF32 under the current accumulation model: must pass the rule. tf32: plain TF32 too, which must fail it.
bool run_case(const Case& c, bool tf32) {
  const Problem pr(c);
  const Errors peer = errors(pr.ffma, pr.ref);
  const Errors ours = errors(pr.run(true), pr.ref);
  bool ok = passes(ours, peer) && float32_precision(ours, peer);
  std::printf("%s  %s [%s accumulation] %dx%dx%d batch %d, splits %d: 3xTF32 error max %.3g l2 %.3g, float32 FFMA "
              "%.3g %.3g (%.2fx, %.2fx)",
              ok ? "ok  " : "FAIL", c.name, model_name(), c.M, c.N, c.K, c.batch, c.splits, ours.max, ours.l2, peer.max,
              peer.l2, ours.max / peer.max, ours.l2 / peer.l2);
  if (tf32) {
    const Errors one = errors(pr.run(false), pr.ref);
    const bool fails = !passes(one, peer);
    std::printf("; plain TF32 %.3g %.3g (%s the rule)", one.max, one.l2, fails ? "fails" : "PASSES");
    ok &= fails;
  }
  std::printf("\n");
  return ok;
}

// Why the kernel accumulates each stage's products apart (gemm_mma.cuh, compute_stage_3xtf32): dot products of K
// terms, the 3xTF32 products of each 16-deep stage (small ones first) summed by tf32_dot as the kernel's mma.sync
// chain sums them, either into one accumulator over the whole of K ("chained") or from zero each stage and then
// added in float ("per stage", the kernel's order). Under the Truncate model with all-positive data, chained must
// lose float32 accuracy (its error several times FFMA's) and per stage must not (at most FFMA's).
bool accumulation_order_study() {
  ptx::tf32_accumulation() = ptx::Tf32Accumulation::Truncate;
  const int K = 8192, dots = 64;
  auto split = [](float x, float& big, float& small) {
    const uint32_t bits = ptx::to_tf32(x);
    big = ptx::tf32_operand(bits);
    const float rest = x - big;
    uint32_t rb;
    std::memcpy(&rb, &rest, 4);
    small = ptx::tf32_operand(rb);  // read truncated, as the kernel passes it
  };
  double e_chain = 0, e_stage = 0, e_ffma = 0, rmax = 0;
  std::vector<float> ab(K), as(K), bb(K), bs(K);
  for (int d = 0; d < dots; ++d) {
    double ref = 0;
    float ffma = 0;
    for (int k = 0; k < K; ++k) {
      const float x = draw(0, 1), y = draw(0, 1);
      ref += double(x) * y;
      ffma = std::fma(x, y, ffma);
      split(x, ab[k], as[k]);
      split(y, bb[k], bs[k]);
    }
    float chain = 0, stage = 0;
    for (int k0 = 0; k0 < K; k0 += 16) {
      float t = 0;
      for (float* acc : {&chain, &t}) {
        for (int s = 0; s < 2; ++s) {
          *acc = ptx::tf32_dot(*acc, &as[k0 + 8 * s], &bb[k0 + 8 * s], 8);
          *acc = ptx::tf32_dot(*acc, &ab[k0 + 8 * s], &bs[k0 + 8 * s], 8);
        }
        for (int s = 0; s < 2; ++s) *acc = ptx::tf32_dot(*acc, &ab[k0 + 8 * s], &bb[k0 + 8 * s], 8);
      }
      stage += t;
    }
    rmax = std::max(rmax, std::fabs(ref));
    e_chain = std::max(e_chain, std::fabs(chain - ref));
    e_stage = std::max(e_stage, std::fabs(stage - ref));
    e_ffma = std::max(e_ffma, std::fabs(ffma - ref));
  }
  const bool ok = e_chain > 4 * e_ffma && e_stage <= e_ffma;
  std::printf("%s  accumulation order [truncate accumulation], %d dot products of K = %d, data in (0, 1): one chained "
              "accumulator %.3g, per stage (the kernel) %.3g, float32 FFMA %.3g\n",
              ok ? "ok  " : "FAIL", dots, K, e_chain / rmax, e_stage / rmax, e_ffma / rmax);
  ptx::tf32_accumulation() = ptx::Tf32Accumulation::Float;
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::vector<Case> cases;
  auto add = [&](Case c) { cases.push_back(c); };
  // every operand layout, odd M / N / K off the 128 x 128 x 16 tiles
  { Case c{"x @ w.T (A, B K-major)", 130, 97, 75, 1, true, true}; c.quick = true; add(c); }
  { Case c{"A M-major, B N-major", 129, 131, 67, 1, false, false}; c.quick = true; add(c); }
  { Case c{"A K-major, B N-major, batch 2, bias", 200, 70, 129, 2, true, false}; c.bias = true; add(c); }
  { Case c{"A M-major, B K-major", 70, 200, 95, 1, false, true}; add(c); }
  // split-K: 63 K tiles in 3 splits of 21, reduced in split order
  { Case c{"split-K (A M-major, B K-major)", 33, 40, 1000, 1, false, true}; c.splits = 3; c.quick = true; add(c); }
  { Case c{"split-K (A K-major, B N-major)", 17, 150, 700, 1, true, false}; c.splits = 4; add(c); }
  // odd leading dimensions: element loads instead of cp.async
  { Case c{"element loads (A K-major, B N-major)", 77, 65, 51, 1, true, false}; c.pad = 3; add(c); }
  { Case c{"element loads (A M-major, B K-major)", 45, 90, 83, 1, false, true}; c.pad = 1; add(c); }
  // all-positive data (the truncating accumulation's worst case)
  { Case c{"positive data (A, B K-major)", 64, 64, 1200, 1, true, true}; c.lo = 0, c.hi = 1; add(c); }
  bool ok = true;
  int ran = 0;
  for (const auto model : {ptx::Tf32Accumulation::Float, ptx::Tf32Accumulation::Truncate}) {
    ptx::tf32_accumulation() = model;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (quick && !cases[i].quick) continue;
      if (quick && model == ptx::Tf32Accumulation::Truncate && i > 0) continue;
      // plain TF32 alongside on the first two cases (float model): it must fail the rule
      ok &= run_case(cases[i], model == ptx::Tf32Accumulation::Float && i < 2);
      ++ran;
    }
  }
  ok &= accumulation_order_study();
  std::printf("%d cases\n%s\n", ran, ok ? "ALL OK" : "SOME FAILED");
  return ok ? 0 : 1;
}

// The flash attention kernels (csrc/attention/flash_forward.cu, flash_backward.cu; built with
// TORCH_DNN_EMULATE_MBARRIER, the Hopper route flash_forward_sm90.cu, flash_backward_sm90.cu) run on the CPU through cuda_host_shim.h, with
// cp.async / ldmatrix / mma.sync computed by mma_emulation.h from the PTX fragment layouts, against the reference
// kernels (themselves checked against float64 by attention_reference_emulation.cpp), emulated alike; the Hopper
// route under each of its forward schedules and each of its backward schedules (those also bitwise against each
// other). This checks the fragment, swizzle, tiling and masking arithmetic of the tensor-core kernels without a GPU.
// A standalone program: tests/test_attention_emulation.py builds it with g++ and reads its verdict.
#include "cuda_host_shim.h"

#include "warp_emulation.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_reference.cu"
#if defined(TORCH_DNN_EMULATE_MBARRIER)
// Built with TORCH_DNN_EMULATE_MBARRIER: the Hopper (wgmma) route instead, on the cases it takes, its MMAs and
// barriers computed by wgmma_emulation.h.
#include "wgmma_emulation.h"

#include "attention/flash_backward_sm90.cu"
#include "attention/flash_forward_sm90.cu"
#else
#include "attention/flash_backward.cu"
#include "attention/flash_forward.cu"
#endif

using namespace torch_dnn;
using namespace torch_dnn::attention;

#if defined(TORCH_DNN_EMULATE_MBARRIER)
constexpr bool kSm90 = true;
cudaError_t forward_under_test(const AttnArgs& a, const Workspace&, cudaStream_t s) { return flash_forward_sm90(a, s); }
cudaError_t backward_under_test(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t s) {
  return flash_backward_sm90(a, g, ws, s);
}
#else
constexpr bool kSm90 = false;
cudaError_t forward_under_test(const AttnArgs& a, const Workspace& ws, cudaStream_t s) { return flash_forward(a, ws, s); }
cudaError_t backward_under_test(const AttnArgs& a, const AttnGrads& g, const Workspace& ws, cudaStream_t s) {
  return flash_backward(a, g, ws, s);
}
#endif

namespace {

std::mt19937_64 rng(4321);
double urand(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<__half>() { return DType::Float16; }
template <> constexpr DType dtype_of<__nv_bfloat16>() { return DType::BFloat16; }

void* ws_get(void*, int64_t bytes) {
  static std::vector<std::vector<unsigned char>> keep;
  keep.emplace_back(size_t(bytes), 0xff);
  return keep.back().data();
}

struct Case {
  const char* name;
  int B = 1, Hq = 1, Hkv = 1, Sq = 17, Sk = 17, D = 64;
  bool causal = false, bottom_right = false;
  int wl = -1, wr = -1;
  double softcap = 0, dropout = 0;
  bool alibi = false;
  bool deterministic = false;
  std::vector<int> lens_q, lens_k;  // non-empty: variable lengths
};

// [B][S][H][D] (or packed [total][H][D]) operands, the layout q/k/v have after a transpose in a model.
template <typename T>
struct Operands {
  std::vector<T> q, k, v, o_ref, o_flash, dout, dq_ref, dk_ref, dv_ref, dq_flash, dk_flash, dv_flash;
  std::vector<float> lse_ref, lse_flash;
};

template <typename T>
bool run_case(const Case& c) {
  const bool varlen = !c.lens_q.empty();
  int B = c.B, Sq = c.Sq, Sk = c.Sk;
  std::vector<int> cuq(1, 0), cuk(1, 0);
  if (varlen) {
    B = int(c.lens_q.size());
    Sq = Sk = 0;
    for (int b = 0; b < B; ++b) {
      cuq.push_back(cuq.back() + c.lens_q[size_t(b)]);
      cuk.push_back(cuk.back() + c.lens_k[size_t(b)]);
      Sq = std::max(Sq, c.lens_q[size_t(b)]);
      Sk = std::max(Sk, c.lens_k[size_t(b)]);
    }
  }
  const int D = c.D;
  const int64_t rows_q = varlen ? cuq.back() : int64_t(B) * Sq, rows_k = varlen ? cuk.back() : int64_t(B) * Sk;
  // A packed batch's q, k, v (and dout) get rows of NaN past the last sequence, inside the operands' bounds: the
  // Hopper kernels' copy engine reads a last key tile (forward) or query tile (backward) whole, and must not let
  // those rows reach the output or the gradients.
  const int64_t pad_k = varlen ? 8 : 0, pad_q = varlen ? 8 : 0;
  Operands<T> x;
  x.q.resize(size_t((rows_q + pad_q) * c.Hq * D));
  x.k.resize(size_t((rows_k + pad_k) * c.Hkv * D));
  x.v.resize(x.k.size());
  for (auto* t : {&x.q, &x.k, &x.v})
    for (auto& e : *t) e = fromd<T>(urand(-2, 2));
  for (auto* t : {&x.k, &x.v})
    for (size_t i = size_t(rows_k * c.Hkv * D); i < t->size(); ++i) (*t)[i] = fromd<T>(NAN);
  for (size_t i = size_t(rows_q * c.Hq * D); i < x.q.size(); ++i) x.q[i] = fromd<T>(NAN);
  x.o_ref.assign(x.q.size(), fromd<T>(777.0));
  x.o_flash = x.o_ref;
  x.lse_ref.assign(size_t(B) * c.Hq * Sq, -7.f);
  x.lse_flash = x.lse_ref;
  std::vector<float> slopes(size_t(c.Hq));
  for (auto& s : slopes) s = float(urand(0.05, 0.3));

  auto op = [&](std::vector<T>& buf, int H, int S) {
    Operand4 o;
    o.ptr = buf.data();
    o.ss = int64_t(H) * D;
    o.sh = D;
    o.sb = varlen ? 0 : int64_t(S) * H * D;
    return o;
  };
  AttnArgs a;
  a.dtype = dtype_of<T>();
  a.B = B, a.Hq = c.Hq, a.Hkv = c.Hkv, a.Sq = Sq, a.Sk = Sk, a.Dqk = D, a.Dv = D;
  a.q = op(x.q, c.Hq, Sq), a.k = op(x.k, c.Hkv, Sk), a.v = op(x.v, c.Hkv, Sk);
  a.q_rows = varlen ? rows_q + pad_q : Sq;
  a.k_rows = varlen ? rows_k + pad_k : Sk;
  a.scale = 1.0 / std::sqrt(double(D));
  a.causal = c.causal, a.bottom_right = c.bottom_right, a.window_left = c.wl, a.window_right = c.wr;
  a.softcap = c.softcap;
  a.deterministic = c.deterministic;
  a.dropout_p = c.dropout;
  a.seed = 0x9876543210fedcbull, a.offset = 4242;
  a.alibi_slopes = c.alibi ? slopes.data() : nullptr;
  a.alibi_sb = 0;
  if (varlen) a.cu_seqlens_q = cuq.data(), a.cu_seqlens_k = cuk.data();
  Workspace ws{ws_get, nullptr};

  AttnArgs r = a;
  r.o = op(x.o_ref, c.Hq, Sq);
  r.lse = x.lse_ref.data();
  AttnArgs f = a;
  f.o = op(x.o_flash, c.Hq, Sq);
  f.lse = x.lse_flash.data();
  if (reference_forward(r, ws, nullptr) != cudaSuccess) {
    std::printf("FAIL %s: reference refused\n", c.name);
    return false;
  }
  const double tol = std::is_same_v<T, __half> ? 4e-3 : 2e-2;
  bool ok = true;
  double worst = 0;
  // the Hopper forward under each of its schedules, the output poisoned anew before each
  for (int schedule = 0; schedule < (kSm90 ? 3 : 1) && ok; ++schedule) {
    f.sm90_fwd = Sm90Fwd(schedule);
    std::fill(x.o_flash.begin(), x.o_flash.end(), fromd<T>(777.0));
    std::fill(x.lse_flash.begin(), x.lse_flash.end(), -7.f);
    const cudaError_t e = forward_under_test(f, ws, nullptr);
    if (e != cudaSuccess) {
      std::printf("FAIL %s [%s]: flash_forward returned %d\n", c.name, dtype_name(a.dtype), int(e));
      return false;
    }
    for (size_t i = 0; i < x.o_ref.size(); ++i) {
      const double want = tod(x.o_ref[i]), got = tod(x.o_flash[i]);
      const double err = std::fabs(got - want);
      worst = std::max(worst, err);
      if (!(err <= tol * (1 + std::fabs(want)))) {
        if (ok) std::printf("FAIL %s [%s] o at %zu: flash %.6g reference %.6g\n", c.name, dtype_name(a.dtype), i, got, want);
        ok = false;
      }
    }
    for (size_t i = 0; i < x.lse_ref.size(); ++i) {
      const double want = x.lse_ref[i], got = x.lse_flash[i];
      const bool same = std::isinf(want) ? got == want : std::fabs(got - want) <= 1e-3 * (1 + std::fabs(want));
      if (!same) {
        if (ok) std::printf("FAIL %s [%s] lse at %zu: flash %.8g reference %.8g\n", c.name, dtype_name(a.dtype), i, got, want);
        ok = false;
      }
    }
    if (!ok) std::printf("     (the forward's schedule %d, attention_kernels.h Sm90Fwd)\n", schedule);
  }
  if (!ok) return false;

  // backward from the reference's forward (the same o and lse for both), gradients laid out as their operands
  x.dout.resize(x.q.size());
  for (auto& e : x.dout) e = fromd<T>(urand(-1, 1));
  for (size_t i = size_t(rows_q * c.Hq * D); i < x.dout.size(); ++i) x.dout[i] = fromd<T>(NAN);
  x.dq_ref.assign(x.q.size(), fromd<T>(777.0));
  x.dk_ref.assign(x.k.size(), fromd<T>(777.0));
  x.dv_ref.assign(x.v.size(), fromd<T>(777.0));
  x.dq_flash = x.dq_ref, x.dk_flash = x.dk_ref, x.dv_flash = x.dv_ref;
  auto grads = [&](std::vector<T>& dq, std::vector<T>& dk, std::vector<T>& dv) {
    AttnGrads gr;
    gr.dout = op(x.dout, c.Hq, Sq);
    gr.dq = op(dq, c.Hq, Sq);
    gr.dk = op(dk, c.Hkv, Sk);
    gr.dv = op(dv, c.Hkv, Sk);
    return gr;
  };
  if (reference_backward(r, grads(x.dq_ref, x.dk_ref, x.dv_ref), ws, nullptr) != cudaSuccess) {
    std::printf("FAIL %s: reference backward refused\n", c.name);
    return false;
  }
  AttnArgs fb = r;  // the reference forward's o and lse
  // the Hopper backward under each of its dK / dV schedules, the gradients poisoned anew before each; the
  // warp-specialised one computes the cp.async one's products in the same order: bitwise equal gradients
  std::vector<T> dq0, dk0, dv0;
  for (int schedule = 0; schedule < (kSm90 ? 2 : 1) && ok; ++schedule) {
    fb.sm90_bwd = Sm90Bwd(schedule);
    for (auto* t : {&x.dq_flash, &x.dk_flash, &x.dv_flash}) std::fill(t->begin(), t->end(), fromd<T>(777.0));
    const cudaError_t eb = backward_under_test(fb, grads(x.dq_flash, x.dk_flash, x.dv_flash), ws, nullptr);
    if (c.D == 256 && !kSm90) {  // the flash backward refuses head dim 256
      if (eb != cudaErrorNotSupported) {
        std::printf("FAIL %s [%s]: flash_backward took head dim 256 (%d)\n", c.name, dtype_name(a.dtype), int(eb));
        return false;
      }
      continue;
    }
    if (eb != cudaSuccess) {
      std::printf("FAIL %s [%s]: flash_backward returned %d (schedule %d)\n", c.name, dtype_name(a.dtype), int(eb),
                  schedule);
      return false;
    }
    // gradient error against the largest reference entry (dS and P are rounded to 16 bits for the mma)
    const double gtol = std::is_same_v<T, __half> ? 6e-3 : 3e-2;
    auto compare = [&](const char* what, const std::vector<T>& got, const std::vector<T>& want) {
      double mx = 0, err = 0;
      size_t at = 0;
      // the scale: the largest entry a kernel writes (not the poison left in rows no sequence owns)
      for (size_t i = 0; i < want.size(); ++i)
        if (tod(want[i]) != 777.0) mx = std::max(mx, std::fabs(tod(want[i])));
      for (size_t i = 0; i < want.size(); ++i) {
        const double d = std::fabs(tod(got[i]) - tod(want[i]));
        if (!(d <= err)) {  // a NaN stays the error
          err = d, at = i;
          if (std::isnan(d)) break;
        }
      }
      if (!(err <= gtol * std::max(mx, 1e-3))) {
        std::printf("FAIL %s [%s] %s: max error %.3g at %zu (flash %.6g reference %.6g), max |ref| %.3g\n", c.name,
                    dtype_name(a.dtype), what, err, at, tod(got[at]), tod(want[at]), mx);
        ok = false;
      }
      return err / std::max(mx, 1e-3);
    };
    const double e1 = compare("dq", x.dq_flash, x.dq_ref), e2 = compare("dk", x.dk_flash, x.dk_ref),
                 e3 = compare("dv", x.dv_flash, x.dv_ref);
    worst = std::max(worst, std::max(e1, std::max(e2, e3)));
    if (schedule == 0) {
      dq0 = x.dq_flash, dk0 = x.dk_flash, dv0 = x.dv_flash;
    } else {
      auto same_bits = [&](const char* what, const std::vector<T>& got, const std::vector<T>& want) {
        for (size_t i = 0; i < want.size(); ++i)
          if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
            std::printf("FAIL %s [%s] %s at %zu: %.8g, the cp.async schedule's %.8g (not bitwise equal)\n", c.name,
                        dtype_name(a.dtype), what, i, tod(got[i]), tod(want[i]));
            ok = false;
            return;
          }
      };
      same_bits("dq", x.dq_flash, dq0);
      same_bits("dk", x.dk_flash, dk0);
      same_bits("dv", x.dv_flash, dv0);
    }
    if (!ok) std::printf("     (the backward's schedule %d, attention_kernels.h Sm90Bwd)\n", schedule);
  }
  if (ok) std::printf("ok   %s [%s] (max error %.2e)\n", c.name, dtype_name(a.dtype), worst);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases;
  auto add = [&](Case c) { cases.push_back(c); };
  { Case c; c.name = "D64 17x17"; add(c); }
  { Case c; c.name = "D64 1x97"; c.Sq = 1; c.Sk = 97; add(c); }
  { Case c; c.name = "D128 113x70, B2 H2 (8 warps)"; c.D = 128; c.B = 2; c.Hq = 2; c.Hkv = 2; c.Sq = 113; c.Sk = 70; add(c); }
  { Case c; c.name = "D32 causal top-left 40x97"; c.D = 32; c.causal = true; c.Sq = 40; c.Sk = 97; add(c); }
  { Case c; c.name = "D96 causal bottom-right 40x97"; c.D = 96; c.causal = true; c.bottom_right = true; c.Sq = 40; c.Sk = 97; add(c); }
  { Case c; c.name = "D64 causal bottom-right 97x40 (empty rows)"; c.causal = true; c.bottom_right = true; c.Sq = 97; c.Sk = 40; add(c); }
  { Case c; c.name = "D64 window (20, 5) 130x150"; c.wl = 20; c.wr = 5; c.Sq = 130; c.Sk = 150; c.B = 2; c.Hq = 2; c.Hkv = 2; add(c); }
  { Case c; c.name = "D64 GQA 4:1 causal"; c.Hq = 4; c.Hkv = 1; c.causal = true; c.Sq = 33; c.Sk = 33; add(c); }
  { Case c; c.name = "D128 softcap 5"; c.D = 128; c.softcap = 5; c.Sq = 20; c.Sk = 80; add(c); }
  { Case c; c.name = "D64 ALiBi causal bottom-right"; c.alibi = true; c.causal = true; c.bottom_right = true; c.Sq = 30; c.Sk = 75; add(c); }
  { Case c; c.name = "D64 varlen (an empty sequence) causal"; c.causal = true; c.Hq = 2; c.Hkv = 1; c.lens_q = {17, 0, 70}; c.lens_k = {30, 5, 70}; add(c); }
  { Case c; c.name = "D256 causal 20x45"; c.D = 256; c.causal = true; c.Sq = 20; c.Sk = 45; add(c); }
  { Case c; c.name = "D64 dropout 0.25 causal 70x90"; c.dropout = 0.25; c.causal = true; c.Sq = 70; c.Sk = 90; add(c); }
  { Case c; c.name = "D128 dropout 0.1 GQA 2:1 varlen"; c.D = 128; c.dropout = 0.1; c.Hq = 2; c.Hkv = 1; c.lens_q = {33, 9}; c.lens_k = {40, 70}; add(c); }
  if (kSm90) {  // several key and query tiles (both stages of each ring, both parities), GQA, masked tiles
    { Case c; c.name = "D128 300x260 B2 H2"; c.D = 128; c.B = 2; c.Hq = 2; c.Hkv = 2; c.Sq = 300; c.Sk = 260; add(c); }
    // the 176-key tiles of head dim 128 without causality: four tiles (stages reused), the last of 2 keys
    { Case c; c.name = "D128 200x530 GQA 2:1"; c.D = 128; c.Hq = 2; c.Hkv = 1; c.Sq = 200; c.Sk = 530; add(c); }
    { Case c; c.name = "D64 causal 330x330 GQA 2:1"; c.causal = true; c.Hq = 2; c.Hkv = 1; c.Sq = 330; c.Sk = 330; add(c); }
    { Case c; c.name = "D128 causal bottom-right 200x520"; c.D = 128; c.causal = true; c.bottom_right = true; c.Sq = 200; c.Sk = 520; add(c); }
    { Case c; c.name = "D128 GQA 3:1 causal 260x300"; c.D = 128; c.Hq = 3; c.Hkv = 1; c.causal = true; c.Sq = 260; c.Sk = 300; add(c); }
    { Case c; c.name = "D128 varlen GQA 2:1 (an empty sequence)"; c.D = 128; c.Hq = 2; c.Hkv = 1; c.lens_q = {210, 0, 90}; c.lens_k = {140, 30, 260}; add(c); }
  }
  const bool quick = argc > 1;
  const bool smoke = quick && std::string(argv[1]) == "--smoke";  // the Hopper route's multi-tile cases only
  bool ok = true;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (kSm90 && ((c.D != 64 && c.D != 128) || c.softcap != 0 || c.dropout != 0 || c.alibi)) continue;  // not its problems
    if (smoke && std::max(c.Sq, c.lens_q.empty() ? 0 : c.lens_q[0]) < 200) continue;
    ok &= run_case<__nv_bfloat16>(c);
    if (!quick || i < 3) ok &= run_case<__half>(c);
  }
  std::printf(ok ? "ALL OK\n" : "SOME FAILED\n");
  return ok ? 0 : 1;
}

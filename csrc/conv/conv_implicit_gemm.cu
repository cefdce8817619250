// The implicit-GEMM tensor-core path of convolution (conv_kernels.h: conv_igemm_fprop / _dgrad / _wgrad).
//
// Every kernel here is the matmul family's sm_80 GEMM mainloop (kernels/conv_igemm_mainloop.cuh, built from
// matmul/kernels/gemm_mma.cuh's pieces): CTA tile 128 x 128 x 64 bytes of K (32 half / 16 float), 8 warps of
// 64 x 32, mma.sync m16n8k16 (float16 / bfloat16) or m16n8k8 TF32 (float32 with allow_tf32, operands rounded to
// nearest by cvt.rna as they leave shared memory), float accumulation, a 4-stage cp.async pipeline into XOR-
// swizzled tiles read by ldmatrix / ldmatrix.trans, the float tile staged through shared memory for 16-byte
// stores. Where the output-channel side is at most 64 (N for fprop / dgrad, M for wgrad: ResNet's 64-channel
// layers) the CTA tile is 128 x 64 (64 x 128 for wgrad), 8 warps of 32 x 32, instead of half a tile of zeros.
// What differs from the GEMM is how the operand tiles are gathered (no im2col is materialised) and the epilogue:
//
//   fprop   y[pixel][k] = act(sum_{tap, c} x[pixel's tap position][c] w[k][tap][c] + bias[k] + residual)
//           GEMM M = N*P*Q*O pixels, N = K, K = T*R*S*C walked tap-outer, C blocks of BK inner
//           (kernels/conv_igemm_gather.cuh). A: each row's input position is computed once per CTA; per K tile
//           only the tap's deltas are added and taps outside x are zero-filled by cp.async (source size 0).
//           B: the weight of the tile's tap, K-major rows. Epilogue (kernels/conv_igemm_epilogue.cuh): bias,
//           residual, activation in float, one rounding, 16-byte stores. Where the tiles leave half the GPU's
//           CTA slots (2 an SM) empty, K is split across CTAs (at most 8 splits of at least 8 K tiles), the
//           float partials summed in split order, with the epilogue, by a second kernel (fprop and dgrad).
//   dgrad   dx = the convolution of dy with the K <-> C transposed, flipped weight: the same kernel with the
//           gather over dy (position d + pad - t * dil) and B the weight read in place as [k][c] per tap
//           (N-major, ldmatrix.trans). A strided dgrad runs as stride^dims launches, one per residue class of
//           dx's pixels (d = i * stride + rd), each a stride-1 gather over only the taps that reach that class
//           (run_dgrad): no zero taps are visited; a class no tap reaches is written with zeros.
//   wgrad   dw[k][(t, r, s, c)] = sum over pixels of dy[pixel][k] x[pixel's tap position][c]
//           (kernels/conv_igemm_wgrad.cuh): A = dy read M-major (ldmatrix.trans), B = the im2col gather of x.
//           The reduction over N*P*Q*O pixels is split across CTAs (blockIdx.z) when the output tiles cannot
//           fill the GPU twice over: float partials in ConvArgs::workspace, summed in split order by a second
//           kernel (bitwise reproducible, no atomics, whatever ConvArgs::deterministic says).
//   1x1     stride 1, pad 0 fprop and dgrad, and wgrad with enough output tiles, are plain GEMMs on the matmul
//           family's kernels (gemm_sm90 on Hopper when the build has it and its plan takes the problem, else
//           gemm_sm80): y[NPQ, K] = x[NPQ, C] @ w[K, C]^T with bias and activation in the GEMM epilogue (the
//           residual too when the activation is the identity: GemmArgs adds it after the activation).
//           NCHW-like operands (each channel's plane dense) take dgrad as one GEMM per image, the weight
//           broadcast over the batch: dx[n][C, DHW] = w^T @ dy[n][K, DHW], no staging copies of dy and dx. (fprop's
//           y[n][K, DHW] = w @ x[n] in that form ran slower than staged where K = 64: half of each M tile empty.)
//
// Taken: Float16, BFloat16, Float32 with allow_tf32; groups == 1; C and K multiples of 8; x, y (and residual for
// the vector path) with the channel stride 1 and every other stride a multiple of 8 elements; the weight in
// [K][T][R][S][C] order (channel stride 1; wgrad's dw dense in T, R, S, C); 16-byte aligned pointers; GEMM
// extents below 2^31. Everything else answers cudaErrorNotSupported (the direct kernels take it).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cuda/device.cuh"
#include "conv/conv_kernels.h"
#include "conv/kernels/conv_igemm_epilogue.cuh"
#include "conv/kernels/conv_igemm_gather.cuh"
#include "conv/kernels/conv_igemm_mainloop.cuh"
#include "conv/kernels/conv_igemm_wgrad.cuh"
#include "matmul/gemm_kernels.h"

namespace torch_dnn {
namespace conv {
namespace {

using namespace igemm;

// ---- the problems the kernel template is instantiated for ----

template <typename T>
struct GatherLaunch : GatherParams<T> {
  OutParams<T> out;
};

// fprop / dgrad on CTA tiles of 128 x BN (BN 64 where N <= 64)
template <typename T, bool kDgrad, int BN>
struct GatherProblem {
  using Params = GatherLaunch<T>;
  using Loader = GatherLoader<T, !kDgrad, BN>;
  static constexpr bool kAK = true, kBK = !kDgrad;
  static constexpr int kBM = 128, kBN = BN;
  __device__ static __forceinline__ void epilogue(const Params& p, const float* cs, int64_t m0, int64_t n0, int split,
                                                  int tid) {
    if (p.splits > 1) store_rows<T, kBM, kBN>(nullptr, 0, p.ws, split, p.splits, p.M, p.N, cs, m0, n0, tid);
    else store_pixels<T, kBM, kBN>(p.out, p.P, p.Q, p.O, p.M, p.N, cs, m0, n0, tid);
  }
};

// wgrad on CTA tiles of BM x 128 (BM 64 where K <= 64)
template <typename T, int BM>
struct WgradProblem {
  using Params = WgradParams<T>;
  using Loader = WgradLoader<T, BM>;
  static constexpr bool kAK = false, kBK = false;
  static constexpr int kBM = BM, kBN = 128;
  __device__ static __forceinline__ void epilogue(const Params& p, const float* cs, int64_t m0, int64_t n0, int split,
                                                  int tid) {
    store_rows<T, kBM, kBN>(p.dw, p.ldw, p.ws, split, p.splits, p.M, p.N, cs, m0, n0, tid);
  }
};

// The narrow tiles where the problem's N (fprop / dgrad) or M (wgrad) is at most 64.
constexpr int kNarrow = 64;
int tile_extent(int64_t n) { return n <= kNarrow ? kNarrow : 128; }

// ---- operand checks ----

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool tensor_core_dtype(const ConvArgs& a) {
  return a.dtype == DType::Float16 || a.dtype == DType::BFloat16 || (a.dtype == DType::Float32 && a.allow_tf32);
}

// The stride of dimension j of an operand shaped [n][c][sp0][sp1][sp2]; a dimension of extent 1 is never
// stepped along, so its stride does not matter (0).
int64_t stride_of(const Operand5& o, int j, int64_t extent) { return extent == 1 ? 0 : o.stride[j]; }

// Channels innermost (stride 1), every other stride a multiple of 8 elements, 16-byte aligned base: each 8
// channels of a pixel are 16-byte aligned (for float, two 16-byte chunks).
bool channels_inner(const Operand5& o, int64_t n, int64_t c, const int64_t (&sp)[3]) {
  if (o.ptr == nullptr || !aligned16(o.ptr)) return false;
  if (c > 1 && o.stride[1] != 1) return false;
  const int64_t ext[5] = {n, c, sp[0], sp[1], sp[2]};
  for (int j : {0, 2, 3, 4})
    if (stride_of(o, j, ext[j]) % 8 != 0) return false;
  return true;
}

// The pixels of a channels-innermost operand as the rows of one matrix: pixel i = (n, d, h, w) in row-major order
// at i * ld. ld, or -1 where the pixels are not evenly spaced (or not a multiple of 8 elements apart).
int64_t pixel_ld(const Operand5& o, int64_t n, int64_t c, const int64_t (&sp)[3]) {
  if (!channels_inner(o, n, c, sp)) return -1;
  const int64_t ext[4] = {n, sp[0], sp[1], sp[2]};
  const int dim[4] = {0, 2, 3, 4};
  int64_t ld = -1;
  for (int j = 3; j >= 0 && ld < 0; --j)
    if (ext[j] > 1) ld = o.stride[dim[j]];
  if (ld < 0) ld = c;  // a single pixel
  if (ld < c || ld % 8 != 0) return -1;
  int64_t inner = 1;
  for (int j = 3; j >= 0; --j) {
    if (ext[j] > 1 && o.stride[dim[j]] != ld * inner) return -1;
    inner *= ext[j];
  }
  return ld;
}

// The weight [K][C][T][R][S] in [K][T][R][S][C] memory order: channel stride 1, the rest multiples of 8.
// An NCHW-like operand as one [c][plane] row-major matrix per image: each channel's (d, h, w) plane dense, the
// channels ld apart and the images *batch_stride apart, both multiples of 8 elements, 16-byte aligned base. ld, or
// -1 where the operand is not so laid out.
int64_t plane_ld(const Operand5& o, int64_t n, int64_t c, const int64_t (&sp)[3], int64_t* batch_stride) {
  if (o.ptr == nullptr || !aligned16(o.ptr)) return -1;
  if ((sp[2] > 1 && o.stride[4] != 1) || (sp[1] > 1 && o.stride[3] != sp[2]) ||
      (sp[0] > 1 && o.stride[2] != sp[1] * sp[2]))
    return -1;
  const int64_t plane = sp[0] * sp[1] * sp[2];
  const int64_t ld = c > 1 ? o.stride[1] : plane, bs = n > 1 ? o.stride[0] : c * ld;
  if (ld < plane || ld % 8 != 0 || bs < c * ld || bs % 8 != 0) return -1;
  *batch_stride = bs;
  return ld;
}

bool weight_channels_inner(const Operand5& w, const ConvGeometry& g) {
  return channels_inner(w, g.K, g.C, g.ker);
}

// Extents small enough for the kernels' 32-bit positions and GEMM indices.
bool geometry_fits(const ConvGeometry& g) {
  constexpr int64_t kMax = int64_t(1) << 24;
  if (g.N < 1 || g.C < 1 || g.K < 1 || g.G != 1) return false;
  if (g.C % 8 != 0 || g.K % 8 != 0) return false;
  for (int i = 0; i < 3; ++i) {
    if (g.in[i] < 1 || g.out[i] < 1 || g.ker[i] < 1 || g.stride[i] < 1 || g.dil[i] < 1 || g.pad[i] < 0) return false;
    if (g.in[i] > kMax || g.out[i] > kMax || g.ker[i] > kMax || g.stride[i] > kMax || g.pad[i] > kMax ||
        g.dil[i] > kMax)
      return false;
    if (g.out[i] * g.stride[i] + g.pad[i] + g.ker[i] * g.dil[i] > (int64_t(1) << 28)) return false;
    if (g.in[i] + g.pad[i] + g.ker[i] * g.dil[i] > (int64_t(1) << 28)) return false;
  }
  const int64_t lim = int64_t(INT32_MAX) - 256;
  const int64_t in_px = g.N * g.in[0] * g.in[1] * g.in[2], out_px = g.N * g.out[0] * g.out[1] * g.out[2];
  const int64_t taps = g.ker[0] * g.ker[1] * g.ker[2];
  return in_px <= lim && out_px <= lim && taps * g.C <= lim && taps * g.K <= lim;
}

bool is_1x1(const ConvGeometry& g) {
  for (int i = 0; i < 3; ++i)
    if (g.ker[i] != 1 || g.stride[i] != 1 || g.pad[i] != 0 || g.in[i] != g.out[i]) return false;
  return true;
}

// ---- launches ----

template <typename T, class Problem>
cudaError_t launch(const typename Problem::Params& p, cudaStream_t stream) {
  constexpr int smem = smem_bytes<T>();
  if (p.tiles_m * p.tiles_n > int64_t(INT32_MAX) || p.splits > 65535) return cudaErrorNotSupported;
  // a device this build has no kernel image for (or too little shared memory): the direct kernels' problem
  if (raise_smem_limit_once<igemm_kernel<T, Problem>>(smem) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaErrorNotSupported;
  }
  const dim3 grid(unsigned(p.tiles_m * p.tiles_n), 1, unsigned(p.splits));
  igemm_kernel<T, Problem><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The gather kernel's parameters common to fprop and dgrad; the caller sets the row grid, the gather's
// position rule and the taps (run_fprop; run_dgrad, one residue class a launch).
template <typename T, bool kDgrad>
void set_gather_operands(const ConvArgs& a, GatherLaunch<T>& p) {
  const ConvGeometry& g = a.g;
  constexpr int BKE = mma::Tile<T, true>::BK;
  const Operand5& src = kDgrad ? a.y : a.x;  // the gathered activation
  const Operand5& dst = kDgrad ? a.x : a.y;  // the output
  const int64_t* src_sp = kDgrad ? g.out : g.in;
  const int64_t* dst_sp = kDgrad ? g.in : g.out;
  const int64_t cg = kDgrad ? g.K : g.C;
  p.N = int(kDgrad ? g.C : g.K);
  p.cblocks = int(cdiv(cg, BKE));
  p.splits = 1;
  p.tiles_n = cdiv(p.N, tile_extent(p.N));
  p.act = static_cast<const T*>(src.ptr);
  p.as_n = stride_of(src, 0, g.N);
  p.as_d = stride_of(src, 2, src_sp[0]);
  p.as_h = stride_of(src, 3, src_sp[1]);
  p.as_w = stride_of(src, 4, src_sp[2]);
  p.D = int(src_sp[0]), p.H = int(src_sp[1]), p.W = int(src_sp[2]);
  p.Cg = int(cg);
  p.wt = static_cast<const T*>(a.w.ptr);
  p.ws_k = stride_of(a.w, 0, g.K);
  p.ws_t = stride_of(a.w, 2, g.ker[0]);
  p.ws_r = stride_of(a.w, 3, g.ker[1]);
  p.ws_s = stride_of(a.w, 4, g.ker[2]);
  p.wrows = int(g.K);
  p.wcols = int(g.C);
  OutParams<T>& o = p.out;
  o.y = static_cast<T*>(dst.ptr);
  o.ys_n = stride_of(dst, 0, g.N);
  o.ys_d = stride_of(dst, 2, dst_sp[0]);
  o.ys_h = stride_of(dst, 3, dst_sp[1]);
  o.ys_w = stride_of(dst, 4, dst_sp[2]);
  o.bias = kDgrad ? nullptr : static_cast<const T*>(a.bias);
  o.res = kDgrad ? nullptr : static_cast<const T*>(a.residual.ptr);
  if (o.res) {
    const Operand5& r = a.residual;
    o.rs_n = stride_of(r, 0, g.N);
    o.rs_c = stride_of(r, 1, g.K);
    o.rs_d = stride_of(r, 2, g.out[0]);
    o.rs_h = stride_of(r, 3, g.out[1]);
    o.rs_w = stride_of(r, 4, g.out[2]);
    o.res_vec = channels_inner(r, g.N, g.K, g.out);
  }
  o.act = kDgrad ? Act::Identity : a.act;
  o.pa = float(a.act_params.a);
  o.pb = float(a.act_params.b);
}

// The rows (output pixels of an N x e0 x e1 x e2 grid) and the K tiles of `taps` taps.
template <typename P>
void set_rows(P& p, int64_t n, const int64_t (&e)[3], int64_t taps) {
  p.M = int(n * e[0] * e[1] * e[2]);
  p.tiles_m = cdiv(p.M, 128);
  p.P = FastDiv(int(e[0])), p.Q = FastDiv(int(e[1])), p.O = FastDiv(int(e[2]));
  p.ktiles = int(taps * p.cblocks);
  p.kt_per_split = p.ktiles;
}

// K splits of an output-stationary launch whose tiles leave at least half the CTA slots (2 an SM) empty: as many
// as fill the slots, each split at least 8 K tiles, at most 8 splits. Returns the partial sums' bytes (0: none).
template <typename P>
int64_t plan_splits(P& p) {
  const int64_t tiles = p.tiles_m * p.tiles_n, slots = 2 * int64_t(sm_count());
  int64_t splits = 1;
  if (2 * tiles <= slots) splits = std::max<int64_t>(1, std::min<int64_t>({slots / tiles, p.ktiles / 8, 8}));
  p.kt_per_split = int(splits > 1 ? cdiv(p.ktiles, splits) : p.ktiles);
  p.splits = int(splits > 1 ? cdiv(p.ktiles, p.kt_per_split) : 1);
  return p.splits > 1 ? int64_t(p.splits) * p.M * p.N * 4 : 0;
}

template <typename P>
void no_splits(P& p) {
  p.splits = 1;
  p.kt_per_split = p.ktiles;
}

// The gather kernel, then (K splits) the fixed-order sum of its partials with the epilogue.
template <typename T, bool kDgrad>
cudaError_t launch_gather(const GatherLaunch<T>& p, cudaStream_t stream) {
  const cudaError_t err = tile_extent(p.N) == kNarrow ? launch<T, GatherProblem<T, kDgrad, kNarrow>>(p, stream)
                                                      : launch<T, GatherProblem<T, kDgrad, 128>>(p, stream);
  if (err != cudaSuccess || p.splits == 1) return err;
  const int64_t octs = int64_t(p.M) * p.N / 8;
  finish_pixel_splits_kernel<T><<<grid_for(octs, 256, 4, 8), 256, 0, stream>>>(p.ws, p.splits, p.M, p.N, p.P, p.Q,
                                                                                p.O, p.out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run_fprop(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  GatherLaunch<T> p{};
  set_gather_operands<T, false>(a, p);
  set_rows(p, g.N, g.out, g.ker[0] * g.ker[1] * g.ker[2]);
  p.str_d = int(g.stride[0]), p.str_h = int(g.stride[1]), p.str_w = int(g.stride[2]);
  p.off_d = -int(g.pad[0]), p.off_h = -int(g.pad[1]), p.off_w = -int(g.pad[2]);
  p.tap_d = int(g.dil[0]), p.tap_h = int(g.dil[1]), p.tap_w = int(g.dil[2]);
  p.R = int(g.ker[1]), p.S = int(g.ker[2]);
  if (const int64_t bytes = plan_splits(p); bytes > 0) {
    p.ws = static_cast<float*>(a.workspace.get(bytes));
    if (p.ws == nullptr) no_splits(p);
  }
  return launch_gather<T, false>(p, stream);
}

int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }

// dgrad, one output residue class per launch (stride^dims classes; one for stride 1):
//   dx[d] = sum over t of dy[p] w[t], p = (d + pad - t * dil) / stride where that divides exactly.
// For the pixels d = i * stride + rd of class rd the taps that contribute are t = t0 + j * ts (t0 the first with
// stride | rd + pad - t0 * dil, ts = stride / gcd(stride, dil)), at p = i + (rd + pad - t0 * dil) / stride - j *
// (dil / gcd): a stride-1 gather over dy with its own taps, and the class's pixels a strided view of dx. No tap
// that falls between dy's pixels is visited; a class no tap reaches gets zeros (a launch with no K tiles).
template <typename T>
cudaError_t run_dgrad(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  GatherLaunch<T> base{};
  set_gather_operands<T, true>(a, base);
  const int64_t* st = g.stride;
  std::vector<GatherLaunch<T>> launches;
  int64_t ws_bytes = 0;
  for (int64_t rd = 0; rd < st[0]; ++rd)
    for (int64_t rh = 0; rh < st[1]; ++rh)
      for (int64_t rw = 0; rw < st[2]; ++rw) {
        const int64_t rc[3] = {rd, rh, rw};
        int64_t ext[3], t0[3], nt[3], off[3], step[3];
        bool empty = false;
        for (int i = 0; i < 3; ++i) {
          ext[i] = g.in[i] > rc[i] ? cdiv(g.in[i] - rc[i], st[i]) : 0;
          empty = empty || ext[i] == 0;
          const int64_t gg = gcd(st[i], g.dil[i]), ts = st[i] / gg;
          t0[i] = 0;
          while (t0[i] < ts && (rc[i] + g.pad[i] - t0[i] * g.dil[i]) % st[i] != 0) ++t0[i];
          nt[i] = t0[i] < ts && t0[i] < g.ker[i] ? cdiv(g.ker[i] - t0[i], ts) : 0;
          off[i] = nt[i] > 0 ? (rc[i] + g.pad[i] - t0[i] * g.dil[i]) / st[i] : 0;
          step[i] = ts;
        }
        if (empty) continue;  // no pixel of dx in this class
        GatherLaunch<T> p = base;
        const int64_t taps = nt[0] * nt[1] * nt[2];
        set_rows(p, g.N, ext, taps);
        p.str_d = p.str_h = p.str_w = 1;
        p.off_d = int(off[0]), p.off_h = int(off[1]), p.off_w = int(off[2]);
        p.tap_d = -int(g.dil[0] / gcd(st[0], g.dil[0]));
        p.tap_h = -int(g.dil[1] / gcd(st[1], g.dil[1]));
        p.tap_w = -int(g.dil[2] / gcd(st[2], g.dil[2]));
        p.R = int(std::max<int64_t>(nt[1], 1)), p.S = int(std::max<int64_t>(nt[2], 1));
        if (taps > 0) {
          p.wt += t0[0] * base.ws_t + t0[1] * base.ws_r + t0[2] * base.ws_s;
          p.ws_t = base.ws_t * step[0], p.ws_r = base.ws_r * step[1], p.ws_s = base.ws_s * step[2];
        }
        OutParams<T>& o = p.out;
        o.y += rd * base.out.ys_d + rh * base.out.ys_h + rw * base.out.ys_w;
        o.ys_d = base.out.ys_d * st[0], o.ys_h = base.out.ys_h * st[1], o.ys_w = base.out.ys_w * st[2];
        ws_bytes = std::max(ws_bytes, plan_splits(p));
        launches.push_back(p);
      }
  // one workspace for every class's partial sums: the launches run one after another on the stream
  float* ws = ws_bytes > 0 ? static_cast<float*>(a.workspace.get(ws_bytes)) : nullptr;
  for (auto& p : launches) {
    if (ws == nullptr) no_splits(p);
    p.ws = ws;
    if (const cudaError_t err = launch_gather<T, true>(p, stream); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t run_wgrad(const ConvArgs& a, int64_t ldy, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  constexpr int BKE = mma::Tile<T, false>::BK;
  WgradParams<T> p{};
  p.M = int(g.K);
  p.N = int(g.ker[0] * g.ker[1] * g.ker[2] * g.C);
  p.npix = int(g.N * g.out[0] * g.out[1] * g.out[2]);
  p.ktiles = int(cdiv(p.npix, BKE));
  p.tiles_m = cdiv(p.M, tile_extent(p.M));
  p.tiles_n = cdiv(p.N, 128);
  // K splits while the output tiles fill the GPU less than twice: each split at least 8 K tiles, at most 256
  // splits, partial sums at most 1 GiB
  const int64_t tiles = p.tiles_m * p.tiles_n, sms = sm_count();
  int64_t splits = 1;
  if (tiles < 2 * sms) {
    splits = std::min<int64_t>({cdiv(2 * sms, tiles), p.ktiles / 8, 256, (int64_t(1) << 28) / (int64_t(p.M) * p.N)});
    splits = std::max<int64_t>(splits, 1);
  }
  p.kt_per_split = int(cdiv(p.ktiles, splits));
  p.splits = int(cdiv(p.ktiles, p.kt_per_split));
  p.dy = static_cast<const T*>(a.y.ptr);
  p.ldy = ldy;
  p.x = static_cast<const T*>(a.x.ptr);
  p.xs_n = stride_of(a.x, 0, g.N);
  p.xs_d = stride_of(a.x, 2, g.in[0]);
  p.xs_h = stride_of(a.x, 3, g.in[1]);
  p.xs_w = stride_of(a.x, 4, g.in[2]);
  p.D = int(g.in[0]), p.H = int(g.in[1]), p.W = int(g.in[2]), p.C = int(g.C);
  p.P = FastDiv(int(g.out[0])), p.Q = FastDiv(int(g.out[1])), p.O = FastDiv(int(g.out[2]));
  p.str_d = int(g.stride[0]), p.str_h = int(g.stride[1]), p.str_w = int(g.stride[2]);
  p.pad_d = int(g.pad[0]), p.pad_h = int(g.pad[1]), p.pad_w = int(g.pad[2]);
  p.dil_d = int(g.dil[0]), p.dil_h = int(g.dil[1]), p.dil_w = int(g.dil[2]);
  p.R = int(g.ker[1]), p.S = int(g.ker[2]);
  p.dw = static_cast<T*>(a.w.ptr);
  p.ldw = g.K > 1 ? a.w.stride[0] : p.N;
  p.ws = nullptr;
  if (p.splits > 1) {
    p.ws = static_cast<float*>(a.workspace.get(int64_t(p.splits) * p.M * p.N * 4));
    if (p.ws == nullptr) {  // no scratch memory: one split
      p.splits = 1;
      p.kt_per_split = p.ktiles;
    }
  }
  const cudaError_t err = tile_extent(p.M) == kNarrow ? launch<T, WgradProblem<T, kNarrow>>(p, stream)
                                                      : launch<T, WgradProblem<T, 128>>(p, stream);
  if (err != cudaSuccess || p.splits == 1) return err;
  const int64_t quads = int64_t(p.M) * p.N / 4;
  sum_splits_kernel<T><<<grid_for(quads, 256, 4, 8), 256, 0, stream>>>(p.ws, p.splits, p.M, p.N, p.dw, p.ldw);
  return cudaGetLastError();
}

template <class F>
cudaError_t dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Float16: return f(__half{});
    case DType::BFloat16: return f(__nv_bfloat16{});
    case DType::Float32: return f(float{});
    default: return cudaErrorNotSupported;
  }
}

// ---- 1x1 convolutions as GEMMs on the matmul family's kernels ----

cudaError_t run_gemm(const matmul::GemmArgs& ga, const Workspace& ws, cudaStream_t stream) {
#ifdef TORCH_DNN_WITH_SM90_GEMM
  // not the skinny kernels: they may ask for a second workspace
  if (const matmul::Sm90Plan plan = matmul::gemm_sm90_plan(ga); plan.ok() && !plan.skinny) {
    const cudaError_t err = matmul::gemm_sm90(ga, plan, matmul::WorkspaceSource{ws.fn, ws.ctx}, stream);
    if (err != cudaErrorNotSupported) return err;
    (void)cudaGetLastError();
  }
#endif
  const int64_t bytes = matmul::gemm_sm80_workspace_bytes(ga);
  void* p = bytes > 0 ? ws.get(bytes) : nullptr;
  if (bytes > 0 && p == nullptr) return cudaErrorNotSupported;
  return matmul::gemm_sm80(ga, p, bytes, stream);
}

matmul::GemmArgs gemm_args(const ConvArgs& a, int64_t M, int64_t N, int64_t K) {
  matmul::GemmArgs ga;
  ga.dtype = a.dtype;
  ga.allow_tf32 = a.allow_tf32;
  ga.M = M, ga.N = N, ga.K = K, ga.batch = 1;
  ga.deterministic = true;
  ga.knobs = matmul::MatmulKnobs::read();  // the matmul family's kernel choices (TORCH_DNN_SM90_*, TORCH_DNN_GEMM_*)
  return ga;
}

// y[NPQ][K] = x[NPQ][C] @ w[K][C]^T + bias, act, residual (identity act only). False: not this way.
bool fprop_as_gemm(const ConvArgs& a, cudaStream_t stream, cudaError_t* err) {
  const ConvGeometry& g = a.g;
  if (!is_1x1(g)) return false;
  const int64_t ldx = pixel_ld(a.x, g.N, g.C, g.in), ldy = pixel_ld(a.y, g.N, g.K, g.out);
  if (ldx < 0 || ldy < 0) return false;
  int64_t ldr = 0;
  if (a.residual.ptr != nullptr) {
    if (a.act != Act::Identity) return false;  // GemmArgs adds the residual after the activation
    ldr = pixel_ld(a.residual, g.N, g.K, g.out);
    if (ldr < 0) return false;
  }
  if (a.bias != nullptr && !aligned16(a.bias)) return false;
  matmul::GemmArgs ga = gemm_args(a, g.N * g.out[0] * g.out[1] * g.out[2], g.K, g.C);
  ga.A = {a.x.ptr, ldx, 0, false};
  ga.B = {a.w.ptr, a.w.stride[0], 0, true};  // (c, k) at w + k * stride0 + c
  ga.D = a.y.ptr;
  ga.ldd = ldy;
  ga.bias = a.bias;
  ga.residual = a.residual.ptr;
  ga.ldr = ldr;
  ga.act = a.act;
  ga.act_params = a.act_params;
  *err = run_gemm(ga, a.workspace, stream);
  return true;
}

// dx[n][C][DHW] = w[K][C]^T @ dy[n][K][DHW] for NCHW-like dx and dy.
bool dgrad_planes_as_gemm(const ConvArgs& a, cudaStream_t stream, cudaError_t* err) {
  const ConvGeometry& g = a.g;
  if (!is_1x1(g) || !weight_channels_inner(a.w, g)) return false;
  int64_t bsx = 0, bsy = 0;
  const int64_t ldx = plane_ld(a.x, g.N, g.C, g.in, &bsx), ldy = plane_ld(a.y, g.N, g.K, g.out, &bsy);
  if (ldx < 0 || ldy < 0) return false;
  matmul::GemmArgs ga = gemm_args(a, g.C, g.in[0] * g.in[1] * g.in[2], g.K);
  ga.batch = g.N;
  ga.A = {a.w.ptr, a.w.stride[0], 0, true};  // (c, k) at w + k * stride0 + c, every image
  ga.B = {a.y.ptr, ldy, bsy, false};
  ga.D = a.x.ptr;
  ga.ldd = ldx, ga.batch_stride_d = bsx;
  *err = run_gemm(ga, a.workspace, stream);
  return true;
}

// dx[NHW][C] = dy[NHW][K] @ w[K][C].
bool dgrad_as_gemm(const ConvArgs& a, cudaStream_t stream, cudaError_t* err) {
  const ConvGeometry& g = a.g;
  if (!is_1x1(g)) return false;
  const int64_t ldx = pixel_ld(a.x, g.N, g.C, g.in), ldy = pixel_ld(a.y, g.N, g.K, g.out);
  if (ldx < 0 || ldy < 0) return false;
  matmul::GemmArgs ga = gemm_args(a, g.N * g.in[0] * g.in[1] * g.in[2], g.C, g.K);
  ga.A = {a.y.ptr, ldy, 0, false};
  ga.B = {a.w.ptr, a.w.stride[0], 0, false};  // (k, c) at w + k * stride0 + c
  ga.D = a.x.ptr;
  ga.ldd = ldx;
  *err = run_gemm(ga, a.workspace, stream);
  return true;
}

// dw[K][C] = dy[NPQ][K]^T @ x[NPQ][C], where the output tiles fill the GPU (the GEMMs split K less than the
// wgrad kernel does).
bool wgrad_as_gemm(const ConvArgs& a, int64_t ldy, cudaStream_t stream, cudaError_t* err) {
  const ConvGeometry& g = a.g;
  if (!is_1x1(g)) return false;
  if (cdiv(g.K, 128) * cdiv(g.C, 256) < sm_count()) return false;
  const int64_t ldx = pixel_ld(a.x, g.N, g.C, g.in);
  if (ldx < 0) return false;
  matmul::GemmArgs ga = gemm_args(a, g.K, g.C, g.N * g.out[0] * g.out[1] * g.out[2]);
  ga.A = {a.y.ptr, ldy, 0, true};   // (k, j) at dy + j * ldy + k
  ga.B = {a.x.ptr, ldx, 0, false};  // (j, c) at x + j * ldx + c
  ga.D = a.w.ptr;
  ga.ldd = g.K > 1 ? a.w.stride[0] : g.C;
  *err = run_gemm(ga, a.workspace, stream);
  return true;
}

// What fprop and dgrad (the output-stationary GEMMs) take: a tensor-core dtype, a geometry within the kernels'
// ranges, x and y channels-innermost, the weight's channels innermost.
bool output_stationary_takes(const ConvArgs& a) {
  const ConvGeometry& g = a.g;
  return tensor_core_dtype(a) && geometry_fits(g) && channels_inner(a.x, g.N, g.C, g.in) &&
         channels_inner(a.y, g.N, g.K, g.out) && weight_channels_inner(a.w, g);
}

}  // namespace

cudaError_t conv_igemm_fprop(const ConvArgs& a, cudaStream_t stream) {
  if (!output_stationary_takes(a)) return cudaErrorNotSupported;
  if (cudaError_t err; fprop_as_gemm(a, stream, &err)) return err;
  return dispatch(a.dtype, [&](auto t) { return run_fprop<decltype(t)>(a, stream); });
}

cudaError_t conv_igemm_dgrad(const ConvArgs& a, cudaStream_t stream) {
  if (!output_stationary_takes(a)) {
    // not channels-innermost: an NCHW 1x1 problem still runs unstaged, as per-image GEMMs
    cudaError_t err = cudaErrorNotSupported;
    if (tensor_core_dtype(a) && geometry_fits(a.g) && dgrad_planes_as_gemm(a, stream, &err)) return err;
    return cudaErrorNotSupported;
  }
  if (cudaError_t err; dgrad_as_gemm(a, stream, &err)) return err;
  return dispatch(a.dtype, [&](auto t) { return run_dgrad<decltype(t)>(a, stream); });
}

cudaError_t conv_igemm_wgrad(const ConvArgs& a, cudaStream_t stream) {
  const ConvGeometry& g = a.g;
  if (!tensor_core_dtype(a) || !geometry_fits(g)) return cudaErrorNotSupported;
  const int64_t ldy = pixel_ld(a.y, g.N, g.K, g.out);
  if (ldy < 0 || !channels_inner(a.x, g.N, g.C, g.in) || !weight_channels_inner(a.w, g)) return cudaErrorNotSupported;
  // dw dense in (t, r, s, c): its rows are matrix rows of T*R*S*C columns
  const Operand5& w = a.w;
  if ((g.ker[2] > 1 && w.stride[4] != g.C) || (g.ker[1] > 1 && w.stride[3] != g.ker[2] * g.C) ||
      (g.ker[0] > 1 && w.stride[2] != g.ker[1] * g.ker[2] * g.C))
    return cudaErrorNotSupported;
  if (g.K > 1 && w.stride[0] < g.ker[0] * g.ker[1] * g.ker[2] * g.C) return cudaErrorNotSupported;
  if (cudaError_t err; wgrad_as_gemm(a, ldy, stream, &err)) return err;
  return dispatch(a.dtype, [&](auto t) { return run_wgrad<decltype(t)>(a, ldy, stream); });
}

}  // namespace conv
}  // namespace torch_dnn

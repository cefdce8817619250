// The operand loaders of the weight-gradient implicit GEMM:
//   dw[m = k][n = (t, r, s, c)] = sum over output pixels j = (n, p, q, o) of dy[j][k] * x[j's input position for
//                                 tap (t, r, s)][c]
// A = dy^T: dy is [pixels][K] with the channel contiguous, so A is M-major ([BK pixels][128 channels], read
// through ldmatrix.trans) and is a plain 2-D tile (rows at stride ldy). B = im2col(x): N-major ([BK pixels][128
// columns of (tap, c)]), gathered: a thread's 16-byte column chunk is the same on every K tile (one tap, 8 or 4
// consecutive channels; C is a multiple of 8, so a chunk never straddles two taps), fixed once per CTA; its rows'
// pixels are decomposed on every tile by multiply-high divisions. Taps outside x read zeros.
#pragma once
#include "conv/kernels/conv_igemm_common.cuh"

namespace torch_dnn {
namespace conv {
namespace igemm {

template <typename T>
struct WgradParams {
  // the GEMM: M = K rows, N = T * R * S * C columns, K = the output pixels (npix, in ktiles tiles)
  int M, N, npix, ktiles, splits, kt_per_split;
  int64_t tiles_m, tiles_n;
  // A: dy [npix][K] at stride ldy
  const T* dy;
  int64_t ldy;
  // B: x [n][D][H][W][C], channel stride 1
  const T* x;
  int64_t xs_n, xs_d, xs_h, xs_w;
  int D, H, W, C;
  FastDiv P, Q, O;  // dy's extents
  int str_d, str_h, str_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w;
  int R, S;
  // the result: dw [K][N] at row stride ldw, or float partial sums ws[split][K][N]
  T* dw;
  int64_t ldw;
  float* ws;
};

// BM: the CTA tile's M extent (dy's tile), 128 or 64; the B tile has 128 columns.
template <typename T, int BM>
struct WgradLoader {
  using TA = mma::Tile<T, false, BM>;
  using TB = mma::Tile<T, false>;
  static constexpr int KE = TB::KE;
  static constexpr int BKE = TB::BK;
  static constexpr int kRowsPerThread = TB::ROWS * TB::CPR / kThreads;
  static_assert(kThreads % TB::CPR == 0, "a thread's chunk column is the same in each of its rows");

  // this thread's B column chunk: its tap's position offsets and channel; col_ok false past N
  int ct, cr, cs;  // t * dil_d - pad_d, ...
  int c;
  bool col_ok;
  int kt;  // the next K tile

  __device__ __forceinline__ WgradLoader(const WgradParams<T>& p, int64_t m0, int64_t n0, int kt0, int tid) {
    const int64_t col = n0 + int64_t(tid % TB::CPR) * KE;
    col_ok = col < p.N;
    const int cc = col_ok ? int(col) : 0;
    const int tap = cc / p.C;
    c = cc - tap * p.C;
    const int rs = tap / p.S;
    const int s = tap - rs * p.S;
    const int t = rs / p.R;
    const int r = rs - t * p.R;
    ct = t * p.dil_d - p.pad_d;
    cr = r * p.dil_h - p.pad_h;
    cs = s * p.dil_w - p.pad_w;
    kt = kt0;
  }

  __device__ __forceinline__ void load(const WgradParams<T>& p, T* sA, T* sB, int64_t m0, int64_t n0, int tid) {
    const int j0 = kt * BKE;
    TA::load(sA, p.dy, p.ldy, j0, m0, p.npix, p.M, true, tid);
    const int ch = tid % TB::CPR;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = tid / TB::CPR + i * (kThreads / TB::CPR);
      const int j = j0 + row;
      bool ok = col_ok && j < p.npix;
      int64_t off = 0;
      if (ok) {
        const Pixel px = pixel_of(j, p.P, p.Q, p.O);
        const int d = px.p * p.str_d + ct, h = px.q * p.str_h + cr, w = px.o * p.str_w + cs;
        ok = unsigned(d) < unsigned(p.D) && unsigned(h) < unsigned(p.H) && unsigned(w) < unsigned(p.W);
        off = px.n * p.xs_n + d * p.xs_d + h * p.xs_h + w * p.xs_w + c;
      }
      mma::cp_async16(sB + row * TB::COLS + TB::swz(row, ch) * KE, ok ? p.x + off : p.x, ok ? 16 : 0);
    }
    ++kt;
  }
};

}  // namespace igemm
}  // namespace conv
}  // namespace torch_dnn

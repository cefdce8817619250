// The operand loaders of the output-stationary implicit GEMMs, fprop and stride-1 dgrad:
//   out[m = pixel][n = channel] = sum over taps (t, r, s) and input channels c of
//                                 act_in[pixel's input position for the tap][c] * wt[tap][c][n]
// A (K-major, [128 pixels][BK channels]) is gathered from a channels-innermost activation: each GEMM row's
// input position is (p * str + off + t * tap) along each dimension, taps that fall outside read zeros (cp.async
// with a source size of 0). B is the weight for one tap, a 2-D matrix whose rows are the weight's K index
// (stride ws_k) and whose columns are its C index (stride 1): K-major for fprop (B[n = k][kk = c]) and N-major
// for dgrad (B[kk = k][n = c], read through ldmatrix.trans).
// The K loop walks the taps outermost and the channel blocks of BK innermost, so a K tile never straddles two
// taps and the address arithmetic is a few adds a tile (products only when the tap changes).
#pragma once
#include "conv/kernels/conv_igemm_common.cuh"

namespace torch_dnn {
namespace conv {
namespace igemm {

template <typename T>
struct GatherParams {
  // the GEMM: M rows (output pixels), N columns (output channels), ktiles = taps * cblocks K tiles
  int M, N, ktiles, cblocks, splits, kt_per_split;
  int64_t tiles_m, tiles_n;
  // A: the gathered activation [n][D][H][W][Cg], channel stride 1
  const T* act;
  int64_t as_n, as_d, as_h, as_w;
  int D, H, W, Cg;
  FastDiv P, Q, O;             // the output's extents (a row's pixel)
  int str_d, str_h, str_w;     // a row's input position: p * str + off + t * tap
  int off_d, off_h, off_w;
  int tap_d, tap_h, tap_w;
  int R, S;                    // taps: t outer, r, s inner
  // B: the weight of tap (t, r, s) at wt + t * ws_t + r * ws_r + s * ws_s, rows k at stride ws_k, columns c at 1
  const T* wt;
  int64_t ws_k, ws_t, ws_r, ws_s;
  int wrows, wcols;            // the weight matrix's extents for one tap (K, C)
  float* ws;                   // K splits (splits > 1): float partial sums [split][M][N]
};

// BN: the CTA tile's N extent (the weight tile's), 128 or 64; the A tile has 128 rows.
template <typename T, bool kBK, int BN>
struct GatherLoader {
  using TA = mma::Tile<T, true>;
  using TB = mma::Tile<T, kBK, BN>;
  static constexpr int KE = TA::KE;       // elements per 16-byte chunk
  static constexpr int BKE = TA::BK;      // K elements per tile
  static constexpr int kRowsPerThread = TA::ROWS * TA::CPR / kThreads;
  static_assert(kThreads % TA::CPR == 0, "a thread's chunk column is the same in each of its rows");

  // rows this thread loads (tid / CPR + i * kThreads / CPR): the input position of tap 0 and its base offset
  int64_t base[kRowsPerThread];
  int d0[kRowsPerThread], h0[kRowsPerThread], w0[kRowsPerThread];
  // the next K tile: tap (t, r, s), channel block cb; the tap's position deltas and offsets
  int t, r, s, cb;
  int td, th, tw;
  int64_t a_tap, w_tap;

  __device__ __forceinline__ void set_tap(const GatherParams<T>& p) {
    td = t * p.tap_d;
    th = r * p.tap_h;
    tw = s * p.tap_w;
    a_tap = td * p.as_d + th * p.as_h + tw * p.as_w;
    w_tap = t * p.ws_t + r * p.ws_r + s * p.ws_s;
  }

  __device__ __forceinline__ GatherLoader(const GatherParams<T>& p, int64_t m0, int64_t n0, int kt0, int tid) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int64_t m = m0 + tid / TA::CPR + i * (kThreads / TA::CPR);
      if (m < p.M) {
        const Pixel x = pixel_of(int(m), p.P, p.Q, p.O);
        d0[i] = x.p * p.str_d + p.off_d;
        h0[i] = x.q * p.str_h + p.off_h;
        w0[i] = x.o * p.str_w + p.off_w;
        base[i] = x.n * p.as_n + d0[i] * p.as_d + h0[i] * p.as_h + w0[i] * p.as_w;
      } else {  // a row past M: its position fails every bounds check
        d0[i] = h0[i] = w0[i] = -(1 << 30);
        base[i] = 0;
      }
    }
    const int tap = kt0 / p.cblocks;
    cb = kt0 - tap * p.cblocks;
    const int rs = tap / p.S;
    s = tap - rs * p.S;
    t = rs / p.R;
    r = rs - t * p.R;
    set_tap(p);
  }

  // Issues the cp.async copies of the current K tile into sA / sB, then moves to the next tile.
  __device__ __forceinline__ void load(const GatherParams<T>& p, T* sA, T* sB, int64_t m0, int64_t n0, int tid) {
    const int ch = tid % TA::CPR;
    const int c = cb * BKE + ch * KE;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = tid / TA::CPR + i * (kThreads / TA::CPR);
      const bool ok = c < p.Cg && unsigned(d0[i] + td) < unsigned(p.D) && unsigned(h0[i] + th) < unsigned(p.H) &&
                      unsigned(w0[i] + tw) < unsigned(p.W);
      const T* src = ok ? p.act + (base[i] + a_tap + c) : p.act;
      mma::cp_async16(sA + row * TA::COLS + TA::swz(row, ch) * KE, src, ok ? 16 : 0);
    }
    const T* wt = p.wt + w_tap;
    if constexpr (kBK) TB::load(sB, wt, p.ws_k, n0, int64_t(cb) * BKE, p.wrows, p.wcols, true, tid);
    else TB::load(sB, wt, p.ws_k, int64_t(cb) * BKE, n0, p.wrows, p.wcols, true, tid);
    if (++cb == p.cblocks) {
      cb = 0;
      if (++s == p.S) {
        s = 0;
        if (++r == p.R) {
          r = 0;
          ++t;
        }
      }
      set_tap(p);
    }
  }
};

}  // namespace igemm
}  // namespace conv
}  // namespace torch_dnn

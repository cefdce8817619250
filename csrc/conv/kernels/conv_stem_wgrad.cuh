// The stem's weight gradient on the stem forward's layout (kernels/conv_stem_fprop.cuh).
//   dW[k][c][r][s] = sum over (n, oy, ox) of dy[n][k][oy][ox] x[n][c][oy sh - ph + r][ox sw - pw + s]
// A GEMM with M = 64 output channels (a CTA's tile), N = R * 32 taps (k = r * 32 + s * 4 + c, as the forward's sW),
// reduced over output pixels in tiles of 128 (one output row's stretch, as the forward's tiles):
//   A (channels x pixels) from sDy [128 pixels][72] by ldmatrix.trans (rows = pixels, 8 channels contiguous)
//   B (pixels x taps) from sX (the forward's input rows) by ldmatrix.trans: the row of pixel m at kernel row r is the
//     32 taps of sX[r][m * stride .. + 7][0..3], 16-byte aligned with an even stride
// Warp w takes n8 tap tiles [w R, w R + R) (R tiles of 8 taps: the whole N = 4 R tiles over 4 warps), all 64
// channels (4 m16 tiles): 16 R float accumulators a thread. The pixel tiles are split over CTAs (slot = a split);
// each CTA writes its float partial [64][R * 32] to the workspace, and conv_stem_wgrad_sum adds the splits in a
// fixed order (deterministic) into dW in w's layout, dropping the padded taps.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "conv/kernels/conv_stem_fprop.cuh"

namespace torch_dnn {
namespace conv {
namespace stem {

__host__ __device__ constexpr int wgrad_smem_bytes(int R, int stride) {
  return 2 * (R * x_width(stride) * 4 + kTileM * kOutLd);
}

// partial[split][k_tile][64][R * 32]
template <typename T, int R>
__global__ void __launch_bounds__(kThreads) conv_stem_wgrad_kernel(const ConvArgs a, const Geometry g, float* partial) {
  T* sX = reinterpret_cast<T*>(direct_smem());
  const int XW = x_width(g.sw);
  T* sDy = sX + R * XW * 4;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int kt = int(blockIdx.x % g.k_tiles);
  const int64_t k0 = int64_t(kt) * kTileN;
  const int64_t slot = blockIdx.x / g.k_tiles, slots = gridDim.x / g.k_tiles;
  const T* x = static_cast<const T*>(a.x.ptr);
  const T* dy = static_cast<const T*>(a.y.ptr);
  const int64_t* xs = a.x.stride;
  const int64_t* ys = a.y.stride;
  const T zero = from_acc<T>(0.0f);

  float acc[4][R][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < R; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;

  const int q = lane / 8, lr = lane % 8;
  for (int64_t tile = slot; tile < g.tiles; tile += slots) {
    const int64_t bw = tile % g.tiles_w, rest = tile / g.tiles_w, oy = rest % g.OH, n = rest / g.OH;
    const int64_t ox0 = bw * kTileM, ix0 = ox0 * g.sw - g.pw, iy0 = oy * g.sh - g.ph;
    __syncthreads();  // the previous tile's reads are done
    load_input_rows<4>(sX, x, xs, g, R, XW, n, iy0, ix0, tid);
    // dy's 128 pixels x 64 channels (zeros past the row's end and past K); consecutive threads take dy's
    // consecutive elements: channels where they are innermost, else pixels
    const bool channels_inner = ys[1] == 1;
    const T* dy_row = dy + n * ys[0] + oy * ys[3];
    batched_copy<8>(
        kTileM * kTileN, tid,
        [&](int i) {
          const int m = channels_inner ? i / kTileN : i % kTileM, ch = channels_inner ? i % kTileN : i / kTileM;
          return ox0 + m < g.OW && k0 + ch < g.K ? dy_row[(k0 + ch) * ys[1] + (ox0 + m) * ys[4]] : zero;
        },
        [&](int i, T v) {
          const int m = channels_inner ? i / kTileN : i % kTileM, ch = channels_inner ? i % kTileN : i / kTileM;
          sDy[m * kOutLd + ch] = v;
        });
    __syncthreads();
    // reduction over the tile's 128 pixels, 16 at a time
    for (int p16 = 0; p16 < kTileM / 16; ++p16) {
      uint32_t af[4][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)  // A matrix q: pixels + 8 (q >> 1), channels 16 mt + 8 (q & 1)
        ptx::ldmatrix_x4<true>(af[mt], sDy + (p16 * 16 + lr + 8 * (q >> 1)) * kOutLd + mt * 16 + 8 * (q & 1));
#pragma unroll
      for (int j = 0; j < R; ++j) {  // this warp's n8 tiles w R + j: kernel row (w R + j) / 4, 8 taps
        const int nt = warp * R + j, r = nt / 4, chunk = nt % 4;
        // B: matrices (pixels 0-7, this tile), (pixels 8-15, this tile): b0, b1 (an x2 as half an x4)
        uint32_t bf[4];
        const int pix = p16 * 16 + lr + 8 * (q & 1);
        ptx::ldmatrix_x4<true>(bf, sX + (r * XW + pix * g.sw) * 4 + chunk * 8);
        const uint32_t b[2] = {bf[0], bf[1]};
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) ptx::mma_16816<T>(acc[mt][j], af[mt], b);
      }
    }
  }

  // the CTA's partial: [64 channels][R * 32 taps]
  const int ntaps = R * 32;
  float* out = partial + (slot * g.k_tiles + kt) * int64_t(kTileN) * ntaps;
  const int gq = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int jj = 0; jj < R; ++jj)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int ch = mt * 16 + gq + 8 * h, tap = (warp * R + jj) * 8 + 2 * t4;
          out[ch * ntaps + tap] = acc[mt][jj][2 * h];
          out[ch * ntaps + tap + 1] = acc[mt][jj][2 * h + 1];
        }
}

// dW[k][c][r][s] = sum of the splits' partials, in split order; a thread an element of dW.
template <typename T>
__global__ void __launch_bounds__(256) conv_stem_wgrad_sum(const ConvArgs a, const Geometry g, const float* partial,
                                                            int64_t splits) {
  const int64_t taps = int64_t(g.C) * g.R * g.S;
  const int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (i >= g.K * taps) return;
  const int64_t k = i / taps, t = i % taps, c = t / (g.R * g.S), r = (t / g.S) % g.R, s = t % g.S;
  const int ntaps = g.R * 32;
  const int64_t kt = k / kTileN, kk = k % kTileN, col = r * 32 + s * 4 + c;
  float sum = 0.f;
  for (int64_t sp = 0; sp < splits; ++sp) sum += partial[((sp * g.k_tiles + kt) * kTileN + kk) * ntaps + col];
  const int64_t* ws = a.w.stride;
  static_cast<T*>(a.w.ptr)[k * ws[0] + c * ws[1] + r * ws[3] + s * ws[4]] = from_acc<T>(sum);
}

}  // namespace stem
}  // namespace conv
}  // namespace torch_dnn

// The forward of a network's first convolution (few input channels, a wide kernel, an even horizontal stride:
// ResNet's 7x7/2 on C = 3, the 3x3/2 stems of MobileNet and EfficientNet, ConvNeXt's 4x4/4 patchify) on mma.sync
// tensor cores, reading x and w in any layout. The implicit GEMM of the general paths pads C = 3 to 8 and
// gathers 16 bytes a tap; here a tap row of up to 8 pixels x 4 channels is one 64-byte stretch of shared memory.
//
// Shared memory of a CTA (128 threads, 4 warps):
//   sX [R][x_width(stride)][4]  the R input rows that one output row reads, as 4-channel pixels (channels >= C
//       and pixels outside x are zeros), from the input column of the tile's first output pixel
//   sW [64][w_ld(R)]  the CTA's 64 output channels' weights, k = r * 32 + s * 4 + c (zeros for s >= S, c >= C)
//   sO [128][72]  the output tile, staged for coalesced stores
// GEMM per output tile: M = 128 output pixels of one output row, N = 64 output channels, K = R * 32. The A row of
// pixel m at kernel row r is sX[r][m * stride .. m * stride + 7] (32 contiguous elements): with an even stride,
// its 16-byte halves are 16-byte aligned, so ldmatrix reads it as it lies. Warp w owns pixels 32 w .. 32 w + 31
// (two m16 tiles) and all 64 channels (eight n8 tiles): 64 float accumulators a thread.
// A CTA keeps its 64 channels' weights and walks output tiles (n, output row, 128-pixel column block) with a
// grid stride, so the weights are read from global memory once per CTA.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda/mma_sync.cuh"
#include "common/cuda/types.cuh"
#include "conv/conv_kernels.h"
#include "conv/kernels/conv_direct_common.cuh"

namespace torch_dnn {
namespace conv {
namespace stem {

constexpr int kThreads = 128, kTileM = 128, kTileN = 64;
constexpr int kMaxTaps = 8;      // kernel rows and columns
constexpr int kMaxStride = 4;    // horizontal stride (even)
constexpr int kOutLd = kTileN + 8;  // sO's row stride (elements): 16-byte aligned rows, staggered banks

// Input columns one tile reads: 127 strides plus an 8-pixel A row, even (16-byte alignment of every row).
__host__ __device__ constexpr int x_width(int stride) { return (kTileM - 1) * stride + 8; }
// sW's row stride (elements): R * 32 plus 8, so that 8 consecutive rows of an ldmatrix fall in distinct banks.
__host__ __device__ constexpr int w_ld(int R) { return R * 32 + 8; }
__host__ __device__ constexpr int smem_bytes(int R, int stride) {
  return 2 * (R * x_width(stride) * 4 + kTileN * w_ld(R) + kTileM * kOutLd);
}

struct Geometry {
  int64_t N, C, K, H, W, OH, OW, tiles_w, tiles;  // tiles: N * OH * tiles_w output tiles
  int R, S, sh, sw, ph, pw;
  int k_tiles;  // the 1-D grid is k_tiles x (CTAs walking the output tiles), the channel tile fastest
};

// Copies `count` items into shared memory, the CTA's threads taking items tid, tid + kThreads, ...: kBatch items'
// global loads issued before any of their stores, so that a thread has kBatch loads in flight rather than one (a
// shared store after each load would wait for it: a tile's copy was one memory latency an item).
template <int kBatch, class Load, class Store>
__device__ __forceinline__ void batched_copy(int count, int tid, Load load, Store store) {
  for (int base = tid; base < count; base += kBatch * kThreads) {
    decltype(load(0)) v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (base + b * kThreads < count) v[b] = load(base + b * kThreads);
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (base + b * kThreads < count) store(base + b * kThreads, v[b]);
  }
}

template <typename T>
struct Pixel4 {
  T c[4];
};

// The R input rows an output row reads (from input row iy0, column ix0) into sX [R][XW][4]: 4-channel pixels,
// zeros past C and outside x.
template <int kBatch, typename T>
__device__ __forceinline__ void load_input_rows(T* sX, const T* x, const int64_t* xs, const Geometry& g, int R,
                                                int XW, int64_t n, int64_t iy0, int64_t ix0, int tid) {
  const T zero = from_acc<T>(0.0f);
  const T* xn = x + n * xs[0];
  batched_copy<kBatch>(
      R * XW, tid,
      [&](int i) {
        const int r = i / XW, p = i % XW;
        const int64_t iy = iy0 + r, ix = ix0 + p;
        Pixel4<T> v{{zero, zero, zero, zero}};
        if (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) {
          const T* px = xn + iy * xs[3] + ix * xs[4];
#pragma unroll
          for (int c = 0; c < 4; ++c)
            if (c < g.C) v.c[c] = px[c * xs[1]];
        }
        return v;
      },
      [&](int i, const Pixel4<T>& v) {
#pragma unroll
        for (int c = 0; c < 4; ++c) sX[i * 4 + c] = v.c[c];
      });
}

// The fused epilogue of one stored element: act(v + residual) at (n, channel k, output row oy, column ox).
template <typename T>
__device__ __forceinline__ T finish_output(const Epilogue<T>& ep, T v, int64_t n, int64_t oy, int64_t k, int64_t ox) {
  return from_acc<T>(ep.add_res_act(to_acc<float>(v), n * ep.rs[0] + k * ep.rs[1] + oy * ep.rs[3] + ox * ep.rs[4]));
}

// kFused: the epilogue adds a residual or applies an activation (conv_bias_act, conv_bias_add_act), in the loop that
// stores the staged tile (once an element, after the bias-added sum is rounded to T in sO: as the unfused
// composition rounds the convolution's output); without it only the bias is added. Two instantiations because the
// general epilogue applied to a thread's 64 accumulators, unrolled, made even the plain convolution slower
// (docs/conv.md, the Stem path).
template <typename T, bool kFused>
__global__ void __launch_bounds__(kThreads, 3) conv_stem_fprop_kernel(const ConvArgs a, const Geometry g,
                                                                     const Epilogue<T> ep) {
  T* sX = reinterpret_cast<T*>(direct_smem());
  const int XW = x_width(g.sw), WLD = w_ld(g.R);
  T* sW = sX + g.R * XW * 4;
  T* sO = sW + kTileN * WLD;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t k0 = int64_t(blockIdx.x % g.k_tiles) * kTileN;
  const int64_t slot = blockIdx.x / g.k_tiles, slots = gridDim.x / g.k_tiles;
  const T* x = static_cast<const T*>(a.x.ptr);
  const T* w = static_cast<const T*>(a.w.ptr);
  T* y = static_cast<T*>(a.y.ptr);
  const int64_t* xs = a.x.stride;  // [n][c][d][h][w]
  const int64_t* ws = a.w.stride;  // [k][c][t][r][s]
  const int64_t* ys = a.y.stride;

  // the weights of channels k0 .. k0 + 63
  const int kw = g.R * 32;
  for (int i = tid; i < kTileN * kw; i += kThreads) {
    const int n = i / kw, k = i % kw, r = k / 32, s = (k % 32) / 4, c = k % 4;
    T v = from_acc<T>(0.0f);
    if (s < g.S && c < g.C && k0 + n < g.K) v = w[(k0 + n) * ws[0] + c * ws[1] + r * ws[3] + s * ws[4]];
    sW[n * WLD + k] = v;
  }

  for (int64_t tile = slot; tile < g.tiles; tile += slots) {
    const int64_t bw = tile % g.tiles_w, rest = tile / g.tiles_w, oy = rest % g.OH, n = rest / g.OH;
    const int64_t ox0 = bw * kTileM, ix0 = ox0 * g.sw - g.pw, iy0 = oy * g.sh - g.ph;
    __syncthreads();  // the previous tile's reads of sX and sO are done (and, the first time, sW is written)
    load_input_rows<1>(sX, x, xs, g, g.R, XW, n, iy0, ix0, tid);
    __syncthreads();

    float acc[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    // ldmatrix row addresses: A matrix q = lane / 8 is (pixel rows + 8 (q & 1), k + 8 (q >> 1)); B matrix q is
    // (channels 8 (q >> 1) .., k + 8 (q & 1)), so that x4 loads give a0..a3 and the b0, b1 pairs of two n8 tiles.
    const int q = lane / 8, lr = lane % 8;
    const int a_pix = warp * 32 + lr + 8 * (q & 1);
    for (int r = 0; r < g.R; ++r) {
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t af[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          ptx::ldmatrix_x4<false>(af[mt], sX + (r * XW + (a_pix + 16 * mt) * g.sw) * 4 + kk * 16 + 8 * (q >> 1));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          uint32_t bf[4];
          ptx::ldmatrix_x4<false>(bf, sW + (16 * np + 8 * (q >> 1) + lr) * WLD + r * 32 + kk * 16 + 8 * (q & 1));
          const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            ptx::mma_16816<T>(acc[mt][2 * np], af[mt], b0);
            ptx::mma_16816<T>(acc[mt][2 * np + 1], af[mt], b1);
          }
        }
      }
    }

    // accumulators + bias -> sO[pixel][channel]
    const int gq = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = warp * 32 + mt * 16 + gq + 8 * h, ch = nt * 8 + 2 * t4;
          float v[2] = {acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]};
          if (ep.bias != nullptr) {
#pragma unroll
            for (int j = 0; j < 2; ++j)
              if (k0 + ch + j < g.K) v[j] += to_acc<float>(ep.bias[k0 + ch + j]);
          }
          sO[m * kOutLd + ch] = from_acc<T>(v[0]);
          sO[m * kOutLd + ch + 1] = from_acc<T>(v[1]);
        }
    __syncthreads();

    // sO -> y: channels innermost in y: 16-byte runs of 8 channels; otherwise a thread a pixel, channel by channel
    // (consecutive threads write consecutive pixels of a channel: NCHW's rows)
    T* yrow = y + n * ys[0] + oy * ys[3];
    const int64_t kn = g.K - k0 < kTileN ? g.K - k0 : kTileN;
    const bool vec = ys[1] == 1 && g.K % 8 == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0 && ys[0] % 8 == 0 &&
                     ys[3] % 8 == 0 && ys[4] % 8 == 0;
    if (vec) {
      for (int i = tid; i < kTileM * (kTileN / 8); i += kThreads) {
        const int m = i / (kTileN / 8), c8 = (i % (kTileN / 8)) * 8;
        if (ox0 + m < g.OW && c8 < kn) {
          T* run = sO + m * kOutLd + c8;  // this thread's alone in this loop: finished in place
          if constexpr (kFused) {
#pragma unroll 1
            for (int j = 0; j < 8; ++j) run[j] = finish_output(ep, run[j], n, oy, k0 + c8 + j, ox0 + m);
          }
          *reinterpret_cast<uint4*>(yrow + (ox0 + m) * ys[4] + k0 + c8) = *reinterpret_cast<const uint4*>(run);
        }
      }
    } else if (ox0 + tid < g.OW) {
      T* py = yrow + (ox0 + tid) * ys[4] + k0 * ys[1];
      for (int c = 0; c < kn; ++c) {
        const T v = sO[tid * kOutLd + c];
        if constexpr (kFused) py[c * ys[1]] = finish_output(ep, v, n, oy, k0 + c, ox0 + tid);
        else py[c * ys[1]] = v;
      }
    }
  }
}

}  // namespace stem
}  // namespace conv
}  // namespace torch_dnn

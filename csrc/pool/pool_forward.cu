// Pooling forward entry points: max (with indices), avg, lp, adaptive avg and max, over dtype x layout.
#include "pool/kernels/pool.cuh"
#include "pool/kernels/pool_band.cuh"
#include "pool/kernels/pool_global.cuh"
#include "pool/pool_plan.h"

namespace torch_dnn {
namespace pool {
namespace {

// NCDHW forward through plane tiles (pool_tile.cuh); false when the shape does not take that path.
template <Op OP>
bool launch_tile_fwd(DType t, const void* x, void* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  if (!tile_applies(s) || nc_item()) return false;
  TileArgs a = tile_args(s);
  bool done = false;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    const int64_t row_bytes = int64_t(a.W) * int64_t(sizeof(T));
    const bool vec = aligned16(x) && row_bytes % 16 == 0;
    const bool k3 = a.kh == 3 && a.kw == 3 && a.dh == 1 && a.dw == 1;
    if (k3) {  // padded tiles, planned for their wider pitch
      auto go_pad = [&](auto v, auto mode) {
        constexpr int V = decltype(v)::value;
        constexpr int MODE = decltype(mode)::value;
        constexpr int NO = MODE == kPadPair ? 2 : 1;
        const int cols = (a.OW + NO - 1) / NO;  // output items a row
        PadGeo pg;
        pg.LP = (a.pw + V - 1) / V * V;
        const int extent = std::max(a.W, (cols * NO - 1) * a.sw - a.pw + 3);  // tile columns past LP
        const int unit = V > 1 ? V : 2;  // an even pitch keeps the pair reads' parity the same on every row
        pg.P = (pg.LP + extent + unit - 1) / unit * unit;
        pg.by_pv = FastDivmod32(uint32_t(pg.P / V));
        const int64_t pitch_bytes = int64_t(pg.P) * int64_t(sizeof(T));
        const int64_t fit = pad_tile_bytes() / pitch_bytes;  // rows of one of the two buffers
        if (fit < 3) return false;
        const int64_t max_rows = (fit - 3) / a.sh + 1;
        set_bands(a, a.OH, int(max_rows < a.OH ? max_rows : a.OH), cols);
        const int64_t buf_bytes = ((int64_t(a.rows - 1) * a.sh + 3) * pitch_bytes + 15) / 16 * 16;
        pg.buf_elems = buf_bytes / int64_t(sizeof(T));
        const size_t smem = size_t(2 * buf_bytes);
        // persistent: the blocks that fit an SM by shared memory (at most 8 of 256 threads)
        const int64_t per_sm = std::max<int64_t>(1, std::min<int64_t>(8, smem_per_sm() / int64_t(smem + 1024)));
        const int64_t grid = std::min<int64_t>(a.tiles, per_sm * sm_count());
        launch_smem_over48k<pool_fwd_tile_pad<T, OP, V, 3, 3, MODE>>(unsigned(std::max<int64_t>(grid, 1)), kThreads,
                                                                     smem, 2 * kTileSmem + 32, stream,
                                                                     static_cast<const T*>(x), static_cast<T*>(y),
                                                                     ind, a, pg);
        return true;
      };
      // column strips for 3x3/2 (TORCH_DNN_POOL_PAD_STRIP=0: not): a fifth fewer instructions than the pairs and
      // the single outputs, and these kernels are issue-bound (docs/pool.md)
      const bool strip = a.sh == 2 && a.sw == 2 && !pad_nostrip();
      // pairs for avg only: they made avg faster and max slower (its per-tap argmax keeps both outputs' state live)
      const bool pair = OP == Op::Avg && a.sw == 2 && !pad_single();
      auto go_v = [&](auto v) {
        if (strip) return go_pad(v, int_c<kPadStrip>{});
        return pair ? go_pad(v, int_c<kPadPair>{}) : go_pad(v, int_c<kPadSingle>{});
      };
      if (vec ? go_v(int_c<kVec16<T>>{}) : go_v(int_c<1>{})) {
        done = true;
        return;
      }
    }
    // the unpadded tiles (run-time windows, and 3x3 where the padded rows do not fit)
    const int span = (a.kh - 1) * a.dh + 1;
    const int64_t fit = kTileSmem / row_bytes;  // input rows that fit
    if (fit < span) return;
    const int64_t max_rows = (fit - span) / a.sh + 1;  // output rows whose input rows fit
    set_bands(a, a.OH, int(max_rows < a.OH ? max_rows : a.OH), a.OW);
    const int64_t in_rows = int64_t(a.rows - 1) * a.sh + span;
    const size_t smem = size_t((in_rows < a.H ? in_rows : a.H) * row_bytes + 15) / 16 * 16;
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    const unsigned grid = grid_for(a.tiles, 1);
    auto go = [&](auto v, auto k) {
      constexpr int V = decltype(v)::value, K = decltype(k)::value;
      launch_smem(pool_fwd_tile<T, OP, V, K, K>, grid, kThreads, smem, stream, xp, yp, ind, a);
    };
    if (vec && k3) go(int_c<kVec16<T>>{}, int_c<3>{});
    else if (vec) go(int_c<kVec16<T>>{}, int_c<0>{});
    else if (k3) go(int_c<1>{}, int_c<3>{});
    else go(int_c<1>{}, int_c<0>{});
    done = true;
  });
  return done;
}

template <Op OP>
void launch_windows(DType t, const void* x, void* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  if constexpr (OP != Op::Lp) {
    if (launch_tile_fwd<OP>(t, x, y, ind, s, stream)) return;
  }
  const int64_t out[3] = {s.ax[0].out, s.ax[1].out, s.ax[2].out};
  const bool aligned = aligned16(x) && aligned16(y) && (OP != Op::Max || aligned16(ind));
  dispatch_layout(t, s, aligned, [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    // the scalar channels-last path (C not a multiple of the vector) is the rare one: loops only
    dispatch_taps<OP, (!decltype(cl)::value || decltype(v)::value > 1)>(s, [&](auto kh, auto kw) {
      if constexpr (cl.value && OP != Op::Lp && decltype(kh)::value > 0) {
        if (launch_band_fwd<T, OP, v.value, decltype(kh)::value, decltype(kw)::value>(xp, yp, ind, s, stream)) return;
        if (cl2d_applies(s) && cl_fwd_taps(OP == Op::Max || cl2d32_applies(s, v.value))) {
          const int uniform_div = OP == Op::Avg ? uniform_avg_divisor(s) : 0;
          if (cl2d32_applies(s, v.value)) {
            const Cl2dArgs a = cl2d32_args(s, v.value, uniform_div);
            launch(pool_fwd_cl2d32<T, OP, v.value, kh.value, kw.value>, unsigned((a.items + kThreads - 1) / kThreads),
                   kThreads, stream, xp, yp, ind, a);
            return;
          }
          if constexpr (OP == Op::Max) {  // (avg takes the taps only where the 32-bit kernel applies)
            const Args<4> a = cl_args(s, v.value, out);
            launch(pool_fwd_cl2d<T, v.value, kh.value, kw.value>, grid_for(a.items, kThreads), kThreads, stream, xp,
                   yp, ind, a);
            return;
          }
        }
      }
      if constexpr (cl.value) {
        const Args<4> a = cl_args(s, v.value, out);
        launch(pool_fwd_cl<T, OP, v.value, kh.value, kw.value>, grid_for(a.items, kThreads), kThreads, stream, xp,
               yp, ind, a);
      } else {
        const Args<3> a = nc_args(s, out);
        launch(pool_fwd_nc<T, OP, kh.value, kw.value>, grid_for(a.items, kThreads), kThreads, stream, xp, yp, ind,
               a);
      }
    });
  });
}

// adaptive average to one output per (n, c): a reduction over the D * H * W positions.
void launch_global_avg(DType t, const void* x, void* y, const PoolShape& s, cudaStream_t stream) {
  const int64_t P = s.in_volume();
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    const bool aligned = aligned16(x) && aligned16(y);
    if (s.channels_last) {
      auto run = [&](auto vec) {
        constexpr int VV = decltype(vec)::value;
        const int64_t G = s.C / VV;
        if (global_cl_columns(s.N * G) && G < (int64_t(1) << 31)) {  // a thread a column
          // rows in flight a thread: 7, the fastest of 4, 7 and 8 measured (docs/pool.md)
          const unsigned grid = grid_for(s.N * G, kThreads);
          const FastDivmod32 by_g{uint32_t(G)};
          const ColumnDiv div = column_div(s.N * G);
          if (global_static_p(P))
            launch(global_avg_cl_col<T, VV, kStaticP>, grid, kThreads, stream, xp, yp, s.N, P, by_g, div);
          else launch(global_avg_cl_col<T, VV>, grid, kThreads, stream, xp, yp, s.N, P, by_g, div);
          return;
        }
        const int groups = global_cl_groups(s.N, G);
        const int64_t blocks = s.N * ((G + groups - 1) / groups);
        // rows in flight a lane: 4 (8 took 128 registers and measured slower; docs/pool.md)
        launch(global_avg_cl<T, VV>, grid_for(blocks, 1, 4, 4), kThreads, stream, xp, yp, s.N, P, s.C, groups);
      };
      if (s.C % V == 0 && aligned) run(std::integral_constant<int, V>{});
      else run(std::integral_constant<int, 1>{});
    } else if (P <= 512 && P * int64_t(sizeof(acc_t<T>)) * 16 <= kTileSmem) {
      // short planes: PB consecutive planes per block through shared memory
      const int64_t planes = s.N * s.C;
      auto run = [&](auto pb) {
        constexpr int PB = decltype(pb)::value;
        const size_t smem = size_t(PB) * P * sizeof(T);
        const unsigned grid = grid_for((planes + PB - 1) / PB, 1);
        // registers unbounded (48 at 7x7 bf16: 5 blocks an SM; held to 32 for 8 blocks it measured no faster,
        // docs/pool.md)
        if (!aligned16(x))
          launch_smem(global_avg_nc_chunk<T, 1, PB>, grid, kThreads, smem, stream, xp, yp, planes, int(P));
        else if (global_static_p(P))
          launch_smem(global_avg_nc_chunk<T, V, PB, kStaticP>, grid, kThreads, smem, stream, xp, yp, planes,
                      int(P));
        else
          launch_smem(global_avg_nc_chunk<T, V, PB>, grid, kThreads, smem, stream, xp, yp, planes, int(P));
      };
      // planes a block: 128 where they fit, else 64, else 16 (docs/pool.md)
      const int64_t plane_bytes = P * int64_t(sizeof(T));  // the chunk is held as loaded (run's smem)
      if (plane_bytes * 128 <= kTileSmem) run(int_c<128>{});
      else if (plane_bytes * 64 <= kTileSmem) run(int_c<64>{});
      else run(int_c<16>{});
    } else {
      const int64_t planes = s.N * s.C;
      // a block per plane when the planes are long and too few to fill the GPU with warps
      const bool block_per_plane = P >= 4096 && planes < int64_t(sm_count()) * 32;
      auto run = [&](auto vec) {
        constexpr int VV = decltype(vec)::value;
        if (block_per_plane) {
          launch(global_avg_nc<T, VV, kThreads>, grid_for(planes, 1, 4, 8), kThreads, stream, xp, yp, planes, P);
        } else {
          constexpr int per_block = kThreads / 32;
          launch(global_avg_nc<T, VV, 32>, grid_for(planes, per_block), kThreads, stream, xp, yp, planes, P);
        }
      };
      if (P % V == 0 && aligned) run(std::integral_constant<int, V>{});
      else run(std::integral_constant<int, 1>{});
    }
  });
}

}  // namespace

cudaError_t launch_max_forward(DType t, const void* x, void* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.out_volume() == 0) return cudaSuccess;
  launch_windows<Op::Max>(t, x, y, ind, s, stream);
  return cudaGetLastError();
}

cudaError_t launch_avg_forward(DType t, const void* x, void* y, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.out_volume() == 0) return cudaSuccess;
  if (s.lp()) launch_windows<Op::Lp>(t, x, y, nullptr, s, stream);
  else if (s.global()) launch_global_avg(t, x, y, s, stream);
  else launch_windows<Op::Avg>(t, x, y, nullptr, s, stream);
  return cudaGetLastError();
}

}  // namespace pool
}  // namespace torch_dnn

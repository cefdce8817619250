// Pooling backward entry points: gather-style (one thread per input item), deterministic, no zero fill.
#include "pool/kernels/pool.cuh"
#include "pool/kernels/pool_band.cuh"
#include "pool/kernels/pool_global.cuh"
#include "pool/pool_plan.h"

namespace torch_dnn {
namespace pool {
namespace {

// NCDHW backward through plane tiles (pool_tile.cuh); false when the shape does not take that path.
template <Op OP>
bool launch_tile_bwd(DType t, const void* g, const int64_t* ind, void* dx, const PoolShape& s, cudaStream_t stream) {
  if (!tile_applies(s) || nc_item()) return false;
  TileArgs a = tile_args(s);
  bool done = false;
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const int64_t row_bytes = int64_t(a.OW) * int64_t(sizeof(A) + (OP == Op::Max ? 4 : 0));
    const int span_h = (a.kh - 1) * a.dh + 1, span_w = (a.kw - 1) * a.dw + 1;
    const int64_t fit = kTileSmem / row_bytes;  // grad rows that fit
    const T* gp = static_cast<const T*>(g);
    T* dxp = static_cast<T*>(dx);
    constexpr int V = kVec16<T>;
    const NcBwd choice = nc_bwd_choice();
    if (a.kh == 3 && a.kw == 3 && a.sh == 2 && a.sw == 2 && a.dh == 1 && a.dw == 1 && a.ph <= 1 && a.pw <= 1 &&
        a.W % V == 0 && aligned16(dx) && choice == NcBwd::Auto) {
      // 3x3/2: vectors of inputs a thread over a zero-bordered stage (a band of input rows)
      const int n_cols = ((a.W - 1 + a.pw) >> 1) + 2;
      const int64_t bytes = int64_t(n_cols) * int64_t(sizeof(A) + (OP == Op::Max ? 4 : 0));
      const int64_t fit_rows = kTileSmem / bytes;
      if (fit_rows >= 4) {
        const int64_t max_in = 2 * (fit_rows - 3);  // a band of R input rows stages at most R / 2 + 3 rows
        set_bands(a, a.H, int(max_in < a.H ? max_in : a.H), a.W / V);
        const size_t smem = size_t((int64_t(a.rows) / 2 + 3) * bytes + 15) / 16 * 16;
        const int uniform_div = OP == Op::Avg ? uniform_avg_divisor(s) : 0;
        const FastDivmod32 by_ow(uint32_t(a.OW));
        auto go = [&](auto pw) {
          constexpr int PW = decltype(pw)::value;
          launch_smem(pool_bwd_tile_k3s2<T, OP, V, PW>, grid_for(a.tiles, 1), kThreads, smem, stream, gp, ind, dxp,
                      a, n_cols, uniform_div, by_ow);
        };
        if (a.pw == 1) go(int_c<1>{});
        else go(int_c<0>{});
        done = true;
        return;
      }
    }
    if (span_h <= 2 * a.sh && span_w <= 2 * a.sw && choice != NcBwd::Gather) {
      // owner blocks: a band of R owner rows stages grad rows [o0 - 1, o0 + R)
      if (fit < 2) return;
      const int own_h = int((a.H - 1 + a.ph) / a.sh + 1), own_w = int((a.W - 1 + a.pw) / a.sw + 1);
      set_bands(a, own_h, int(fit - 1 < own_h ? fit - 1 : own_h), own_w);
      const int64_t out_rows = int64_t(a.rows) + 1 < a.OH ? int64_t(a.rows) + 1 : a.OH;
      const size_t smem = size_t(out_rows * row_bytes + 15) / 16 * 16;
      launch_smem(pool_bwd_tile_owner<T, OP>, grid_for(a.tiles, 1), kThreads, smem, stream, gp, ind, dxp, a);
      done = true;
      return;
    }
    // input rows R whose covering output rows (at most (R + span - 2) / s + 2) fit
    int64_t max_rows = fit >= a.OH ? a.H : (fit - 2) * a.sh - span_h + 2;
    if (max_rows < 1) return;
    set_bands(a, a.H, int(max_rows < a.H ? max_rows : a.H), a.W);
    int64_t out_rows = (int64_t(a.rows) + span_h - 2) / a.sh + 2;
    out_rows = out_rows < a.OH ? out_rows : a.OH;
    const size_t smem = size_t(out_rows * row_bytes + 15) / 16 * 16;
    const unsigned grid = grid_for(a.tiles, 1);
    // at most two outputs cover a position along each axis
    if (span_h <= 2 * a.sh && span_w <= 2 * a.sw)
      launch_smem(pool_bwd_tile<T, OP, 2>, grid, kThreads, smem, stream, gp, ind, dxp, a);
    else
      launch_smem(pool_bwd_tile<T, OP, 0>, grid, kThreads, smem, stream, gp, ind, dxp, a);
    done = true;
  });
  return done;
}

// Global average backward: a broadcast of g / P.
bool launch_global_bwd(DType t, const void* g, void* dx, const PoolShape& s, cudaStream_t stream) {
  if (!s.global()) return false;
  const int64_t P = s.in_volume();
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const T* gp = static_cast<const T*>(g);
    T* dxp = static_cast<T*>(dx);
    if (s.channels_last) {
      auto run = [&](auto vec) {
        constexpr int VV = decltype(vec)::value;
        if (global_cl_columns(s.N * (s.C / VV)) && s.C / VV < (int64_t(1) << 31)) {  // a thread a column
          launch(global_bcast_cl_col<T, VV>, grid_for(s.N * (s.C / VV), kThreads), kThreads, stream, gp, dxp, s.N, P,
                 FastDivmod32(uint32_t(s.C / VV)), column_div(s.N * (s.C / VV)));
          return;
        }
        const int64_t div[2] = {s.C / VV, P};
        const int64_t items = s.N * P * (s.C / VV);
        launch(global_bcast_cl<T, VV>, grid_for(items, kThreads), kThreads, stream, gp, dxp, s.N, P, s.C,
               make_splitter(div, items));
      };
      if (s.C % V == 0 && aligned16(g) && aligned16(dx)) run(int_c<V>{});
      else run(int_c<1>{});
    } else {
      const int64_t total = s.N * s.C * P;
      const FastDivmod32 by_p(uint32_t(P < (int64_t(1) << 31) ? P : 1));
      if (aligned16(dx))
        launch(global_bcast_nc<T, V>, grid_for((total + V - 1) / V, kThreads), kThreads, stream, gp, dxp, total, P,
               by_p);
      else
        launch(global_bcast_nc<T, 1>, grid_for(total, kThreads), kThreads, stream, gp, dxp, total, P, by_p);
    }
  });
  return true;
}

template <Op OP>
void launch_gather(DType t, const void* g, const int64_t* ind, const void* x, const void* y, void* dx,
                   const PoolShape& s, cudaStream_t stream) {
  if constexpr (OP != Op::Lp) {
    if (launch_tile_bwd<OP>(t, g, ind, dx, s, stream)) return;
  }
  const int64_t in[3] = {s.ax[0].in, s.ax[1].in, s.ax[2].in};
  bool aligned = aligned16(g) && aligned16(dx);
  if (OP == Op::Max) aligned = aligned && aligned16(ind);
  if (OP == Op::Lp) aligned = aligned && aligned16(x) && aligned16(y);
  dispatch_layout(t, s, aligned, [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(g);
    const T* xp = static_cast<const T*>(x);
    const T* yp = static_cast<const T*>(y);
    T* dxp = static_cast<T*>(dx);
    if constexpr (cl.value && OP != Op::Lp) {
      if (launch_band_bwd<T, OP, v.value>(gp, ind, dxp, s, stream)) return;
      if (owner_applies(s) && !cl_bwd_item()) {
        if (owner_k3(s)) {
          const OwnerArgs oa = owner_args(s, v.value, owner_strip(OP == Op::Max));
          launch(pool_bwd_cl_k3_strip<T, OP, v.value>, grid_for(oa.items, kThreads), kThreads, stream, gp, ind, dxp,
                 oa);
          return;
        }
        const OwnerArgs oa = owner_args(s, v.value);
        launch(pool_bwd_cl_owner<T, OP, v.value>, grid_for(oa.items, kThreads), kThreads, stream, gp, ind, dxp, oa);
        return;
      }
    }
    // the scalar channels-last path (C not a multiple of the vector) is the rare one: loops only
    dispatch_cover<OP, (!decltype(cl)::value || decltype(v)::value > 1)>(s, [&](auto ch, auto cw) {
      if constexpr (cl.value) {
        const Args<4> a = cl_args(s, v.value, in);
        launch(pool_bwd_cl<T, OP, v.value, ch.value, cw.value>, grid_for(a.items, kThreads), kThreads, stream, gp,
               ind, xp, yp, dxp, a);
      } else {
        const Args<3> a = nc_args(s, in);
        launch(pool_bwd_nc<T, OP, ch.value, cw.value>, grid_for(a.items, kThreads), kThreads, stream, gp,
               ind, xp, yp, dxp, a);
      }
    });
  });
}

}  // namespace

cudaError_t launch_max_backward(DType t, const void* g, const int64_t* ind, void* dx, const PoolShape& s,
                                cudaStream_t stream) {
  if (s.N * s.C * s.in_volume() == 0) return cudaSuccess;
  launch_gather<Op::Max>(t, g, ind, nullptr, nullptr, dx, s, stream);
  return cudaGetLastError();
}

cudaError_t launch_avg_backward(DType t, const void* g, void* dx, const PoolShape& s, cudaStream_t stream) {
  if (s.N * s.C * s.in_volume() == 0) return cudaSuccess;
  if (!launch_global_bwd(t, g, dx, s, stream)) launch_gather<Op::Avg>(t, g, nullptr, nullptr, nullptr, dx, s, stream);
  return cudaGetLastError();
}

cudaError_t launch_lp_backward(DType t, const void* g, const void* x, const void* y, void* dx, const PoolShape& s,
                               cudaStream_t stream) {
  if (s.N * s.C * s.in_volume() == 0) return cudaSuccess;
  launch_gather<Op::Lp>(t, g, nullptr, x, y, dx, s, stream);
  return cudaGetLastError();
}

}  // namespace pool
}  // namespace torch_dnn

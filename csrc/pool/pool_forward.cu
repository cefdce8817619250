// Pooling forward entry points: max (with indices), avg, lp, adaptive avg and max, over dtype x layout.
#include "pool/kernels/pool.cuh"

namespace torch_dnn {
namespace pool {
namespace {

template <Op OP>
void launch_windows(DType t, const void* x, void* y, int64_t* ind, const PoolShape& s, cudaStream_t stream) {
  const int64_t out[3] = {s.ax[0].out, s.ax[1].out, s.ax[2].out};
  const bool aligned = aligned16(x) && aligned16(y) && (OP != Op::Max || aligned16(ind));
  dispatch_layout(t, s, aligned, [&](auto tag, auto cl, auto v) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    // the scalar channels-last path (C not a multiple of the vector) is the rare one: loops only
    dispatch_taps<OP, (!decltype(cl)::value || decltype(v)::value > 1)>(s, [&](auto kh, auto kw) {
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
      // channel groups per block: up to 32 (a warp along C), fewer when C is small, so rows get more lanes
      auto run = [&](auto vec) {
        constexpr int VV = decltype(vec)::value;
        const int64_t G = s.C / VV;
        int groups = 32;
        while (groups > 1 && groups / 2 >= G) groups /= 2;
        const int64_t blocks = s.N * ((G + groups - 1) / groups);
        launch(global_avg_cl<T, VV>, grid_for(blocks, 1, 4, 4), kThreads, stream, xp, yp, s.N, P, s.C, groups);
      };
      if (s.C % V == 0 && aligned) run(std::integral_constant<int, V>{});
      else run(std::integral_constant<int, 1>{});
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

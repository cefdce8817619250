// Window pooling's host-side choices: which kernel takes a shape (plane tiles, channels-last owner blocks and
// taps, global average), their arguments, and the run-time knobs that force one (docs/pool.md).
#pragma once
#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "pool/kernels/pool.cuh"
#include "pool/kernels/pool_cl_bwd.cuh"
#include "pool/kernels/pool_cl_fwd.cuh"
#include "pool/kernels/pool_tile.cuh"

namespace torch_dnn {
namespace pool {

// ---- host side ----

// Variant switches, read per call so that one process can measure both (benchmarks/cases_pool.py):
// TORCH_DNN_POOL_NC=item: the per-element NCDHW kernels (pool.cuh) instead of the plane tiles.
inline bool nc_item() {
  return env::is("TORCH_DNN_POOL_NC", "item");
}
// Channels-last global average by a thread a column (n, channel vector) when there are enough columns to keep
// the memory busy with U loads in flight a thread (~25K at 132 SMs), by row lanes otherwise.
// TORCH_DNN_POOL_GLOBAL_CL=col / lanes forces one or the other (forward and backward).
inline bool global_cl_columns(int64_t columns) {
  return env::choice("TORCH_DNN_POOL_GLOBAL_CL", "col", "lanes", columns >= int64_t(sm_count()) * 192);
}

// The row-lanes kernel's channel groups a block (global_avg_cl: 256 / groups row lanes a block, N x ceil(G / groups)
// blocks for G channel vectors): up to 32 (a warp along C), fewer when C is small so that rows get more lanes, and
// fewer while the blocks would not fill the SMs twice over (a large map with few channels, e.g. 64 x 256 channels at
// 56 x 56: 64 blocks of 32 groups left half the SMs idle). At least 4 groups: a warp's row segments stay 64 bytes.
inline int global_cl_groups(int64_t N, int64_t G) {
  int groups = 32;
  while (groups > 1 && groups / 2 >= G) groups /= 2;
  while (groups > 4 && N * ((G + groups - 1) / groups) < 2 * int64_t(sm_count())) groups /= 2;
  return groups;
}

// How the channels-last column kernels split a column index into (n, channel vector): by a multiply-high where the
// columns are under 2^31 (a thread's first loads wait on this division), else by the 64-bit division.
enum class ColumnDiv : int { Wide, Fast };
inline ColumnDiv column_div(int64_t columns) {
  return columns >= (int64_t(1) << 31) ? ColumnDiv::Wide : ColumnDiv::Fast;
}

// The one volume the global-average kernels also take as a compile-time constant: 7x7, the last feature map of
// ImageNet CNNs at 224 (ResNet, RegNet, EfficientNet, ...). With P known the row loop's trip count, predicates
// and addresses fold, which gave the channels-last column kernel its last percent to the target (NCHW's chunk
// kernel: within noise; docs/pool.md).
constexpr int kStaticP = 49;
inline bool global_static_p(int64_t P) { return P == kStaticP; }

// The NCDHW backward's kernel choice, TORCH_DNN_POOL_NC_BWD: unset, pool_bwd_tile_k3s2 for 3x3/2 windows and
// the owner blocks where they apply; =owner, the owner blocks for 3x3/2 windows too; =gather, the per-input
// tile gather.
enum class NcBwd { Auto, Owner, Gather };
inline NcBwd nc_bwd_choice() {
  if (env::is("TORCH_DNN_POOL_NC_BWD", "owner")) return NcBwd::Owner;
  if (env::is("TORCH_DNN_POOL_NC_BWD", "gather")) return NcBwd::Gather;
  return NcBwd::Auto;
}

// avg pooling's one divisor for every window of s along H and W (the depth window is trivial where this is
// asked), or 0 where the windows' divisors differ. Along an axis a window is clipped at its start only where it begins in
// the padding (the first windows) and at its end only past a bound its end grows towards (the last windows), so
// every window has the full size exactly when the first and the last do.
inline int uniform_avg_divisor(const PoolShape& s) {
  if (s.divisor_override) return int(s.divisor_override);
  const Axis &h = s.ax[1], &w = s.ax[2];
  if (h.out < 1 || w.out < 1) return 0;
  auto full = [&](int64_t o, const Axis& a) {
    return avg_window_size(int(o * a.s - a.p), 0, int(a.k), 1, int(a.in), 1, int(a.p), 0, s.count_include_pad) == a.k;
  };
  const bool all = full(0, h) && full(h.out - 1, h) && full(0, w) && full(w.out - 1, w);
  return all ? int(h.k * w.k) : 0;
}

constexpr int kTileSmem = 32 * 1024;  // bytes of shared memory per band: several blocks per SM

// TORCH_DNN_POOL_PAD_PAIR=0: pool_fwd_tile_pad with one output a thread also for avg at stride 2 (A/B runs).
inline bool pad_single() {
  return env::is("TORCH_DNN_POOL_PAD_PAIR", "0");
}
// TORCH_DNN_POOL_PAD_STRIP=0: no column strips for 3x3/2 (avg: pairs, max: one output a thread; A/B runs).
inline bool pad_nostrip() {
  return env::is("TORCH_DNN_POOL_PAD_STRIP", "0");
}

// Bytes of one of pool_fwd_tile_pad's two buffers: TORCH_DNN_POOL_PAD_KB (4..32, for A/B runs), else 32 KB.
inline int pad_tile_bytes() {
  const int kb = env::get_int("TORCH_DNN_POOL_PAD_KB", 32);
  return (kb >= 4 && kb <= 32 ? kb : 32) * 1024;
}

// The tile path applies: NCDHW, window pooling (max, avg), depth window trivial, plane sizes in 32 bits.
inline bool tile_applies(const PoolShape& s) {
  if (s.channels_last || s.adaptive || s.lp()) return false;
  const Axis& d = s.ax[0];
  if (d.k != 1 || d.s != 1 || d.p != 0 || d.d != 1 || d.out != d.in) return false;
  const int64_t lim = int64_t(1) << 30;
  for (int i = 1; i < 3; ++i) {
    const Axis& a = s.ax[i];
    if (a.in + 2 * a.p + (a.k - 1) * a.d + 1 >= lim || a.out * a.s >= lim || a.k >= lim || a.d >= lim) return false;
  }
  if (s.ax[1].in * s.ax[2].in >= lim || s.ax[1].out * s.ax[2].out >= lim) return false;
  if (s.ax[0].in >= lim) return false;
  return true;
}

// Fills the shape part of TileArgs; rows/bands/steps are set by the caller.
inline TileArgs tile_args(const PoolShape& s) {
  TileArgs a;
  const Axis &h = s.ax[1], &w = s.ax[2];
  a.planes = s.N * s.C * s.ax[0].in;
  a.D = int(s.ax[0].in);
  a.H = int(h.in), a.W = int(w.in), a.OH = int(h.out), a.OW = int(w.out);
  a.kh = int(h.k), a.kw = int(w.k), a.sh = int(h.s), a.sw = int(w.s);
  a.ph = int(h.p), a.pw = int(w.p), a.dh = int(h.d), a.dw = int(w.d);
  a.cip = s.count_include_pad;
  a.divisor_override = int(s.divisor_override);
  a.by_sh = FastDivmod32(uint32_t(a.sh));
  a.by_sw = FastDivmod32(uint32_t(a.sw));
  a.rows = a.bands = 1;
  a.tiles = 0;
  a.step_r = a.step_c = 0;
  return a;
}

// Splits `total` rows into bands of at most `max_rows` rows, balanced.
inline void set_bands(TileArgs& a, int total, int max_rows, int cols) {
  a.bands = (total + max_rows - 1) / max_rows;
  a.rows = (total + a.bands - 1) / a.bands;
  a.bands = (total + a.rows - 1) / a.rows;
  a.tiles = a.planes * a.bands;
  a.step_r = kThreads / cols;
  a.step_c = kThreads % cols;
}


// Channels-last window max/avg pooling with a trivial depth window (kernel and stride 1, no padding or dilation):
// the ground of the channels-last 2-D paths (owner_applies, cl2d_applies).
inline bool cl_planar_window(const PoolShape& s) {
  if (!s.channels_last || s.adaptive || s.lp()) return false;
  const Axis& d = s.ax[0];
  return d.k == 1 && d.s == 1 && d.p == 0 && d.d == 1 && d.out == d.in;
}

// The owner path applies: channels-last window max/avg pooling, trivial depth window, span <= 2 * stride
// along H and W (max may be dilated), 32-bit positions in a slice.
inline bool owner_applies(const PoolShape& s) {
  if (!cl_planar_window(s)) return false;
  const int64_t lim = int64_t(1) << 30;
  for (int i = 1; i < 3; ++i) {
    const Axis& a = s.ax[i];
    if ((a.k - 1) * a.d + 1 > 2 * a.s) return false;
    if (a.in + 2 * a.p + a.k + a.s >= lim || a.out * a.s >= lim) return false;
  }
  return s.ax[1].in * s.ax[2].in < lim && s.ax[0].in < lim;
}

// pool_bwd_cl_owner's fixed covering applies: 3x3 windows, stride 2, dilation 1 along H and W.
inline bool owner_k3(const PoolShape& s) {
  for (int i = 1; i < 3; ++i)
    if (s.ax[i].k != 3 || s.ax[i].s != 2 || s.ax[i].d != 1) return false;
  return true;
}

// TORCH_DNN_POOL_CL_BWD=item: the per-input channels-last gather (pool.cuh) instead of the owner blocks.
inline bool cl_bwd_item() {
  return env::is("TORCH_DNN_POOL_CL_BWD", "item");
}

// Owner rows an item of pool_bwd_cl_k3_strip: TORCH_DNN_POOL_CL_BWD_STRIP (A/B runs; 0 or 1: one owner an item),
// else 2 for max, 4 for avg (the best of 1, 2, 4 and 8 measured; docs/pool.md).
inline int owner_strip(bool max) {
  return env::get_int("TORCH_DNN_POOL_CL_BWD_STRIP", max ? 2 : 4);
}

// strip: owner rows an item of pool_bwd_cl_k3_strip (pool_bwd_cl_owner: 1, one owner an item).
inline OwnerArgs owner_args(const PoolShape& s, int V, int strip = 1) {
  OwnerArgs a;
  const Axis &h = s.ax[1], &w = s.ax[2];
  a.C = s.C;
  a.D = int(s.ax[0].in);
  a.H = int(h.in), a.W = int(w.in), a.OH = int(h.out), a.OW = int(w.out);
  a.kh = int(h.k), a.kw = int(w.k), a.sh = int(h.s), a.sw = int(w.s), a.ph = int(h.p), a.pw = int(w.p);
  a.cip = s.count_include_pad;
  a.divisor_override = int(s.divisor_override);
  a.uniform_div = uniform_avg_divisor(s);
  const int64_t own_h = (h.in - 1 + h.p) / h.s + 1, own_w = (w.in - 1 + w.p) / w.s + 1;
  a.own_h = int(own_h);
  a.strip = strip > 1 ? strip : 1;
  const int64_t strips = (own_h + a.strip - 1) / a.strip;
  const int64_t div[4] = {s.C / V, own_w, strips, s.ax[0].in};
  a.items = s.N * s.ax[0].in * strips * own_w * (s.C / V);
  a.sp = make_splitter(div, a.items);
  return a;
}


// Channels-last 2-D forward: the taps kernels (all taps' loads in flight: pool_fwd_cl2d32 below 2^31 elements,
// else pool_fwd_cl2d) or the row-at-a-time kernel (pool.cuh). taps_default: max pooling, and avg pooling where
// pool_fwd_cl2d32 applies (for avg the 64-bit taps kernel's 2 blocks/SM bound cost more than the taps win;
// docs/pool.md). TORCH_DNN_POOL_CL_FWD=item forces the row-at-a-time kernel for both.
inline bool cl_fwd_taps(bool taps_default) {
  return taps_default && !env::is("TORCH_DNN_POOL_CL_FWD", "item");
}


// pool_fwd_cl2d32 applies (over pool_fwd_cl2d's conditions): input, output and item counts below 2^31, and not
// turned off by TORCH_DNN_POOL_CL2D=wide (A/B runs).
inline bool cl2d32_applies(const PoolShape& s, int V) {
  const int64_t lim = int64_t(1) << 31;
  const int64_t nd = s.N * s.ax[0].in;
  const int64_t in = nd * s.ax[1].in * s.ax[2].in * s.C, out = nd * s.ax[1].out * s.ax[2].out * s.C;
  return in < lim && out < lim && out / V < lim && !env::is("TORCH_DNN_POOL_CL2D", "wide");
}

inline Cl2dArgs cl2d32_args(const PoolShape& s, int V, int uniform_div) {
  Cl2dArgs a;
  const Axis &h = s.ax[1], &w = s.ax[2];
  a.C = int(s.C), a.D = int(s.ax[0].in);
  a.H = int(h.in), a.W = int(w.in), a.OH = int(h.out), a.OW = int(w.out);
  a.sh = int(h.s), a.sw = int(w.s), a.ph = int(h.p), a.pw = int(w.p);
  a.items = int(s.N * a.D * a.OH * a.OW * (s.C / V));
  a.by_cv = FastDivmod32(uint32_t(s.C / V));
  a.by_ow = FastDivmod32(uint32_t(a.OW));
  a.by_oh = FastDivmod32(uint32_t(a.OH));
  a.by_d = FastDivmod32(uint32_t(a.D));
  a.uniform_div = uniform_div;
  a.divisor_override = int(s.divisor_override);
  a.cip = s.count_include_pad;
  return a;
}

// pool_fwd_cl2d applies: channels-last window max/avg, trivial depth window, dilation 1 along H and W,
// 32-bit positions in a slice.
inline bool cl2d_applies(const PoolShape& s) {
  if (!cl_planar_window(s)) return false;
  const int64_t lim = int64_t(1) << 30;
  for (int i = 1; i < 3; ++i) {
    const Axis& a = s.ax[i];
    if (a.d != 1 || a.in + 2 * a.p + a.k >= lim || a.out * a.s >= lim) return false;
  }
  return s.ax[1].in * s.ax[2].in < lim;
}

}  // namespace pool
}  // namespace torch_dnn

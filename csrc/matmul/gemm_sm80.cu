// The portable sm_80+ GEMM path (gemm_kernels.h): plan (kernel, split-K), operand checks, launches.
//   Float16 / BFloat16         -> mma::gemm_kernel (mma.sync m16n8k16, float accumulation)
//   Float32 with allow_tf32    -> mma::gemm_kernel (TF32 m16n8k8, float accumulation)
//   Float32 without TF32       -> simt::gemm_kernel (FFMA; GemmArgs::fp32_simt, the default), or under
//                                 TORCH_DNN_GEMM_FP32=3xtf32 mma::gemm_kernel<X3> (3xTF32: float32 accuracy from
//                                 three TF32 products)
//   Float64                    -> simt::gemm_kernel (DFMA)
//   Float16 / BFloat16, M <= 64, x @ W.T (both K-contiguous, 16-byte aligned), batch 1
//                              -> skinny::skinny_kernel (swap-AB, split-K summed through DSMEM or a counter)
// Instantiations: 4 kinds (half, bfloat16, TF32, 3xTF32) x 4 operand layouts of the tensor-core kernel, 2 dtypes x
// 4 layouts of the SIMT kernel, 4 reductions,
// 2 dtypes x 3 row counts x 2 reductions x 2 pipeline depths of the skinny kernel.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/cuda/device.cuh"
#include "matmul/gemm_kernels.h"
#include "matmul/kernels/gemm_mma.cuh"
#include "matmul/kernels/gemm_simt.cuh"
#include "matmul/kernels/gemm_skinny.cuh"

namespace torch_dnn {
namespace matmul {
namespace {

enum class Kernel { Mma, Simt };

struct Plan {
  Kernel kernel;
  bool x3 = false;     // Kernel::Mma on float without TF32: 3xTF32
  int64_t bm, bn, bk;  // CTA tile
  int splits = 1;
  int64_t kt_per_split = 0;
};

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
  }
  return 4;
}

// Split-K when the output tiles cannot fill the GPU (skinny M or N) and K is long: enough splits to give
// every SM a CTA, each split at least 4 K-tiles, at most 16. The SIMT and 3xTF32 kernels (one CTA an SM: their
// registers) take as many splits as fit one wave (64 tiles: 2 splits, 128 CTAs, not 3 and a second wave a third
// full), the SIMT kernel's each a whole number of its 16-deep float K steps.
Plan make_plan(const GemmArgs& a) {
  Plan p;
  p.x3 = a.dtype == DType::Float32 && !a.allow_tf32 && !a.fp32_simt;
  const bool tc =
      a.dtype == DType::Float16 || a.dtype == DType::BFloat16 || (a.dtype == DType::Float32 && a.allow_tf32) || p.x3;
  p.kernel = tc ? Kernel::Mma : Kernel::Simt;
  p.bm = tc ? mma::kBM : simt::kBM;
  p.bn = tc ? mma::kBN : simt::kBN;
  p.bk = tc ? 64 / dtype_size(a.dtype) : simt::kBK;
  const int64_t tiles = cdiv(a.M, p.bm) * cdiv(a.N, p.bn) * a.batch;
  const int64_t ktiles = cdiv(a.K, p.bk);
  const int64_t sms = sm_count();
  int64_t splits = 1;
  if (tiles < sms && ktiles >= 8) {
    splits = tc && !p.x3 ? cdiv(sms, tiles) : sms / tiles;
    splits = std::min<int64_t>({splits, ktiles / 4, 16});
    splits = std::max<int64_t>(splits, 1);
  }
  p.kt_per_split = splits > 1 ? cdiv(ktiles, splits) : ktiles;
  if (!tc && splits > 1) p.kt_per_split += p.kt_per_split % 2;  // whole 16-deep steps (p.bk is 8)
  p.splits = int(splits > 1 ? cdiv(ktiles, p.kt_per_split) : 1);
  return p;
}

bool aligned(const void* ptr, int64_t ld, int64_t bs, int64_t esize) {
  const int64_t ke = 16 / esize;
  return aligned16(ptr) && ld % ke == 0 && bs % ke == 0;
}

template <typename T>
Epi<T> make_epi(const GemmArgs& a) {
  using A = acc_t<T>;
  Epi<T> e;
  e.d = static_cast<T*>(a.D);
  e.ldd = a.ldd;
  e.bsd = a.batch_stride_d;
  e.pre = static_cast<T*>(a.preact);
  e.bias = static_cast<const T*>(a.bias);
  e.res = static_cast<const T*>(a.residual);
  e.ldr = a.ldr;
  e.bsr = a.batch_stride_r;
  e.alpha = A(a.alpha);
  e.pa = A(a.act_params.a);
  e.pb = A(a.act_params.b);
  e.act = a.act;
  e.vec_d = aligned(a.D, a.ldd, a.batch_stride_d, sizeof(T)) && (a.preact == nullptr || aligned16(a.preact));
  e.vec_r = a.residual != nullptr && aligned(a.residual, a.ldr, a.batch_stride_r, sizeof(T));
  return e;
}

template <typename T>
Operand<T> make_operand(const MatrixRef& r) {
  return {static_cast<const T*>(r.ptr), r.ld, r.batch_stride, aligned(r.ptr, r.ld, r.batch_stride, sizeof(T))};
}

unsigned grid_z(int64_t n) { return unsigned(n < 65535 ? n : 65535); }

template <typename T>
cudaError_t reduce_splits(const GemmArgs& a, const Plan& pl, const acc_t<T>* ws, cudaStream_t stream) {
  const int64_t total = a.batch * a.M * a.N;
  splitk_reduce_kernel<T><<<grid_for(total, 256, 4, 8), 256, 0, stream>>>(ws, pl.splits, a.batch, a.M, a.N, make_epi<T>(a));
  return cudaGetLastError();
}

template <typename T, bool AK, bool BK, bool X3>
cudaError_t launch_mma_layout(const mma::Params<T>& p, dim3 grid, cudaStream_t stream) {
  constexpr int smem = mma::smem_bytes<T>();
  auto kernel = mma::gemm_kernel<T, AK, BK, X3>;
  if (const cudaError_t err = raise_smem_limit_once<mma::gemm_kernel<T, AK, BK, X3>>(smem); err != cudaSuccess)
    return err;
  kernel<<<grid, mma::kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// X3: float32 by 3xTF32 (float only).
template <typename T, bool X3 = false>
cudaError_t run_mma(const GemmArgs& a, const Plan& pl, void* ws, cudaStream_t stream) {
  mma::Params<T> p;
  p.A = make_operand<T>(a.A);  // stored [M][K] when row-major (K-contiguous), else [K][M]
  p.B = make_operand<T>(a.B);  // stored [N][K] when column-major (K-contiguous), else [K][N]
  p.M = a.M, p.N = a.N, p.K = a.K, p.batch = a.batch;
  p.tiles_m = cdiv(a.M, pl.bm);
  p.tiles_n = cdiv(a.N, pl.bn);
  p.splits = pl.splits;
  p.kt_per_split = int(pl.kt_per_split);
  p.ws = static_cast<float*>(ws);
  p.e = make_epi<T>(a);
  const dim3 grid(unsigned(p.tiles_m * p.tiles_n), 1, grid_z(a.batch * pl.splits));
  const bool ak = !a.A.col_major, bk = a.B.col_major;
  cudaError_t err;
  if (ak && bk) err = launch_mma_layout<T, true, true, X3>(p, grid, stream);
  else if (ak) err = launch_mma_layout<T, true, false, X3>(p, grid, stream);
  else if (bk) err = launch_mma_layout<T, false, true, X3>(p, grid, stream);
  else err = launch_mma_layout<T, false, false, X3>(p, grid, stream);
  if (err != cudaSuccess || pl.splits == 1) return err;
  return reduce_splits<T>(a, pl, static_cast<const float*>(ws), stream);
}

template <typename T, int BK>
void launch_simt(const simt::Params<T>& p, bool ak, bool bk, dim3 grid, cudaStream_t stream) {
  if (ak && bk) simt::gemm_kernel<T, true, true, BK><<<grid, simt::kThreads, 0, stream>>>(p);
  else if (ak) simt::gemm_kernel<T, true, false, BK><<<grid, simt::kThreads, 0, stream>>>(p);
  else if (bk) simt::gemm_kernel<T, false, true, BK><<<grid, simt::kThreads, 0, stream>>>(p);
  else simt::gemm_kernel<T, false, false, BK><<<grid, simt::kThreads, 0, stream>>>(p);
}

template <typename T>
cudaError_t run_simt(const GemmArgs& a, const Plan& pl, void* ws, cudaStream_t stream) {
  simt::Params<T> p;
  p.A = make_operand<T>(a.A);
  p.B = make_operand<T>(a.B);
  p.M = a.M, p.N = a.N, p.K = a.K, p.batch = a.batch;
  p.tiles_m = cdiv(a.M, pl.bm);
  p.tiles_n = cdiv(a.N, pl.bn);
  p.splits = pl.splits;
  p.kt_per_split = int(pl.kt_per_split);
  p.ws = static_cast<acc_t<T>*>(ws);
  p.e = make_epi<T>(a);
  const dim3 grid(unsigned(p.tiles_m * p.tiles_n), 1, grid_z(a.batch * pl.splits));
  const bool ak = !a.A.col_major, bk = a.B.col_major;
  if constexpr (sizeof(T) == 4) launch_simt<T, 16>(p, ak, bk, grid, stream);
  else launch_simt<T, 8>(p, ak, bk, grid, stream);  // double: a 16-deep step would pass 48 KB of shared memory
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || pl.splits == 1) return err;
  return reduce_splits<T>(a, pl, static_cast<const acc_t<T>*>(ws), stream);
}


// ---- the skinny kernel ----

bool device_has_clusters() {
  static int cache[64] = {0};  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev < 0 || dev >= 64) return false;
  if (cache[dev] == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cache[dev] = major >= 9 ? 2 : 1;
  }
  return cache[dev] == 2;
}

struct SkinnyPlan {
  int bx = 16;  // x rows per CTA
  // the pipeline depth: MatmulKnobs::gemm_skinny_stages, 8 by default (one CTA per SM streaming longer K ranges
  // won all but one of the decode shapes measured, docs/matmul.md), 4 for the A/B
  int stages = 4;
  int tiles_n = 1, splits = 1, kt_per_split = 1;
  bool cluster = false;  // splits reduced through DSMEM (sm_90), else through the workspace and a counter
};

template <int BX>
constexpr int skinny_smem(int stages) {
  return stages == 8 ? skinny::smem_bytes<BX, 8>() : skinny::smem_bytes<BX, 4>();
}

// CTAs resident per SM: shared memory (227 KB per SM on sm_90, 1 KB reserved per CTA) within the launch bounds' 2.
int skinny_ctas_per_sm(int bx, int stages) {
  const int smem = bx == 16 ? skinny_smem<16>(stages) : (bx == 32 ? skinny_smem<32>(stages) : skinny_smem<64>(stages));
  return std::max(1, std::min(3, (227 << 10) / (smem + (1 << 10))));
}

// K splits: as many as the resident CTA slots left over by the N tiles allow (one wave; each split at least 2
// K tiles, at most `cap`).
void set_splits(SkinnyPlan* pl, int64_t tiles_n, int64_t ktiles, int64_t slots, int64_t cap) {
  int64_t splits = tiles_n < slots ? std::min<int64_t>({slots / tiles_n, ktiles / 2, cap}) : 1;
  splits = std::max<int64_t>(splits, 1);
  const int64_t per = cdiv(ktiles, splits);
  pl->kt_per_split = int(per);
  pl->splits = int(cdiv(ktiles, per));
}

// Whether the skinny kernel takes the problem, and how: x rows rounded up to 16/32/64, the K splits of
// set_splits, met in a cluster (at most 8) on sm_90 where the grid leaves a quarter of the slots free; a grid
// of clusters that fills every slot packed worse than free CTAs (the scheduler leaves slots a cluster cannot use),
// so there the counter reduction is used. MatmulKnobs::gemm_skinny: Off turns the kernel off; Counter makes an sm_90
// device reduce the splits through the workspace and a counter as other GPUs do (to test both reductions on one
// device); On and Counter make gemm_skinny_applies prefer it to the Hopper skinny kernels (for the A/B against them).
bool skinny_plan(const GemmArgs& a, SkinnyPlan* pl) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return false;
  if (a.batch != 1 || a.M < 1 || a.M > skinny::kMaxRows || a.N < 1 || a.K < 1) return false;
  if (a.A.col_major || !a.B.col_major) return false;  // x [M][K] and W [N][K], both K-contiguous
  if (!aligned(a.A.ptr, a.A.ld, 0, 2) || !aligned(a.B.ptr, a.B.ld, 0, 2)) return false;
  const GemmSkinny mode = a.knobs.gemm_skinny;
  if (mode == GemmSkinny::Off) return false;
  pl->bx = a.M <= 16 ? 16 : (a.M <= 32 ? 32 : 64);
  pl->stages = a.knobs.gemm_skinny_stages;
  const int64_t tiles_n = cdiv(a.N, skinny::kRows), ktiles = cdiv(a.K, skinny::kBK);
  if (tiles_n > 0x7fffffffLL) return false;
  pl->tiles_n = int(tiles_n);
  const int64_t slots = int64_t(sm_count()) * skinny_ctas_per_sm(pl->bx, pl->stages);
  pl->cluster = false;
  if (mode != GemmSkinny::Counter && device_has_clusters()) {
    set_splits(pl, tiles_n, ktiles, slots, skinny::kMaxCluster);
    pl->cluster = 4 * int64_t(pl->splits) * tiles_n <= 3 * slots;
  }
  if (!pl->cluster) set_splits(pl, tiles_n, ktiles, slots, 1 << 16);
  return true;
}

int64_t skinny_workspace_bytes(const SkinnyPlan& pl) {
  if (pl.splits == 1 || pl.cluster) return 0;
  return int64_t(pl.splits) * pl.tiles_n * pl.bx * skinny::kRows * 4 + int64_t(pl.tiles_n) * 4;
}

template <typename T, int BX, bool CLUSTER, int STAGES>
cudaError_t launch_skinny(const skinny::Params<T>& p, cudaStream_t stream) {
  constexpr int smem = skinny::smem_bytes<BX, STAGES>();
  auto kernel = skinny::skinny_kernel<T, BX, CLUSTER, STAGES>;
  if (const cudaError_t err = raise_smem_limit_once<skinny::skinny_kernel<T, BX, CLUSTER, STAGES>>(smem);
      err != cudaSuccess)
    return err;
  const dim3 grid(unsigned(p.tiles_n), unsigned(p.splits));
  if constexpr (CLUSTER) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(skinny::kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = unsigned(p.splits);
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, p);
  } else {
    kernel<<<grid, skinny::kThreads, smem, stream>>>(p);
    return cudaGetLastError();
  }
}

template <typename T, int BX>
cudaError_t launch_skinny(const skinny::Params<T>& p, bool cluster, int stages, cudaStream_t stream) {
  if (stages == 8)
    return cluster ? launch_skinny<T, BX, true, 8>(p, stream) : launch_skinny<T, BX, false, 8>(p, stream);
  return cluster ? launch_skinny<T, BX, true, 4>(p, stream) : launch_skinny<T, BX, false, 4>(p, stream);
}

template <typename T>
cudaError_t run_skinny(const GemmArgs& a, const SkinnyPlan& pl, void* ws, cudaStream_t stream) {
  skinny::Params<T> p;
  p.w = static_cast<const T*>(a.B.ptr);
  p.x = static_cast<const T*>(a.A.ptr);
  p.ldw = a.B.ld, p.ldx = a.A.ld, p.M = a.M, p.N = a.N, p.K = a.K;
  p.tiles_n = pl.tiles_n, p.splits = pl.splits, p.kt_per_split = pl.kt_per_split;
  p.ws = static_cast<float*>(ws);
  p.counters = nullptr;
  const bool cluster = pl.cluster && pl.splits > 1;
  if (pl.splits > 1 && !cluster) {
    p.counters = reinterpret_cast<unsigned*>(static_cast<char*>(ws) + skinny_workspace_bytes(pl) - 4 * pl.tiles_n);
    if (cudaError_t e = cudaMemsetAsync(p.counters, 0, 4 * size_t(pl.tiles_n), stream); e != cudaSuccess) return e;
  }
  p.e = make_epi<T>(a);
  switch (pl.bx) {
    case 16: return launch_skinny<T, 16>(p, cluster, pl.stages, stream);
    case 32: return launch_skinny<T, 32>(p, cluster, pl.stages, stream);
    default: return launch_skinny<T, 64>(p, cluster, pl.stages, stream);
  }
}

}  // namespace

bool gemm_skinny_applies(const GemmArgs& a, bool hopper_skinny) {
  // The Hopper skinny kernels measured faster on every decode shape (docs/matmul.md), so this kernel serves only
  // GPUs without them, unless forced
  if (hopper_skinny && a.knobs.gemm_skinny == GemmSkinny::Auto) return false;
  SkinnyPlan pl;
  return skinny_plan(a, &pl);
}

int64_t gemm_sm80_workspace_bytes(const GemmArgs& a) {
  if (a.M <= 0 || a.N <= 0 || a.batch <= 0) return 0;
  if (SkinnyPlan sp; skinny_plan(a, &sp)) return skinny_workspace_bytes(sp);
  const Plan pl = make_plan(a);
  if (pl.splits == 1) return 0;
  const int64_t acc = a.dtype == DType::Float64 ? 8 : 4;
  return int64_t(pl.splits) * a.batch * a.M * a.N * acc;
}

cudaError_t gemm_sm80(const GemmArgs& a, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  if (a.M <= 0 || a.N <= 0 || a.batch <= 0) return cudaSuccess;
  if (SkinnyPlan sp; skinny_plan(a, &sp)) {
    if (skinny_workspace_bytes(sp) > 0 && (workspace == nullptr || workspace_bytes < skinny_workspace_bytes(sp)))
      return cudaErrorInvalidValue;
    return a.dtype == DType::Float16 ? run_skinny<__half>(a, sp, workspace, stream)
                                     : run_skinny<__nv_bfloat16>(a, sp, workspace, stream);
  }
  const Plan pl = make_plan(a);
  if (pl.splits > 1 && (workspace == nullptr || workspace_bytes < gemm_sm80_workspace_bytes(a)))
    return cudaErrorInvalidValue;
  if (cdiv(a.M, pl.bm) * cdiv(a.N, pl.bn) > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  switch (a.dtype) {
    case DType::Float16: return run_mma<__half>(a, pl, workspace, stream);
    case DType::BFloat16: return run_mma<__nv_bfloat16>(a, pl, workspace, stream);
    case DType::Float32:
      if (a.allow_tf32) return run_mma<float>(a, pl, workspace, stream);
      return pl.x3 ? run_mma<float, true>(a, pl, workspace, stream) : run_simt<float>(a, pl, workspace, stream);
    case DType::Float64: return run_simt<double>(a, pl, workspace, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace matmul
}  // namespace torch_dnn

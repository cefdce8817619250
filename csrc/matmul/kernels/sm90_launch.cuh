// The host side every Hopper CUTLASS 3.x kernel of the extension shares: matmul's GEMMs (sm90_gemm.cuh) and conv's
// implicit GEMMs (conv/conv_sm90.cu, which cannot include sm90_gemm.cuh: its GEMM adapter brings CUTLASS 2.x's
// GemmUniversal, whose partial specialization also matches the conv kernels). The device facts, queried once per
// device; the kernel's shared-memory limit, raised once per device; the cluster launch. Torch-free; the
// including file brings CUTLASS's and CuTe's headers (and defines NDEBUG first).
#pragma once
#include <cstring>
#include <mutex>

#include "cute/tensor.hpp"
#include "cutlass/device_kernel.h"

namespace torch_dnn {
namespace matmul {
namespace sm90 {

struct DeviceInfo {
  bool sm90 = false;  // an sm_90 device, and this build has sm_90a code
  int sm_count = 0;
};

constexpr int kMaxDevices = 64;

inline bool build_has_sm90a() {
#ifdef TORCH_DNN_CUDA_ARCHS
  const char* archs = TORCH_DNN_CUDA_ARCHS;
  return std::strstr(archs, "9.0a") != nullptr || std::strstr(archs, "90a") != nullptr;
#else
  return true;  // built outside setup.py: assume the caller compiled for sm_90a
#endif
}

inline const DeviceInfo& device_info() {
  static DeviceInfo infos[kMaxDevices];
  static std::once_flag flags[kMaxDevices];
  static DeviceInfo none;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return none;
  }
  std::call_once(flags[dev], [dev] {
    int major = 0, minor = 0, sms = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    infos[dev].sm90 = major == 9 && minor == 0 && build_has_sm90a();
    infos[dev].sm_count = sms;
  });
  return infos[dev];
}

// The SM count for tile heuristics; an H100's 132 where the query failed.
inline int sm_count_or_h100() { return device_info().sm_count > 0 ? device_info().sm_count : 132; }

// The kernel's dynamic shared-memory limit, raised once per device (CUTLASS's adapters set it at every call:
// a driver call per launch that skinny, microsecond-scale problems notice).
template <class Kernel>
cudaError_t raise_smem_limit() {
  static std::once_flag flags[kMaxDevices];
  static cudaError_t results[kMaxDevices];
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(flags[dev], [dev] {
    constexpr int smem = Kernel::SharedStorageSize;
    results[dev] = smem >= (48 << 10) ? cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem)
                                      : cudaSuccess;
  });
  return results[dev];
}

// The launch of CUTLASS's adapters' run without their per-call cudaFuncSetAttribute (the cluster launcher sets
// NonPortableClusterSizeAllowed before every launch; our clusters are at most 2, within the portable 8, and the
// smem limit is raised once by raise_smem_limit).
template <class Kernel>
cudaError_t launch(typename Kernel::Params& params, cudaStream_t stream) {
  using Cluster = typename Kernel::DispatchPolicy::ClusterShape;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = Kernel::get_grid_shape(params);
  cfg.blockDim = Kernel::get_block_shape();
  cfg.dynamicSmemBytes = Kernel::SharedStorageSize;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cute::size<0>(Cluster{}));
  attr[0].val.clusterDim.y = unsigned(cute::size<1>(Cluster{}));
  attr[0].val.clusterDim.z = unsigned(cute::size<2>(Cluster{}));
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* kernel_args[] = {&params};
  return cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>), kernel_args);
}

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn

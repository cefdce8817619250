// Run-time choice of the instruction set for the CPU kernels' hot loops. A kernel's run is compiled with
// everything it calls inlined into it (flatten): for the baseline ISA, and on x86-64 for AVX2 (without FMA, so
// that a*b+c rounds twice on both paths and both give the same bits). run_kernel<Kernel>(args...) takes AVX2 where
// the CPU has it; run_kernel<Baseline, Avx2>(args...) runs a kernel written for each (e.g. its vector width).
#pragma once

namespace torch_dnn {
namespace cpu_isa {

template <class Kernel, class... Args>
__attribute__((flatten)) void run_baseline(Args... args) {
  Kernel::run(args...);
}

#if defined(__x86_64__) && defined(__GNUC__)
template <class Kernel, class... Args>
__attribute__((flatten, target("avx2"))) void run_avx2(Args... args) {
  Kernel::run(args...);
}
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

template <class Kernel, class Avx2Kernel = Kernel, class... Args>
void run_kernel(Args... args) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx2()) return run_avx2<Avx2Kernel>(args...);
#endif
  run_baseline<Kernel>(args...);
}

}  // namespace cpu_isa
}  // namespace torch_dnn

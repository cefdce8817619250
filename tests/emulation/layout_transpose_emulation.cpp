// The layout transpose (csrc/common/layout_transpose.cu) run on the CPU through cuda_host_shim.h: both directions,
// 2-, 4- and 8-byte elements, every access variant (16-byte loads and/or stores, element accesses where the rows
// are not whole vectors or a pointer is not 16-byte aligned), sizes that cut the 64 x 64 tiles, grids that go round
// their grid-stride loop (the shim's pretend device has two SMs). The destination must be the exact transpose, and
// nothing outside it may be written. Standalone (no torch): tests/test_group_norm.py::test_layout_transpose_emulation
// builds it with g++ and runs it.
#include "cuda_host_shim.h"

#include "common/layout_transpose.cu"

#include <cstdio>
#include <vector>

using namespace torch_dnn;

static int failures = 0, cases = 0;

// src [n][R][K] -> dst [n][K][R]; to_channels_last: src [N][C][S] (R = C, K = S), else src [N][S][C] (R = S, K = C).
template <typename U>
void run_case(DType dt, int64_t N, int64_t S, int64_t C, bool to_cl, int src_off, int dst_off) {
  const int64_t numel = N * S * C, R = to_cl ? C : S, K = to_cl ? S : C;
  const U guard = U(0x5a5a5a5a5a5a5a5aull);
  std::vector<U> src(numel + src_off + 8), dst(numel + dst_off + 8, guard);
  for (int64_t i = 0; i < int64_t(src.size()); ++i) src[i] = U(uint64_t(i) * 2654435761u + 12345);
  const U* s = src.data() + src_off;
  U* d = dst.data() + dst_off;
  const cudaError_t e = launch_layout_transpose(dt, s, d, N, S, C, to_cl, nullptr);
  ++cases;
  int bad = 0;
  if (e != cudaSuccess) ++bad;
  for (int64_t n = 0; n < N && bad < 5; ++n)
    for (int64_t r = 0; r < R && bad < 5; ++r)
      for (int64_t k = 0; k < K; ++k)
        if (d[(n * K + k) * R + r] != s[(n * R + r) * K + k]) {
          if (bad++ < 3)
            std::printf("FAIL %d-byte N=%ld S=%ld C=%ld to_cl=%d offsets %d/%d: dst[%ld][%ld][%ld]\n", int(sizeof(U)),
                        long(N), long(S), long(C), int(to_cl), src_off, dst_off, long(n), long(k), long(r));
          break;
        }
  for (int64_t i = 0; i < int64_t(dst.size()); ++i)
    if ((i < dst_off || i >= dst_off + numel) && dst[i] != guard) {
      std::printf("FAIL %d-byte N=%ld S=%ld C=%ld to_cl=%d: wrote outside the destination at %ld\n", int(sizeof(U)),
                  long(N), long(S), long(C), int(to_cl), long(i - dst_off));
      ++bad;
      break;
    }
  if (bad) ++failures;
}

template <typename U>
void run_all(DType dt) {
  constexpr int V = 16 / int(sizeof(U));
  // (N, S, C): whole vectors both ways, cut tiles; C or S not whole vectors; tiny sides
  const int64_t shapes[][3] = {{2, 64, 64}, {1, 200, 256}, {2, 72, 136}, {3, 99, 72}, {2, 35, 6},  {2, 290, 20},
                               {1, 129, 130}, {2, 225, 3}, {3, 1, 200},  {1, 7, 1},   {2, 8 * V, V}, {1, V, 3 * V}};
  for (const auto& sh : shapes)
    for (bool to_cl : {false, true}) {
      run_case<U>(dt, sh[0], sh[1], sh[2], to_cl, 0, 0);
      run_case<U>(dt, sh[0], sh[1], sh[2], to_cl, 1, 0);  // source not 16-byte aligned
      run_case<U>(dt, sh[0], sh[1], sh[2], to_cl, 0, 1);  // destination not 16-byte aligned
    }
  run_case<U>(dt, 5, 520, 520, sizeof(U) == 4, 0, 0);  // 405 tiles: more than the grid's 256 blocks
  run_case<U>(dt, 0, 5, 5, false, 0, 0);                // nothing to copy
}

int main() {
  run_all<uint16_t>(DType::BFloat16);
  run_all<uint16_t>(DType::Float16);
  run_all<uint32_t>(DType::Float32);
  run_all<uint64_t>(DType::Float64);
  std::printf(failures ? "FAILED (%d of %d cases)\n" : "PASSED (%d of %d cases failed)\n", failures, cases);
  return failures ? 1 : 0;
}

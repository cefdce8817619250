// Torch-side helpers for CUDA launchers (g++ compiles these; nvcc never sees torch headers).
#pragma once
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

#include <cstring>
#include <initializer_list>
#include <string>

#include "common/env.h"

namespace torch_dnn {

inline cudaStream_t current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// A kernel's scratch from the caching allocator (graph-capture safe), or none (undefined) when it needs no bytes:
// an empty tensor still costs a TensorImpl on every call.
inline at::Tensor workspace_or_none(int64_t n, const at::TensorOptions& options) {
  return n > 0 ? at::empty({n}, options) : at::Tensor();
}
inline void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Every torch-free launcher returns cudaGetLastError(); this turns a failure into a Python exception.
#define TD_CHECK_LAUNCH(expr) C10_CUDA_CHECK(expr)

// The error of a TORCH_DNN_* knob of named choices set to none of them: it names the knob, its choices and the value.
[[noreturn]] inline void bad_knob_choice(const char* name, const char* value, const char* const* choices, size_t n) {
  std::string all;
  for (size_t i = 0; i < n; ++i) all += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + choices[i];
  TORCH_CHECK(false, "torch_dnn: ", name, " must be ", all, ", but got '", value != nullptr ? value : "", "'");
  std::abort();  // not reached: TORCH_CHECK(false) throws
}

// A TORCH_DNN_* knob of named choices (read inside the launcher's env::Scope): the index of its value in `choices`,
// 0 (the first, the default) when unset or empty; any other value is an error naming the knob and its choices.
inline int knob_choice(const char* name, std::initializer_list<const char*> choices) {
  const char* s = env::get(name);
  if (s == nullptr || *s == '\0') return 0;
  int i = 0;
  for (const char* c : choices) {
    if (std::strcmp(s, c) == 0) return i;
    ++i;
  }
  bad_knob_choice(name, s, choices.begin(), choices.size());
}

}  // namespace torch_dnn

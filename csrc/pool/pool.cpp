// Pooling family: schemas (pool_ops.h: define_pool_schemas), and the CPU kernels' registration.
#include "pool/pool_cpu.h"
#include "pool/pool_ops.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  torch_dnn::pool::define_pool_schemas(m);
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::pool::register_pool_impls<torch_dnn::pool::CpuBackend>(m);
}

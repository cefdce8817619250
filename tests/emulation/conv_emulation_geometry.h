// The conv emulations' problem geometry (conv_direct_emulation.cpp, conv_staging_emulation.cpp): their ops take
// x [N][C][D][H][W], w [K][C/G][T][R][S] and y [N][K][P][Q][O] as 5-D tensors of any strides, with the stride,
// padding, dilation and groups as the op layer hands them over.
#pragma once
#include <ATen/ATen.h>

#include "conv/conv_kernels.h"

inline torch_dnn::conv::ConvGeometry emulation_geometry(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
                                                        at::IntArrayRef stride, at::IntArrayRef pad,
                                                        at::IntArrayRef dil, int64_t groups) {
  torch_dnn::conv::ConvGeometry g;
  g.N = x.size(0);
  g.C = x.size(1);
  g.K = y.size(1);
  g.G = groups;
  for (int i = 0; i < 3; ++i) {
    g.in[i] = x.size(2 + i);
    g.out[i] = y.size(2 + i);
    g.ker[i] = w.size(2 + i);
    g.stride[i] = stride[i];
    g.pad[i] = pad[i];
    g.dil[i] = dil[i];
  }
  return g;
}

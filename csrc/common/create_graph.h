// Differentiable forms (ATen ops) of the gradients that a backward computes when grad mode is on
// (autograd.grad(..., create_graph=True)), so that the gradient can be differentiated again: the families' backward
// ops have no derivatives of their own. They compute in float for 16-bit tensors and cost several kernels where the
// backward op costs one; a first-order backward (grad mode off) never uses them.
#pragma once
#include <ATen/ATen.h>

namespace torch_dnn {
namespace create_graph {

// 16-bit floating tensors in float (as the kernels accumulate), others as they are; .to() is differentiable.
inline at::Tensor opmath(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

// t summed over `dims` (none: t itself; ATen's sum over an empty list would sum everything).
inline at::Tensor sum_over(const at::Tensor& t, at::IntArrayRef dims) { return dims.empty() ? t : t.sum(dims); }

// Every dim of a rank-`rank` tensor but `keep` (a per-channel parameter's reduction).
inline std::vector<int64_t> dims_but(int64_t rank, int64_t keep) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != keep) dims.push_back(d);
  }
  return dims;
}

// xhat = (x - mean) * rstd with the statistics over `dims` (mean 0 when not centered: rms_norm), computed from x so
// that their derivatives are in the graph: rstd = 1 / sqrt(biased variance (mean square) + eps).
struct Normalized {
  at::Tensor xhat, rstd;
};
inline Normalized normalize(const at::Tensor& x, at::IntArrayRef dims, bool centered, double eps) {
  const at::Tensor xc = centered ? x - x.mean(dims, true) : x;
  const at::Tensor rstd = at::rsqrt(xc.square().mean(dims, true) + eps);
  return {xc * rstd, rstd};
}

// xhat = (x - mean) * rstd with given statistics (running ones, or instance_norm's given ones): constants that get no
// gradient; mean and rstd already shaped to broadcast against x.
inline Normalized normalize_with(const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd) {
  const at::Tensor r = rstd.detach();
  return {(x - mean.detach()) * r, r};
}

// dL/dx through xhat = normalize(x) from gx = dL/dxhat.
inline at::Tensor normalized_dx(const at::Tensor& gx, const Normalized& n, at::IntArrayRef dims, bool centered) {
  at::Tensor d = gx - n.xhat * (gx * n.xhat).mean(dims, true);
  if (centered) d = d - gx.mean(dims, true);
  return n.rstd * d;
}

}  // namespace create_graph
}  // namespace torch_dnn

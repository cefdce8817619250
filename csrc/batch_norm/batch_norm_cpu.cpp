// CPU batch_norm kernels: every tensor is walked as (N, C, S) in the input's own memory order through
// contiguous float64 copies (a readable reference, not a fast path). Statistics are two-pass (the mean, then
// the centred sum of squares), each channel summed in a fixed order, so results do not depend on threads.
#include "batch_norm/batch_norm_cpu.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "common/tensor_utils.h"

namespace torch_dnn {
namespace batch_norm {

namespace {

struct View {
  int64_t N, C, S;
};
View view_of(const at::Tensor& x) {
  return View{x.size(0), x.size(1), spatial_size(x)};
}
at::Tensor as64(const at::Tensor& t) { return t.to(at::kDouble).contiguous(); }

// f(o, c) for every element o of a contiguous [N][C][S] view, c its channel, in parallel over the (n, c) rows.
template <class F>
void for_each_element(const View& v, F&& f) {
  at::parallel_for(0, v.N * v.C, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % v.C;
      for (int64_t i = 0; i < v.S; ++i) f(r * v.S + i, c);
    }
  });
}

double act_fwd(double z, int64_t act) {
  if (act == 1) return (z > 0 || std::isnan(z)) ? z : 0.0;  // NaN propagates, as torch.relu
  if (act == 2) return z / (1.0 + std::exp(-z));
  return z;
}
double act_grad(double z, int64_t act) {
  if (act == 1) return z > 0 ? 1.0 : 0.0;
  if (act == 2) {
    const double s = 1.0 / (1.0 + std::exp(-z));
    return s * (1.0 + z * (1.0 - s));
  }
  return 1.0;
}

}  // namespace

void CpuBackend::stats(const at::Tensor& x, at::Tensor& mean, at::Tensor& m2) {
  const View v = view_of(x);
  const at::Tensor x64 = as64(x);
  const double* p = x64.const_data_ptr<double>();
  at::Tensor mo = at::empty({v.C}, x64.options()), m2o = at::empty({v.C}, x64.options());
  double* pm = mo.data_ptr<double>();
  double* pm2 = m2o.data_ptr<double>();
  at::parallel_for(0, v.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t n = 0; n < v.N; ++n)
        for (int64_t i = 0; i < v.S; ++i) s += p[(n * v.C + c) * v.S + i];
      const double m = s / double(v.N * v.S);
      double q = 0;
      for (int64_t n = 0; n < v.N; ++n)
        for (int64_t i = 0; i < v.S; ++i) {
          const double d = p[(n * v.C + c) * v.S + i] - m;
          q += d * d;
        }
      pm[c] = m;
      pm2[c] = q;
    }
  });
  mean.copy_(mo);
  m2.copy_(m2o);
}

void CpuBackend::apply(const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale, const at::Tensor& shift,
                       at::Tensor& y, int64_t act) {
  const View v = view_of(x);
  const at::Tensor x64 = as64(x), r64 = res.defined() ? as64(res) : at::Tensor();
  const at::Tensor sc = as64(scale), sh = as64(shift);
  at::Tensor y64 = at::empty_like(x64);
  const double *px = x64.const_data_ptr<double>(), *pr = r64.defined() ? r64.const_data_ptr<double>() : nullptr;
  const double *psc = sc.const_data_ptr<double>(), *psh = sh.const_data_ptr<double>();
  double* py = y64.data_ptr<double>();
  for_each_element(v, [&](int64_t o, int64_t c) {
    const double z = px[o] * psc[c] + psh[c] + (pr ? pr[o] : 0.0);
    py[o] = act_fwd(z, act);
  });
  y.copy_(y64.view(x.sizes()));
}

void CpuBackend::reduce(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& res, const at::Tensor& scale,
                        const at::Tensor& shift, const at::Tensor& mean, int64_t act, at::Tensor& dz,
                        at::Tensor& sum_dz, at::Tensor& sum_dz_xmu) {
  const View v = view_of(x);
  const at::Tensor x64 = as64(x), dy64 = as64(dy), r64 = res.defined() ? as64(res) : at::Tensor();
  const at::Tensor m64 = as64(mean);
  const at::Tensor sc = act != 0 ? as64(scale) : m64, sh = act != 0 ? as64(shift) : m64;  // act 0: unused
  at::Tensor dz64 = at::empty_like(x64);
  const double *px = x64.const_data_ptr<double>(), *pdy = dy64.const_data_ptr<double>();
  const double* pr = r64.defined() ? r64.const_data_ptr<double>() : nullptr;
  const double *psc = sc.const_data_ptr<double>(), *psh = sh.const_data_ptr<double>();
  const double* pm = m64.const_data_ptr<double>();
  double* pdz = dz64.data_ptr<double>();
  at::Tensor s1 = at::empty({v.C}, x64.options()), s2 = at::empty({v.C}, x64.options());
  double *p1 = s1.data_ptr<double>(), *p2 = s2.data_ptr<double>();
  at::parallel_for(0, v.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double a = 0, b = 0;
      for (int64_t n = 0; n < v.N; ++n)
        for (int64_t i = 0; i < v.S; ++i) {
          const int64_t o = (n * v.C + c) * v.S + i;
          double g = pdy[o];
          if (act != 0) g *= act_grad(px[o] * psc[c] + psh[c] + (pr ? pr[o] : 0.0), act);
          pdz[o] = g;
          a += g;
          b += g * (px[o] - pm[c]);
        }
      p1[c] = a;
      p2[c] = b;
    }
  });
  if (dz.defined()) dz.copy_(dz64.view(x.sizes()));
  sum_dz.copy_(s1);
  sum_dz_xmu.copy_(s2);
}

void CpuBackend::elemt(const at::Tensor& dz, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& k,
                       const at::Tensor& a, const at::Tensor& b, at::Tensor& dx) {
  const View v = view_of(x);
  const at::Tensor x64 = as64(x), dz64 = as64(dz);
  const at::Tensor m64 = as64(mean), k64 = as64(k), a64 = as64(a), b64 = as64(b);
  at::Tensor dx64 = at::empty_like(x64);
  const double *px = x64.const_data_ptr<double>(), *pdz = dz64.const_data_ptr<double>();
  const double *pm = m64.const_data_ptr<double>(), *pk = k64.const_data_ptr<double>();
  const double *pa = a64.const_data_ptr<double>(), *pb = b64.const_data_ptr<double>();
  double* pdx = dx64.data_ptr<double>();
  for_each_element(v, [&](int64_t o, int64_t c) { pdx[o] = pk[c] * (pdz[o] - pa[c] - (px[o] - pm[c]) * pb[c]); });
  dx.copy_(dx64.view(x.sizes()));
}

}  // namespace batch_norm
}  // namespace torch_dnn

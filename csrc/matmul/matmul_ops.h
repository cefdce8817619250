// The matmul family's ops, written once over a backend (CPU or CUDA). matmul.cpp declares the schemas; each
// backend file calls register_matmul_impls<Backend>(m) for its dispatch key. A backend provides:
//   static void gemm(const GemmArgs& a, const at::Tensor& like);   // like: any tensor on the device (guard,
//                                                                  // workspace); a.M, a.N >= 1 (K may be 0)
//   static void act_grad(const at::Tensor& g, const at::Tensor& pre, const at::Tensor& dpre,
//                        const at::Tensor& dbias /*undefined: not wanted*/, int64_t rows, int64_t cols, Act, ActParams);
//     dpre = g * act'(pre), dbias[c] = sum over rows of dpre (deterministic); g, pre, dpre contiguous [rows, cols]
//     (the activation family's bias_act backward kernels, bias absent).
// Operands reach the kernels as MatrixRefs: a 2-D view whose strides are row- or column-major (one stride 1,
// the other at least the extent) is read in place, anything else is copied to a contiguous tensor first.
#pragma once
#include <torch/library.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "activation/activation_ops.h"
#include "common/tensor_utils.h"
#include "matmul/gemm_kernels.h"

namespace torch_dnn {
namespace matmul {

// Whether a floating dtype has GEMM kernels (all four on the CPU; the CUDA launcher adds its own rule).
inline DType gemm_dtype(const at::Tensor& t) { return to_dtype(t.scalar_type()); }

// The matrix [rows, cols] formed by the last two dims of t (2-D or 3-D; dim 0 of a 3-D tensor is the batch),
// as a MatrixRef, if its strides allow reading it in place.
inline bool as_matrix(const at::Tensor& t, MatrixRef& r) {
  const int64_t d = t.dim();
  const int64_t R = t.size(d - 2), C = t.size(d - 1), sr = t.stride(d - 2), sc = t.stride(d - 1);
  const bool row = (C <= 1 || sc == 1) && (R <= 1 || sr >= C);
  const bool col = (R <= 1 || sr == 1) && (C <= 1 || sc >= R);
  if (row) {
    r.col_major = false;
    r.ld = R <= 1 ? std::max<int64_t>(C, 1) : sr;
  } else if (col) {
    r.col_major = true;
    r.ld = C <= 1 ? std::max<int64_t>(R, 1) : sc;
  } else {
    return false;
  }
  r.ptr = t.const_data_ptr();
  r.batch_stride = (d == 3 && t.size(0) > 1) ? t.stride(0) : 0;
  return true;
}

// t itself when as_matrix can read it, otherwise a contiguous copy (kept alive by the caller).
inline at::Tensor matrix_operand(const at::Tensor& t, MatrixRef& r) {
  if (as_matrix(t, r)) return t;
  at::Tensor c = t.contiguous();
  TORCH_INTERNAL_ASSERT(as_matrix(c, r));
  return c;
}

// D (and preact) are always fresh contiguous [batch, M, N] tensors.
inline GemmArgs make_args(const at::Tensor& out, int64_t batch, int64_t M, int64_t N, int64_t K, const MatrixRef& A,
                          const MatrixRef& B, bool allow_tf32) {
  GemmArgs g;
  g.dtype = gemm_dtype(out);
  g.allow_tf32 = allow_tf32;
  g.M = M;
  g.N = N;
  g.K = K;
  g.batch = batch;
  g.A = A;
  g.B = B;
  g.D = out.data_ptr();
  g.ldd = N;
  g.batch_stride_d = batch > 1 ? M * N : 0;
  return g;
}

inline void check_pair(const at::Tensor& a, const at::Tensor& b, const char* op, const char* na, const char* nb) {
  check_floating(a, op, na);
  check_floating(b, op, nb);
  check_same_dtype(a, b, op, na, nb);
  check_same_device(a, b, op, na, nb);
}

inline void check_dims(const at::Tensor& t, int64_t want, const char* op, const char* arg) {
  TORCH_CHECK(t.dim() == want, op, ": expected ", arg, " to be a ", want, "-D tensor, but got a ", t.dim(),
              "-D tensor");
}

template <class B>
at::Tensor mm(const at::Tensor& a, const at::Tensor& b, bool allow_tf32) {
  const char* op = "torch_dnn.mm";
  check_dims(a, 2, op, "self");
  check_dims(b, 2, op, "mat2");
  check_pair(a, b, op, "self", "mat2");
  TORCH_CHECK(a.size(1) == b.size(0), op, ": self and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1),
              " and ", b.size(0), "x", b.size(1), ")");
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  at::Tensor out = at::empty({M, N}, a.options());
  if (M == 0 || N == 0) return out;
  MatrixRef A, Bm;
  at::Tensor ah = matrix_operand(a, A), bh = matrix_operand(b, Bm);
  B::gemm(make_args(out, 1, M, N, K, A, Bm, allow_tf32), out);
  return out;
}

template <class B>
at::Tensor bmm(const at::Tensor& a, const at::Tensor& b, bool allow_tf32) {
  const char* op = "torch_dnn.bmm";
  check_dims(a, 3, op, "self");
  check_dims(b, 3, op, "mat2");
  check_pair(a, b, op, "self", "mat2");
  TORCH_CHECK(a.size(0) == b.size(0), op, ": expected self and mat2 to have the same batch size, but got ",
              a.size(0), " and ", b.size(0));
  TORCH_CHECK(a.size(2) == b.size(1), op, ": self and mat2 shapes cannot be multiplied (", a.size(0), "x",
              a.size(1), "x", a.size(2), " and ", b.size(0), "x", b.size(1), "x", b.size(2), ")");
  const int64_t batch = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  at::Tensor out = at::empty({batch, M, N}, a.options());
  if (batch == 0 || M == 0 || N == 0) return out;
  MatrixRef A, Bm;
  // a batch of copies (expand) keeps its stride 0: one matrix broadcast over the batch
  at::Tensor ah = matrix_operand(a, A), bh = matrix_operand(b, Bm);
  B::gemm(make_args(out, batch, M, N, K, A, Bm, allow_tf32), out);
  return out;
}

// The activation of linear_act: bias_act's names; act_a / act_b override the parameterised ones' defaults
// (leaky_relu: a = negative_slope; elu: a = alpha; softplus: a = beta, b = threshold).
inline std::pair<Act, ActParams> linear_act_kind(c10::string_view name, std::optional<double> a,
                                                 std::optional<double> b) {
  auto [k, p] = activation::bias_act_kind(name);
  if (a.has_value()) p.a = *a;
  if (b.has_value()) p.b = *b;
  return {k, p};
}

inline int64_t leading_rows(const at::Tensor& x) {
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  return m;
}

inline std::vector<int64_t> out_shape(const at::Tensor& x, int64_t N) {
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end() - 1);
  s.push_back(N);
  return s;
}

inline void check_linear(const at::Tensor& x, const at::Tensor& w, const char* op) {
  check_floating(x, op, "input");
  TORCH_CHECK(x.dim() >= 1, op, ": expected input to have at least 1 dimension, but got a 0-D tensor");
  check_dims(w, 2, op, "weight");
  check_pair(x, w, op, "input", "weight");
  TORCH_CHECK(x.size(-1) == w.size(1), op, ": input and weight.T shapes cannot be multiplied (",
              leading_rows(x), "x", x.size(-1), " and ", w.size(1), "x", w.size(0), ")");
}

inline void check_optional(const std::optional<at::Tensor>& t, const at::Tensor& x, c10::IntArrayRef shape,
                           const char* op, const char* arg) {
  if (!t.has_value() || !t->defined()) return;
  TORCH_CHECK(t->sizes() == shape, op, ": expected ", arg, " of shape ", shape, ", but got ", t->sizes());
  check_same_dtype(x, *t, op, "input", arg);
  check_same_device(x, *t, op, "input", arg);
}

inline bool has(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// x [M, K] as the A operand: x itself when 2-D (any strides as_matrix takes), else a [M, K] view or copy.
inline at::Tensor rows_of(const at::Tensor& x, int64_t M, int64_t K) {
  return x.dim() == 2 ? x : x.reshape({M, K});
}

// out = act(x @ w.T + bias) + residual (and pre = x @ w.T + bias where pre is defined), into fresh contiguous
// out / pre of x's leading shape: the body shared by linear and linear_act, after their checks.
template <class B>
void linear_into(const at::Tensor& out, const at::Tensor& pre, const at::Tensor& x, const at::Tensor& w,
                 const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& residual, Act k, ActParams p,
                 bool allow_tf32) {
  const int64_t M = leading_rows(x), K = x.size(-1), N = w.size(0);
  if (M == 0 || N == 0) return;
  MatrixRef A, Bm;
  at::Tensor xh = matrix_operand(rows_of(x, M, K), A);
  at::Tensor wh = matrix_operand(w.t(), Bm);  // [K, N]: K-contiguous for a contiguous nn.Linear weight
  GemmArgs g = make_args(out, 1, M, N, K, A, Bm, allow_tf32);
  at::Tensor bh, rh;
  if (has(bias)) {
    bh = bias->contiguous();
    g.bias = bh.const_data_ptr();
  }
  if (has(residual)) {
    rh = residual->reshape({M, N});
    if (!((N <= 1 || rh.stride(1) == 1) && (M <= 1 || rh.stride(0) >= N))) rh = rh.contiguous();
    g.residual = rh.const_data_ptr();
    g.ldr = M <= 1 ? N : rh.stride(0);
  }
  if (pre.defined()) g.preact = pre.data_ptr();
  g.act = k;
  g.act_params = p;
  B::gemm(g, out);
}

// F.linear: its own op (rather than linear_act "none") because a decode-sized call is host-bound, and three
// arguments and one result cost less to pass through the dispatcher than nine and two.
template <class B>
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& bias, bool allow_tf32) {
  const char* op = "torch_dnn.linear";
  check_linear(x, w, op);
  const int64_t N = w.size(0);
  check_optional(bias, x, {N}, op, "bias");
  at::Tensor out = at::empty(out_shape(x, N), x.options());
  linear_into<B>(out, at::Tensor(), x, w, bias, std::nullopt, Act::Identity, {}, allow_tf32);
  return out;
}

template <class B>
std::tuple<at::Tensor, at::Tensor> linear_act(const at::Tensor& x, const at::Tensor& w,
                                              const std::optional<at::Tensor>& bias, c10::string_view activation,
                                              const std::optional<at::Tensor>& residual, std::optional<double> act_a,
                                              std::optional<double> act_b, bool allow_tf32, bool save_preact) {
  const char* op = "torch_dnn.linear_act";
  check_linear(x, w, op);
  const int64_t N = w.size(0);
  const std::vector<int64_t> shape = out_shape(x, N);
  check_optional(bias, x, {N}, op, "bias");
  check_optional(residual, x, shape, op, "residual");
  const auto [k, p] = linear_act_kind(activation, act_a, act_b);
  at::Tensor out = at::empty(shape, x.options());
  const bool want_pre = save_preact && k != Act::Identity;
  at::Tensor pre = want_pre ? at::empty(shape, x.options()) : at::Tensor();
  linear_into<B>(out, pre, x, w, bias, residual, k, p, allow_tf32);
  return {out, want_pre ? pre : at::empty({0}, x.options())};
}

// d_pre = grad * act'(preact) (+ grad_preact), d_bias = column sums of d_pre, then d_input = d_pre @ weight and
// d_weight = d_pre.T @ input through the same GEMM entry points. Unwanted gradients come back as empty tensors.
template <class B>
std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_act_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& preact,
    c10::string_view activation, std::optional<double> act_a, std::optional<double> act_b,
    const std::optional<at::Tensor>& grad_preact, std::array<bool, 3> output_mask, bool allow_tf32) {
  const char* op = "torch_dnn.linear_act_backward";
  check_linear(x, w, op);
  const int64_t M = leading_rows(x), K = x.size(-1), N = w.size(0);
  const std::vector<int64_t> shape = out_shape(x, N);
  check_optional(grad, x, shape, op, "grad_output");
  check_optional(grad_preact, x, shape, op, "grad_preact");
  const auto [k, p] = linear_act_kind(activation, act_a, act_b);
  if (k != Act::Identity) {
    TORCH_CHECK(has(preact), op, ": activation '", std::string(activation),
                "' needs the pre-activation (preact), but none was given");
    check_optional(preact, x, shape, op, "preact");
  }
  const bool want_x = output_mask[0], want_w = output_mask[1], want_b = output_mask[2];
  const at::TensorOptions o = x.options();
  // PyTorch's layouts (mm's backward through addmm(bias, x, w.t())): d_input column-major for a column-major 2-D
  // input, d_weight row-major for a row-major weight and column-major otherwise; a column-major gradient is the
  // transposed product, written row-major
  const bool dx_cols = x.dim() == 2 && x.stride(0) == 1 && x.stride(1) == x.size(0);
  const bool dw_cols = !(w.stride(1) == 1 && w.stride(0) == w.size(1));
  at::Tensor dx = want_x ? (dx_cols ? at::empty({K, M}, o).t() : at::empty(x.sizes(), o)) : at::empty({0}, o);
  at::Tensor dw = want_w ? (dw_cols ? at::empty({K, N}, o).t() : at::empty({N, K}, o)) : at::empty({0}, o);
  at::Tensor db = want_b ? at::empty({N}, o) : at::empty({0}, o);
  if (M == 0 || N == 0) {  // empty reductions
    if (want_w) dw.zero_();
    if (want_b) db.zero_();
    if (want_x) dx.zero_();
    return {dx, dw, db};
  }
  at::Tensor g2 = grad.reshape({M, N});
  at::Tensor dpre;
  at::Tensor db_arg = want_b ? db : at::Tensor();
  if (k == Act::Identity && !has(grad_preact) && !want_b) {
    dpre = g2;  // read in place by the GEMMs when its strides allow
  } else {
    g2 = g2.contiguous();
    at::Tensor pre2 = k == Act::Identity ? g2 : preact->reshape({M, N}).contiguous();
    dpre = at::empty({M, N}, o);
    if (has(grad_preact)) {
      B::act_grad(g2, pre2, dpre, at::Tensor(), M, N, k, p);
      dpre.add_(grad_preact->reshape({M, N}));
      if (want_b) {  // column sums of the total (a rare path: preact's own gradient)
        at::Tensor unused = at::empty({M, N}, o);
        B::act_grad(dpre, dpre, unused, db_arg, M, N, Act::Identity, {});
      }
    } else {
      B::act_grad(g2, pre2, dpre, db_arg, M, N, k, p);
    }
  }
  if (want_x && K > 0 && dx_cols) {  // dx.T = [K, N] @ [N, M]
    MatrixRef A, Bm;
    at::Tensor dxt = dx.t();
    at::Tensor ah = matrix_operand(w.t(), A), bh = matrix_operand(dpre.t(), Bm);
    B::gemm(make_args(dxt, 1, K, M, N, A, Bm, allow_tf32), dxt);
  } else if (want_x && K > 0) {  // [M, N] @ [N, K]
    MatrixRef A, Bm;
    at::Tensor ah = matrix_operand(dpre, A), bh = matrix_operand(w, Bm);
    B::gemm(make_args(dx, 1, M, K, N, A, Bm, allow_tf32), dx);
  }
  if (want_w && K > 0 && dw_cols) {  // dw.T = [K, M] @ [M, N]
    MatrixRef A, Bm;
    at::Tensor dwt = dw.t();
    at::Tensor ah = matrix_operand(rows_of(x, M, K).t(), A), bh = matrix_operand(dpre, Bm);
    B::gemm(make_args(dwt, 1, K, N, M, A, Bm, allow_tf32), dwt);
  } else if (want_w && K > 0) {  // [N, M] @ [M, K]
    MatrixRef A, Bm;
    at::Tensor ah = matrix_operand(dpre.t(), A), bh = matrix_operand(rows_of(x, M, K), Bm);
    B::gemm(make_args(dw, 1, N, K, M, A, Bm, allow_tf32), dw);
  }
  return {dx, dw, db};
}

template <class B>
void register_matmul_impls(torch::Library& m) {
  m.impl("mm", &mm<B>);
  m.impl("bmm", &bmm<B>);
  m.impl("linear", &linear<B>);
  m.impl("linear_act", &linear_act<B>);
  m.impl("linear_act_backward", &linear_act_backward<B>);
}

}  // namespace matmul
}  // namespace torch_dnn

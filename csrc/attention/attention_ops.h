// The attention family's ops, written once over a backend (CPU or CUDA). attention.cpp declares the schemas; each
// backend file calls register_attention_impls<Backend>(m). A backend provides:
//   static std::pair<uint64_t, uint64_t> philox_seed_offset(const at::Tensor& like);  // a fresh dropout key
//   static void forward(const AttnArgs&, const at::Tensor& like);
//   static void backward(const AttnArgs&, const AttnGrads&, const at::Tensor& like);
//
// The ops take [B][H][S][D] tensors (4-D; any strides whose head dim has stride 1 are read in place, others are
// copied); GQA is implicit (Hq a multiple of Hkv). Variable lengths: cu_seqlens_q / cu_seqlens_k (int32,
// batch + 1 offsets) over packed tensors passed as [1][H][total][D] views, with the maximal lengths given.
// Outputs: out [B][Hq][Sq][Dv] laid out as [B][Sq][Hq][Dv] (as flash attention's: a multi-head attention's output
// projection reads it as [B][Sq][Hq * Dv] without a copy); lse [B][Hq][Sq] (Sq: the maximal length for variable
// lengths) float32 (float64 for float64 inputs); philox_seed_offset: int64 [2] on the CPU, the dropout key
// (seed, offset) that the backward regenerates the mask from. The gradients dq, dk, dv are laid out as out.
#pragma once
#include <ATen/Context.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/attention_kernels.h"
#include "common/tensor_utils.h"

namespace torch_dnn {
namespace attention {

using OptTensor = std::optional<at::Tensor>;
inline bool given(const OptTensor& t) { return t.has_value() && t->defined(); }

// The sizes the checks establish; B and Sq / Sk are the sequences' count and maximal lengths for variable lengths.
struct Problem {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Sk = 0, Dqk = 0, Dv = 0;
  bool varlen = false;
};

// The options forward and backward share (the schemas' scalar arguments).
struct Options {
  double dropout_p = 0.0;
  bool causal = false;
  std::optional<double> scale;
  bool bottom_right = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
};

inline void check_4d(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.dim() == 4, op, ": expected ", arg, " to be a 4-D tensor [batch, heads, length, head_dim], but got a ",
              t.dim(), "-D tensor");
}

inline void check_cu_seqlens(const at::Tensor& c, const at::Tensor& q, const char* op, const char* arg) {
  TORCH_CHECK(c.scalar_type() == at::kInt, op, ": expected ", arg, " to be an int32 tensor, but got ",
              c.scalar_type());
  check_same_device(q, c, op, "query", arg);
  TORCH_CHECK(c.dim() == 1 && c.size(0) >= 1, op, ": expected ", arg,
              " to be a 1-D tensor of batch + 1 offsets, but got shape ", c.sizes());
}

// On the CPU, the offsets themselves: nondecreasing from 0 to the packed length, no sequence longer than the maximum.
inline void check_offsets(const at::Tensor& c, int64_t total, int64_t max_len, const char* op, const char* arg) {
  if (!c.is_cpu()) return;  // reading device memory would synchronise
  const at::Tensor cc = c.contiguous();
  const int32_t* p = cc.const_data_ptr<int32_t>();
  const int64_t n = cc.numel();
  TORCH_CHECK(p[0] == 0 && p[n - 1] == total, op, ": expected ", arg, " to run from 0 to ", total, ", but got ", p[0],
              " to ", p[n - 1]);
  for (int64_t i = 0; i + 1 < n; ++i) {
    TORCH_CHECK(p[i + 1] >= p[i] && p[i + 1] - p[i] <= max_len, op, ": expected ", arg,
                " to be nondecreasing with lengths at most ", max_len, ", but sequence ", i, " has length ",
                p[i + 1] - p[i]);
  }
}

// Every check of the forward's arguments (the backward repeats them), in the order torch_dnn/ops/attention.py's
// fake kernels repeat them.
inline Problem check_problem(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const OptTensor& mask, const OptTensor& alibi, const OptTensor& cu_q,
                             const OptTensor& cu_k, const Options& o) {
  check_floating(q, op, "query");
  check_same_dtype(q, k, op, "query", "key");
  check_same_dtype(q, v, op, "query", "value");
  check_same_device(q, k, op, "query", "key");
  check_same_device(q, v, op, "query", "value");
  check_4d(q, op, "query");
  check_4d(k, op, "key");
  check_4d(v, op, "value");
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), op,
              ": expected key and value to have the batch size of query (", q.size(0), "), but got ", k.size(0),
              " and ", v.size(0));
  TORCH_CHECK(k.size(1) == v.size(1) && k.size(2) == v.size(2), op,
              ": expected key and value to have the same heads and length, but got key ", k.sizes(), " and value ",
              v.sizes());
  TORCH_CHECK(k.size(3) == q.size(3), op, ": expected key to have the head dim of query (", q.size(3), "), but got ",
              k.size(3));
  TORCH_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, op,
              ": expected the query heads (", q.size(1), ") to be a multiple of the key/value heads (", k.size(1),
              ")");
  TORCH_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0, op, ": expected dropout_p in [0, 1], but got ", o.dropout_p);
  TORCH_CHECK(o.window_left >= -1 && o.window_right >= -1, op,
              ": expected window sizes to be -1 (unbounded) or non-negative, but got (", o.window_left, ", ",
              o.window_right, ")");
  TORCH_CHECK(o.softcap >= 0.0, op, ": expected softcap to be non-negative, but got ", o.softcap);
  Problem p;
  p.Hq = q.size(1);
  p.Hkv = k.size(1);
  p.Dqk = q.size(3);
  p.Dv = v.size(3);
  TORCH_CHECK(given(cu_q) == given(cu_k), op, ": expected cu_seqlens_q and cu_seqlens_k to be given together");
  p.varlen = given(cu_q);
  if (p.varlen) {
    check_cu_seqlens(*cu_q, q, op, "cu_seqlens_q");
    check_cu_seqlens(*cu_k, q, op, "cu_seqlens_k");
    TORCH_CHECK(cu_q->size(0) == cu_k->size(0), op,
                ": expected cu_seqlens_q and cu_seqlens_k to have the same size, but got ", cu_q->size(0), " and ",
                cu_k->size(0));
    TORCH_CHECK(q.size(0) == 1, op, ": expected packed (variable-length) tensors as [1, heads, total, head_dim], but "
                "got query of batch size ", q.size(0));
    TORCH_CHECK(o.max_seqlen_q >= 0 && o.max_seqlen_k >= 0, op,
                ": expected max_seqlen_q and max_seqlen_k to be non-negative, but got ", o.max_seqlen_q, " and ",
                o.max_seqlen_k);
    TORCH_CHECK(!given(mask), op, ": attn_mask is not supported with variable lengths (cu_seqlens)");
    p.B = cu_q->size(0) - 1;
    p.Sq = o.max_seqlen_q;
    p.Sk = o.max_seqlen_k;
    check_offsets(*cu_q, q.size(2), p.Sq, op, "cu_seqlens_q");
    check_offsets(*cu_k, k.size(2), p.Sk, op, "cu_seqlens_k");
  } else {
    p.B = q.size(0);
    p.Sq = q.size(2);
    p.Sk = k.size(2);
  }
  if (given(mask)) {
    const at::Tensor& m = *mask;
    const at::ScalarType mt = m.scalar_type();
    TORCH_CHECK(mt == at::kBool || mt == q.scalar_type() || mt == at::kFloat, op,
                ": expected attn_mask to be bool, float32 or the dtype of query (", q.scalar_type(), "), but got ",
                mt);
    check_same_device(q, m, op, "query", "attn_mask");
    const std::vector<int64_t> full = {p.B, p.Hq, p.Sq, p.Sk};
    bool ok = m.dim() == 4;
    for (int64_t d = 0; ok && d < 4; ++d) ok = m.size(d) == 1 || m.size(d) == full[d];
    TORCH_CHECK(ok, op, ": expected attn_mask to be 4-D and broadcastable to ", at::IntArrayRef(full), ", but got ",
                m.sizes());
  }
  if (given(alibi)) {
    const at::Tensor& s = *alibi;
    TORCH_CHECK(s.scalar_type() == at::kFloat, op, ": expected alibi_slopes to be float32, but got ",
                s.scalar_type());
    check_same_device(q, s, op, "query", "alibi_slopes");
    TORCH_CHECK((s.dim() == 1 && s.size(0) == p.Hq) || (s.dim() == 2 && s.size(0) == p.B && s.size(1) == p.Hq), op,
                ": expected alibi_slopes of shape [", p.Hq, "] or [", p.B, ", ", p.Hq, "], but got ", s.sizes());
  }
  return p;
}

// t itself when its head dim has stride 1 (read in place through its strides), else a contiguous copy.
inline at::Tensor unit_head_dim(const at::Tensor& t) {
  return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
}

inline Operand4 operand(const at::Tensor& t) {
  return {const_cast<void*>(t.const_data_ptr()), t.stride(0), t.stride(1), t.stride(2)};
}

// [B][H][S][D] laid out as [B][S][H][D].
inline at::Tensor bshd_empty(int64_t B, int64_t H, int64_t S, int64_t D, const at::TensorOptions& o) {
  return at::empty({B, S, H, D}, o).transpose(1, 2);
}

inline at::ScalarType lse_dtype(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The AttnArgs of a checked problem (q, k, v, out with unit head-dim stride; mask, alibi, cu_seqlens as given).
inline AttnArgs make_args(const Problem& p, const Options& o, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const OptTensor& mask,
                          const at::Tensor& alibi, const OptTensor& cu_q, const OptTensor& cu_k, uint64_t seed,
                          uint64_t offset) {
  AttnArgs a;
  a.dtype = to_dtype(q.scalar_type());
  a.B = p.B;
  a.Hq = p.Hq;
  a.Hkv = p.Hkv;
  a.Sq = p.Sq;
  a.Sk = p.Sk;
  a.Dqk = p.Dqk;
  a.Dv = p.Dv;
  a.q = operand(q);
  a.k = operand(k);
  a.v = operand(v);
  a.o = operand(out);
  a.q_rows = q.size(2);
  a.k_rows = k.size(2);
  a.lse = const_cast<void*>(lse.const_data_ptr());
  a.scale = o.scale.has_value() ? *o.scale : 1.0 / std::sqrt(double(p.Dqk));
  a.causal = o.causal;
  a.bottom_right = o.bottom_right;
  a.window_left = o.window_left;
  a.window_right = o.window_right;
  a.softcap = o.softcap;
  if (given(mask)) {
    // broadcast dims as zero strides
    const at::Tensor m = mask->expand({p.B, p.Hq, p.Sq, p.Sk});
    a.mask_kind = m.scalar_type() == at::kBool ? MaskKind::Bool : MaskKind::Additive;
    a.mask = m.const_data_ptr();
    if (a.mask_kind == MaskKind::Additive) a.mask_dtype = to_dtype(m.scalar_type());
    a.mask_sb = m.stride(0);
    a.mask_sh = m.stride(1);
    a.mask_sq = m.stride(2);
    a.mask_sk = m.stride(3);
  }
  if (alibi.defined()) {
    a.alibi_slopes = alibi.const_data_ptr<float>();
    a.alibi_sb = alibi.dim() == 2 ? p.Hq : 0;
  }
  a.dropout_p = o.dropout_p;
  a.seed = seed;
  a.offset = offset;
  if (p.varlen) {
    a.cu_seqlens_q = cu_q->const_data_ptr<int32_t>();
    a.cu_seqlens_k = cu_k->const_data_ptr<int32_t>();
  }
  return a;
}

// The contiguous tensors a call's pointers refer to (cu_seqlens, alibi), kept alive for the call.
struct Held {
  OptTensor cu_q, cu_k;
  at::Tensor alibi;
  Held(const OptTensor& q, const OptTensor& k, const OptTensor& s) {
    if (given(q)) cu_q = q->contiguous();
    if (given(k)) cu_k = k->contiguous();
    if (given(s)) alibi = s->contiguous();
  }
};

template <class Bk>
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_forward(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const OptTensor& attn_mask,
    double dropout_p, bool is_causal, std::optional<double> scale, bool bottom_right, int64_t window_left,
    int64_t window_right, double softcap, const OptTensor& alibi_slopes, const OptTensor& cu_seqlens_q,
    const OptTensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool deterministic) {
  const char* op = "torch_dnn.attention_forward";
  const Options o{dropout_p, is_causal, scale, bottom_right, window_left, window_right, softcap, max_seqlen_q,
                  max_seqlen_k};
  const Problem p = check_problem(op, query, key, value, attn_mask, alibi_slopes, cu_seqlens_q, cu_seqlens_k, o);
  const at::TensorOptions opts = query.options();
  at::Tensor out = bshd_empty(query.size(0), p.Hq, query.size(2), p.Dv, opts);
  at::Tensor lse = p.varlen ? at::zeros({p.B, p.Hq, p.Sq}, opts.dtype(lse_dtype(query)))
                            : at::empty({p.B, p.Hq, p.Sq}, opts.dtype(lse_dtype(query)));
  at::Tensor rng = at::zeros({2}, at::TensorOptions().dtype(at::kLong));
  if (out.numel() == 0 && lse.numel() == 0) return {out, lse, rng};
  if (p.Sk == 0 && !p.varlen) {  // no key for any row: zeros and lse +inf, no launch
    out.zero_();
    lse.fill_(std::numeric_limits<double>::infinity());
    return {out, lse, rng};
  }
  std::pair<uint64_t, uint64_t> drop_key = {0, 0};
  if (dropout_p > 0.0) {
    drop_key = Bk::philox_seed_offset(query);
    rng.data_ptr<int64_t>()[0] = int64_t(drop_key.first);
    rng.data_ptr<int64_t>()[1] = int64_t(drop_key.second);
  }
  const at::Tensor q = unit_head_dim(query), k = unit_head_dim(key), v = unit_head_dim(value);
  const Held held(cu_seqlens_q, cu_seqlens_k, alibi_slopes);
  const AttnArgs a = make_args(p, o, q, k, v, out, lse, attn_mask, held.alibi, held.cu_q, held.cu_k, drop_key.first,
                               drop_key.second);
  Bk::forward(a, query);
  return {out, lse, rng};
}

template <class Bk>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& philox_seed_offset, const OptTensor& attn_mask,
    double dropout_p, bool is_causal, std::optional<double> scale, bool bottom_right, int64_t window_left,
    int64_t window_right, double softcap, const OptTensor& alibi_slopes, const OptTensor& cu_seqlens_q,
    const OptTensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, bool deterministic,
    bool grad_attn_mask) {
  const char* op = "torch_dnn.attention_backward";
  const Options o{dropout_p, is_causal, scale, bottom_right, window_left, window_right, softcap, max_seqlen_q,
                  max_seqlen_k};
  const Problem p = check_problem(op, query, key, value, attn_mask, alibi_slopes, cu_seqlens_q, cu_seqlens_k, o);
  const std::vector<int64_t> out_shape = {query.size(0), p.Hq, query.size(2), p.Dv};
  TORCH_CHECK(out.sizes() == at::IntArrayRef(out_shape), op, ": expected out of shape ", at::IntArrayRef(out_shape),
              ", but got ", out.sizes());
  check_same_dtype(query, out, op, "query", "out");
  check_same_device(query, out, op, "query", "out");
  check_same_shape(out, grad_out, op, "out", "grad_out");
  check_same_dtype(query, grad_out, op, "query", "grad_out");
  check_same_device(query, grad_out, op, "query", "grad_out");
  const std::vector<int64_t> lse_shape = {p.B, p.Hq, p.Sq};
  TORCH_CHECK(lse.sizes() == at::IntArrayRef(lse_shape) && lse.scalar_type() == lse_dtype(query), op,
              ": expected lse of shape ", at::IntArrayRef(lse_shape), " and dtype ", lse_dtype(query), ", but got ",
              lse.sizes(), " and ", lse.scalar_type());
  check_same_device(query, lse, op, "query", "lse");
  TORCH_CHECK(philox_seed_offset.is_cpu() && philox_seed_offset.scalar_type() == at::kLong &&
                  philox_seed_offset.numel() == 2,
              op, ": expected philox_seed_offset to be the forward's int64 [2] CPU tensor");
  TORCH_CHECK(!grad_attn_mask || (given(attn_mask) && attn_mask->is_floating_point()), op,
              ": the gradient of attn_mask needs a floating-point attn_mask");
  const at::TensorOptions opts = query.options();
  // variable lengths: packed rows past the last sequence are not written by the kernels
  auto grad_like = [&](const at::Tensor& t) {
    at::Tensor g = bshd_empty(t.size(0), t.size(1), t.size(2), t.size(3), opts);
    return p.varlen ? g.zero_() : g;
  };
  at::Tensor dq = grad_like(query), dk = grad_like(key), dv = grad_like(value);
  at::Tensor dmask_full = grad_attn_mask ? at::empty({p.B, p.Hq, p.Sq, p.Sk}, attn_mask->options())
                                         : at::Tensor();
  const bool empty = p.B * p.Hq * p.Sq == 0 || p.Sk == 0;
  if (empty) {
    dq.zero_();
    dk.zero_();
    dv.zero_();
    if (grad_attn_mask) dmask_full.zero_();
  } else {
    const at::Tensor q = unit_head_dim(query), k = unit_head_dim(key), v = unit_head_dim(value);
    const at::Tensor ou = unit_head_dim(out), go = unit_head_dim(grad_out), l = lse.contiguous();
    const Held held(cu_seqlens_q, cu_seqlens_k, alibi_slopes);
    const at::Tensor seed_offset = philox_seed_offset.contiguous();
    const int64_t* rng = seed_offset.const_data_ptr<int64_t>();
    AttnArgs a = make_args(p, o, q, k, v, ou, l, attn_mask, held.alibi, held.cu_q, held.cu_k, uint64_t(rng[0]),
                           uint64_t(rng[1]));
    a.deterministic = deterministic || at::globalContext().deterministicAlgorithms();
    AttnGrads g;
    g.dout = operand(go);
    g.dq = operand(dq);
    g.dk = operand(dk);
    g.dv = operand(dv);
    if (grad_attn_mask) {
      g.dbias = dmask_full.data_ptr();
      g.dbias_sb = dmask_full.stride(0);
      g.dbias_sh = dmask_full.stride(1);
      g.dbias_sq = dmask_full.stride(2);
    }
    Bk::backward(a, g, query);
  }
  at::Tensor dmask = at::empty({0}, opts);
  if (grad_attn_mask) {
    // the mask's gradient summed over the dims it was broadcast along
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < 4; ++d) {
      if (attn_mask->size(d) == 1 && dmask_full.size(d) != 1) dims.push_back(d);
    }
    dmask = dims.empty() ? dmask_full
                         : dmask_full.sum(dims, /*keepdim=*/true, lse_dtype(query)).to(attn_mask->scalar_type());
  }
  return {dq, dk, dv, dmask};
}

template <class Bk>
void register_attention_impls(torch::Library& m) {
  m.impl("attention_forward", &attention_forward<Bk>);
  m.impl("attention_backward", &attention_backward<Bk>);
}

}  // namespace attention
}  // namespace torch_dnn

// flash_decode written once over a backend (decode_cpu.cpp, decode_cuda.cpp): the argument checks (in the order
// torch_dnn/ops/attention.py's fake kernel repeats them), the outputs, and DecodeArgs (decode_kernels.h). A backend
// provides `static void decode(const DecodeArgs&, const at::Tensor& like)`.
#pragma once
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "attention/decode_kernels.h"
#include "common/tensor_utils.h"

namespace torch_dnn {
namespace attention {

struct DecodeProblem {
  int64_t B = 0, Sq = 0, Hq = 0, Hkv = 0, D = 0, Snew = 0;
  int64_t block_size = 0, capacity = 0;
  bool paged = false;
};

inline bool decode_given(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

inline void check_decode_4d(const at::Tensor& t, const char* op, const char* arg, const char* dims) {
  TORCH_CHECK(t.dim() == 4, op, ": expected ", arg, " to be a 4-D tensor ", dims, ", but got a ", t.dim(),
              "-D tensor");
}

inline DecodeProblem check_decode(const char* op, const at::Tensor& q, const at::Tensor& k_cache,
                                  const at::Tensor& v_cache, const at::Tensor& cache_seqlens,
                                  const std::optional<at::Tensor>& k_new, const std::optional<at::Tensor>& v_new,
                                  const std::optional<at::Tensor>& block_table) {
  check_floating(q, op, "q");
  check_same_dtype(q, k_cache, op, "q", "k_cache");
  check_same_dtype(q, v_cache, op, "q", "v_cache");
  check_same_device(q, k_cache, op, "q", "k_cache");
  check_same_device(q, v_cache, op, "q", "v_cache");
  TORCH_CHECK(cache_seqlens.scalar_type() == at::kInt, op, ": expected cache_seqlens to be an int32 tensor, but got ",
              cache_seqlens.scalar_type());
  check_same_device(q, cache_seqlens, op, "q", "cache_seqlens");
  check_decode_4d(q, op, "q", "[batch, query length, query heads, head_dim]");
  const bool paged = decode_given(block_table);
  const char* cache_dims = paged ? "[num_blocks, block_size, kv heads, head_dim] (paged)"
                                 : "[batch, max length, kv heads, head_dim]";
  check_decode_4d(k_cache, op, "k_cache", cache_dims);
  check_decode_4d(v_cache, op, "v_cache", cache_dims);
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), op, ": expected k_cache and v_cache to have the same shape, but got ",
              k_cache.sizes(), " and ", v_cache.sizes());
  DecodeProblem p;
  p.B = q.size(0);
  p.Sq = q.size(1);
  p.Hq = q.size(2);
  p.D = q.size(3);
  p.Hkv = k_cache.size(2);
  p.paged = paged;
  TORCH_CHECK(k_cache.size(3) == p.D, op, ": expected k_cache to have the head dim of q (", p.D, "), but got ",
              k_cache.size(3));
  TORCH_CHECK(p.D == 64 || p.D == 128 || p.D == 256, op, ": expected the head dim of q (q.size(3)) to be 64, 128 or ",
              "256, but got ", p.D);
  TORCH_CHECK(p.Hkv >= 1 && p.Hq % p.Hkv == 0, op, ": expected the query heads of q (", p.Hq,
              ") to be a multiple of the kv heads of k_cache (", p.Hkv, ")");
  TORCH_CHECK(cache_seqlens.dim() == 1 && cache_seqlens.size(0) == p.B, op,
              ": expected cache_seqlens to be a 1-D tensor of the batch size (", p.B, "), but got shape ",
              cache_seqlens.sizes());
  if (paged) {
    const at::Tensor& bt = *block_table;
    TORCH_CHECK(bt.scalar_type() == at::kInt, op, ": expected block_table to be an int32 tensor, but got ",
                bt.scalar_type());
    check_same_device(q, bt, op, "q", "block_table");
    TORCH_CHECK(bt.dim() == 2 && bt.size(0) == p.B, op, ": expected block_table to be a 2-D tensor [batch (", p.B,
                "), max_blocks], but got shape ", bt.sizes());
    p.block_size = k_cache.size(1);
    p.capacity = bt.size(1) * p.block_size;
  } else {
    TORCH_CHECK(k_cache.size(0) == p.B, op, ": expected k_cache to have the batch size of q (", p.B, "), but got ",
                k_cache.size(0));
    p.block_size = k_cache.size(1);
    p.capacity = k_cache.size(1);
  }
  TORCH_CHECK(decode_given(k_new) == decode_given(v_new), op, ": expected k_new and v_new to be given together");
  if (decode_given(k_new)) {
    const at::Tensor &kn = *k_new, &vn = *v_new;
    check_same_dtype(q, kn, op, "q", "k_new");
    check_same_dtype(q, vn, op, "q", "v_new");
    check_same_device(q, kn, op, "q", "k_new");
    check_same_device(q, vn, op, "q", "v_new");
    check_decode_4d(kn, op, "k_new", "[batch, new length, kv heads, head_dim]");
    check_decode_4d(vn, op, "v_new", "[batch, new length, kv heads, head_dim]");
    TORCH_CHECK(kn.sizes() == vn.sizes(), op, ": expected k_new and v_new to have the same shape, but got ",
                kn.sizes(), " and ", vn.sizes());
    TORCH_CHECK(kn.size(0) == p.B && kn.size(2) == p.Hkv && kn.size(3) == p.D, op, ": expected k_new of shape [",
                p.B, ", new length, ", p.Hkv, ", ", p.D, "], but got ", kn.sizes());
    p.Snew = kn.size(1);
  }
  return p;
}

// The values a CPU call can afford to check (on a GPU they would cost a synchronisation: the kernels clamp instead):
// every length within the capacity, every block the lengths reach a block of the cache.
inline void check_decode_values(const char* op, const DecodeProblem& p, const at::Tensor& cache_seqlens,
                                const std::optional<at::Tensor>& block_table, int64_t num_blocks) {
  if (!cache_seqlens.is_cpu()) return;
  const at::Tensor lens = cache_seqlens.contiguous();
  const int32_t* l = lens.const_data_ptr<int32_t>();
  const at::Tensor bt = p.paged ? block_table->contiguous() : at::Tensor();
  for (int64_t b = 0; b < p.B; ++b) {
    TORCH_CHECK(l[b] >= 0 && l[b] + p.Snew <= p.capacity, op, ": expected cache_seqlens[", b, "] + the new length (",
                l[b], " + ", p.Snew, ") to be within the cache's capacity (", p.capacity, " keys)");
    if (!p.paged) continue;
    const int32_t* row = bt.const_data_ptr<int32_t>() + b * bt.size(1);
    const int64_t used = (l[b] + p.Snew + p.block_size - 1) / std::max<int64_t>(p.block_size, 1);
    for (int64_t k = 0; k < used; ++k) {
      TORCH_CHECK(row[k] >= 0 && row[k] < num_blocks, op, ": expected block_table[", b, ", ", k,
                  "] to be a block of the cache (0 to ", num_blocks - 1, "), but got ", row[k]);
    }
  }
}

inline at::ScalarType decode_lse_dtype(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// t when its head dim has stride 1 and its rows are 16-byte aligned (what the CUDA kernels read), else a contiguous
// copy (a cache copied so is written back after an append).
inline at::Tensor decode_operand(const at::Tensor& t) {
  const int64_t vec = 16 / int64_t(t.element_size());
  bool ok = t.stride(3) == 1 && reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0;
  for (int64_t d = 0; ok && d < 3; ++d) ok = t.size(d) <= 1 || t.stride(d) % vec == 0;
  return ok ? t : t.clone(at::MemoryFormat::Contiguous);
}

template <class Bk>
std::tuple<at::Tensor, at::Tensor> flash_decode(const at::Tensor& q, const at::Tensor& k_cache,
                                                const at::Tensor& v_cache, const at::Tensor& cache_seqlens,
                                                const std::optional<at::Tensor>& k_new,
                                                const std::optional<at::Tensor>& v_new,
                                                const std::optional<at::Tensor>& block_table,
                                                std::optional<double> scale, bool causal) {
  const char* op = "torch_dnn.flash_decode";
  const DecodeProblem p = check_decode(op, q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table);
  check_decode_values(op, p, cache_seqlens, block_table, k_cache.size(0));
  at::Tensor out = at::empty({p.B, p.Sq, p.Hq, p.D}, q.options());
  at::Tensor lse = at::empty({p.B, p.Hq, p.Sq}, q.options().dtype(decode_lse_dtype(q)));
  if (p.B == 0 || (out.numel() == 0 && p.Snew == 0)) return {out, lse};
  const at::Tensor qq = decode_operand(q), lens = cache_seqlens.contiguous();
  const at::Tensor kc = decode_operand(k_cache), vc = decode_operand(v_cache);
  const at::Tensor kn = p.Snew > 0 ? decode_operand(*k_new) : at::Tensor();
  const at::Tensor vn = p.Snew > 0 ? decode_operand(*v_new) : at::Tensor();
  const at::Tensor bt = p.paged ? block_table->contiguous() : at::Tensor();
  DecodeArgs a;
  a.dtype = to_dtype(q.scalar_type());
  a.B = p.B;
  a.Sq = p.Sq;
  a.Hq = p.Hq;
  a.Hkv = p.Hkv;
  a.D = p.D;
  a.Snew = p.Snew;
  a.q = qq.const_data_ptr();
  a.q_sb = qq.stride(0);
  a.q_ss = qq.stride(1);
  a.q_sh = qq.stride(2);
  a.k = {kc.data_ptr(), kc.stride(0), kc.stride(1), kc.stride(2)};
  a.v = {vc.data_ptr(), vc.stride(0), vc.stride(1), vc.stride(2)};
  if (p.Snew > 0) {
    a.k_new = kn.const_data_ptr();
    a.v_new = vn.const_data_ptr();
    a.kn_sb = kn.stride(0);
    a.kn_ss = kn.stride(1);
    a.kn_sh = kn.stride(2);
    a.vn_sb = vn.stride(0);
    a.vn_ss = vn.stride(1);
    a.vn_sh = vn.stride(2);
  }
  a.cache_seqlens = lens.const_data_ptr<int32_t>();
  if (p.paged) {
    a.block_table = bt.const_data_ptr<int32_t>();
    a.bt_sb = bt.stride(0);
  }
  a.block_size = p.block_size;
  a.capacity = p.capacity;
  a.out = out.data_ptr();
  a.lse = lse.data_ptr();
  a.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(double(p.D));
  a.causal = causal;
  Bk::decode(a, q);
  if (p.Snew > 0 && !kc.is_same(k_cache)) k_cache.copy_(kc);
  if (p.Snew > 0 && !vc.is_same(v_cache)) v_cache.copy_(vc);
  return {out, lse};
}

template <class Bk>
void register_decode_impls(torch::Library& m) {
  m.impl("flash_decode", &flash_decode<Bk>);
}

}  // namespace attention
}  // namespace torch_dnn

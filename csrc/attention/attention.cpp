// Attention family: schemas, the CPU kernels' registration, and autocast (as aten::scaled_dot_product_attention:
// floating inputs, the additive mask included, cast to the autocast dtype; float64 left alone).
// torch_dnn.functional.scaled_dot_product_attention and flash_attention are views around attention_forward.
#include <ATen/core/dispatch/Dispatcher.h>

#include "attention/attention_cpu.h"
#include "attention/attention_ops.h"
#include "common/autocast.h"

TORCH_LIBRARY_FRAGMENT(torch_dnn, m) {
  // softmax(scale * q k^T (softcapped) + attn_mask + ALiBi, masked by causal / window) @ v over [B][H][S][D]
  // tensors, with dropout on the probabilities (attention_kernels.h states the problem). is_causal and the window
  // align top-left (PyTorch's is_causal) or, with bottom_right, bottom-right (flash-attn's). GQA: Hq a multiple of
  // Hkv. scale=None: 1 / sqrt(head_dim). deterministic: the backward's (also under
  // torch.use_deterministic_algorithms). Returns out, the log-sum-exp (float32; +inf where a row sees no key) and
  // the dropout key that attention_backward regenerates the mask from.
  m.def(
      "attention_forward(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, "
      "bool is_causal=False, float? scale=None, *, bool bottom_right=False, int window_left=-1, "
      "int window_right=-1, float softcap=0.0, Tensor? alibi_slopes=None, Tensor? cu_seqlens_q=None, "
      "Tensor? cu_seqlens_k=None, int max_seqlen_q=0, int max_seqlen_k=0, bool deterministic=False) "
      "-> (Tensor out, Tensor lse, Tensor philox_seed_offset)");
  // The gradients of query, key, value and (attn_mask_grad: a floating attn_mask's, reduced to its shape; an empty
  // tensor otherwise) from the forward's out, lse and dropout key; P recomputed from lse.
  m.def(
      "attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor lse, "
      "Tensor philox_seed_offset, Tensor? attn_mask, float dropout_p, bool is_causal, float? scale, "
      "bool bottom_right, int window_left, int window_right, float softcap, Tensor? alibi_slopes, "
      "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, bool deterministic, "
      "bool attn_mask_grad) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value, Tensor grad_attn_mask)");
  // Decode against a KV cache (decode_kernels.h states the problem): q [B, Sq, Hq, D]; k_cache / v_cache
  // [B, S_max, Hkv, D], or paged [num_blocks, block_size, Hkv, D] with block_table [B, max_blocks] int32;
  // cache_seqlens [B] int32. k_new / v_new [B, Snew, Hkv, D] are written into the caches at cache_seqlens[b]
  // (the caches are mutated) before attending to cache_seqlens[b] + Snew keys; causal aligns the queries to the
  // cache's end. Returns out [B, Sq, Hq, D] and lse [B, Hq, Sq] (float32; float64 for float64). Inference only
  // (decode_autograd.cpp).
  m.def(
      "flash_decode(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor cache_seqlens, Tensor? k_new=None, "
      "Tensor? v_new=None, Tensor? block_table=None, float? scale=None, bool causal=False) -> (Tensor out, "
      "Tensor lse)");
}

TORCH_LIBRARY_IMPL(torch_dnn, CPU, m) {
  torch_dnn::attention::register_attention_impls<torch_dnn::attention::CpuBackend>(m);
}

namespace torch_dnn {
namespace attention {
namespace {

using OptDouble = std::optional<double>;
using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using ForwardSig = Tensor3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptTensor&, double, bool,
                           OptDouble, bool, int64_t, int64_t, double, const OptTensor&, const OptTensor&,
                           const OptTensor&, int64_t, int64_t, bool);

// aten::scaled_dot_product_attention's policy (lower_precision_fp): query, key, value and a floating attn_mask cast
// to the autocast dtype; the ALiBi slopes stay float32 and the offsets int32.
template <c10::DeviceType D>
struct Autocast : autocast::LowerPrecision<D> {
  using autocast::LowerPrecision<D>::cast;
  using autocast::LowerPrecision<D>::exclude;

  static Tensor3 forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const OptTensor& mask,
                         double p, bool causal, OptDouble scale, bool bottom_right, int64_t wl, int64_t wr,
                         double softcap, const OptTensor& alibi, const OptTensor& cu_q, const OptTensor& cu_k,
                         int64_t max_q, int64_t max_k, bool deterministic) {
    static auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::attention_forward", "").typed<ForwardSig>();
    auto guard = exclude();
    return op.call(cast(q), cast(k), cast(v), cast(mask), p, causal, scale, bottom_right, wl, wr, softcap, alibi,
                   cu_q, cu_k, max_q, max_k, deterministic);
  }
};

}  // namespace
}  // namespace attention
}  // namespace torch_dnn

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCPU, m) {
  m.impl("attention_forward", &torch_dnn::attention::Autocast<c10::DeviceType::CPU>::forward);
}

TORCH_LIBRARY_IMPL(torch_dnn, AutocastCUDA, m) {
  m.impl("attention_forward", &torch_dnn::attention::Autocast<c10::DeviceType::CUDA>::forward);
}

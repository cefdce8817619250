"""Drop-in MultiheadAttention, TransformerEncoderLayer and TransformerEncoder, and how converted models that call
F.scaled_dot_product_attention themselves (timm's ViT, Hugging Face models with attn_implementation="sdpa")
reach torch_dnn's attention (docs/attention.md):

- AttentionRouting, a TorchFunctionMode that answers torch.nn.functional.scaled_dot_product_attention with
  torch_dnn.functional.scaled_dot_product_attention (same arguments, same semantics) and leaves every other call
  alone. torch.compile traces it (no graph break); it can be entered by hand around any code.
- convert's pass (route_attention_modules): each module of the model whose class's source calls
  scaled_dot_product_attention (or Hugging Face's attention-function table) gets a subclass whose forward runs
  inside AttentionRouting. Only those modules' forwards run under the mode: the rest of the model pays nothing.
"""
import functools
import inspect

import torch
import torch.nn.functional as TF
from torch.overrides import TorchFunctionMode

from torch_dnn import functional as F
from torch_dnn.convert import register_pass, register_swap

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "AttentionRouting", "ATTENTION"]

_TORCH_SDPA = torch._C._nn.scaled_dot_product_attention  # what F.scaled_dot_product_attention is


class AttentionRouting(TorchFunctionMode):
    """Inside it, F.scaled_dot_product_attention (and torch._C._nn's, the same function) is torch_dnn's; nested
    tensors, which torch_dnn's does not take, stay with PyTorch's."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _TORCH_SDPA and not (args and getattr(args[0], "is_nested", False)):
            return F.scaled_dot_product_attention(*args, **kwargs)
        return func(*args, **kwargs)


# Words in a module class's source that mark a call of scaled_dot_product_attention: the function itself, and
# Hugging Face's table of attention functions (ALL_ATTENTION_FUNCTIONS["sdpa"] calls it).
_SDPA_MARKERS = ("scaled_dot_product_attention", "ALL_ATTENTION_FUNCTIONS")
_ROUTED: dict = {}  # module class -> its routed subclass


def _library_class(cls) -> bool:
    """A class of PyTorch's or of torch_dnn's own layers (not routed); torch_dnn.reference's models stand for a
    user's and are."""
    m = cls.__module__
    return m.startswith("torch.") or (m.startswith("torch_dnn.") and not m.startswith("torch_dnn.reference."))


@functools.lru_cache(maxsize=None)
def _calls_sdpa(cls) -> bool:
    for c in cls.__mro__:
        if _library_class(c) or c is object:
            continue
        try:
            src = inspect.getsource(c)
        except (OSError, TypeError):
            continue
        if any(m in src for m in _SDPA_MARKERS):
            return True
    return False


def _routed_class(cls):
    """cls with its forward run inside AttentionRouting (one subclass per class, reused)."""
    if cls not in _ROUTED:
        def forward(self, *args, **kwargs):
            with AttentionRouting():
                return cls.forward(self, *args, **kwargs)

        routed = type(cls.__name__, (cls,), {"forward": forward, "__module__": __name__,
                                             "__qualname__": f"_routed.{cls.__qualname__}",
                                             "_torch_dnn_routed_from": cls})
        _ROUTED[cls] = routed
    return _ROUTED[cls]


@register_pass(opt_in=AttentionRouting)
def route_attention_modules(model, report):
    """convert's pass: the model's own modules (not torch.nn's, not torch_dnn's) that call
    F.scaled_dot_product_attention run it as torch_dnn's (their class becomes a subclass whose forward enters
    AttentionRouting; parameters, buffers, hooks and state_dict are untouched)."""
    for name, module in model.named_modules():
        t = type(module)
        if _library_class(t) or not _calls_sdpa(t):
            continue
        module.__class__ = _routed_class(t)
        report.swapped.append((name, t.__name__, "AttentionRouting"))


@register_swap(torch.nn.MultiheadAttention)
class MultiheadAttention(torch.nn.MultiheadAttention):
    """torch.nn.MultiheadAttention whose attention is torch_dnn's scaled_dot_product_attention (and projections
    torch_dnn's linear) when no weights are asked for; with need_weights=True, PyTorch's math path, which computes
    them (as PyTorch does). The steps of F.multi_head_attention_forward's need_weights=False path, never the
    native fast path (which would bypass torch_dnn)."""

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if need_weights:
            return super().forward(query, key, value, key_padding_mask, need_weights, attn_mask,
                                   average_attn_weights, is_causal)
        is_batched = TF._mha_shape_check(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        batch_first = self.batch_first and is_batched
        if not is_batched:  # a batch of one, sequence first
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        out = self._attention(query, key, value, key_padding_mask, attn_mask, is_causal, batch_first)  # [N, L, E]
        if not is_batched:
            return out[0], None
        # PyTorch returns [L, N, E] contiguous for sequence-first inputs (and a transposed view for batch-first)
        return (out if batch_first else out.transpose(0, 1).contiguous()), None

    def _attention(self, query, key, value, key_padding_mask, attn_mask, is_causal, batch_first):
        """The attention output projected, [N, L, E], from inputs [N, L, E] (batch_first) or [L, N, E]: the
        projections run in the inputs' own layout and q, k, v are head views of them, so that neither the inputs
        nor the attention output (stored [N, L, H, D]) is copied."""
        seq = 1 if batch_first else 0  # the sequence dim of query, key and value
        tgt_len, bsz, embed_dim = query.shape[seq], query.shape[1 - seq], query.shape[2]
        src_len = key.shape[seq]
        heads, head_dim = self.num_heads, self.head_dim
        key_padding_mask = TF._canonical_mask(mask=key_padding_mask, mask_name="key_padding_mask",
                                              other_type=TF._none_or_dtype(attn_mask), other_name="attn_mask",
                                              target_type=query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                               "method `generate_square_subsequent_mask` to create this mask.")
        if is_causal and key_padding_mask is None:
            attn_mask = None  # the hint says attn_mask is causal: the kernel masks it itself
        else:
            attn_mask = TF._canonical_mask(mask=attn_mask, mask_name="attn_mask", other_type=None, other_name="",
                                           target_type=query.dtype, check_other=False)
            is_causal = False
        if embed_dim != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {embed_dim}")
        if self._qkv_same_embed_dim:
            if key.shape != value.shape:
                raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
            q, k, v = self._in_projection_packed(query, key, value)
        else:
            if key.shape[:2] != value.shape[:2]:
                raise AssertionError(f"key's sequence and batch dims {key.shape[:2]} do not match value's "
                                     f"{value.shape[:2]}")
            b = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
            q = F.linear(query, self.q_proj_weight, b[0])
            k = F.linear(key, self.k_proj_weight, b[1])
            v = F.linear(value, self.v_proj_weight, b[2])
        if attn_mask is not None:
            if attn_mask.dim() == 2:
                if attn_mask.shape != (tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                                       f"{(tgt_len, src_len)}.")
                attn_mask = attn_mask.unsqueeze(0)
            elif attn_mask.dim() == 3:
                if attn_mask.shape != (bsz * heads, tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                                       f"{(bsz * heads, tgt_len, src_len)}.")
            else:
                raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
        if self.bias_k is not None and self.bias_v is not None:
            one = (bsz, 1, embed_dim) if batch_first else (1, bsz, embed_dim)
            k = torch.cat([k, self.bias_k.expand(one)], dim=seq)
            v = torch.cat([v, self.bias_v.expand(one)], dim=seq)
            if attn_mask is not None:
                attn_mask = TF.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = TF.pad(key_padding_mask, (0, 1))

        def heads_of(t):  # the projection in the inputs' layout -> [N, H, S, D] (a view)
            S = t.shape[seq]
            if batch_first:
                return t.reshape(bsz, S, heads, head_dim).transpose(1, 2)
            return t.reshape(S, bsz, heads, head_dim).permute(1, 2, 0, 3)

        q, k, v = heads_of(q), heads_of(k), heads_of(v)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros((bsz, heads, 1, head_dim))], dim=2)
            v = torch.cat([v, v.new_zeros((bsz, heads, 1, head_dim))], dim=2)
            if attn_mask is not None:
                attn_mask = TF.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = TF.pad(key_padding_mask, (0, 1))
        src_len = k.shape[2]
        if attn_mask is not None:
            # (1, L, S) or (N * H, L, S) -> broadcastable to (N, H, L, S)
            attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 else attn_mask.view(bsz, heads, -1,
                                                                                               src_len)
        if key_padding_mask is not None:
            if key_padding_mask.shape != (bsz, src_len):
                raise AssertionError(f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                                     f"{key_padding_mask.shape}")
            kpm = key_padding_mask.view(bsz, 1, 1, src_len)
            attn_mask = kpm if attn_mask is None else attn_mask + kpm
        dropout_p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)  # [N, H, L, D]
        # [N, L, E]: a view of the output's [N, L, H, D] storage
        out = out.transpose(1, 2).reshape(bsz, tgt_len, embed_dim)
        return F.linear(out, self.out_proj.weight, self.out_proj.bias)

    def _in_projection_packed(self, query, key, value):
        """F._in_projection_packed through torch_dnn's linear: one GEMM for self-attention, two when key is value."""
        w, b = self.in_proj_weight, self.in_proj_bias
        E = query.shape[-1]
        if key is value:
            if query is key:
                proj = F.linear(query, w, b)
                proj = proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2)
                return proj[0], proj[1], proj[2]
            w_q, w_kv = w.split([E, E * 2])
            b_q, b_kv = (None, None) if b is None else b.split([E, E * 2])
            kv = F.linear(key, w_kv, b_kv).unflatten(-1, (2, E)).unsqueeze(0).transpose(0, -2).squeeze(-2)
            return F.linear(query, w_q, b_q), kv[0], kv[1]
        w_q, w_k, w_v = w.chunk(3)
        b_q, b_k, b_v = (None,) * 3 if b is None else b.chunk(3)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)


@register_swap(torch.nn.TransformerEncoderLayer)
class TransformerEncoderLayer(torch.nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer without its inference fast path (torch._transformer_encoder_layer_fwd, one native
    kernel for the whole layer, which would bypass the converted attention, linear and norm modules): the fast
    path is taken only where activation_relu_or_gelu is true, and here it never is. The layer's own forward
    (its submodules, converted) runs every time."""

    @property
    def activation_relu_or_gelu(self):
        return False

    @activation_relu_or_gelu.setter
    def activation_relu_or_gelu(self, value):
        pass  # nn.TransformerEncoderLayer's __init__ / __setstate__ set it


@register_swap(torch.nn.TransformerEncoder)
class TransformerEncoder(torch.nn.TransformerEncoder):
    """nn.TransformerEncoder without its nested-tensor inference path (padded batches turned into nested tensors,
    which torch_dnn's attention does not take): use_nested_tensor reads false."""

    @property
    def use_nested_tensor(self):
        return False

    @use_nested_tensor.setter
    def use_nested_tensor(self, value):
        pass  # nn.TransformerEncoder's __init__ sets it


# What convert's include names to swap all of attention: the modules (swapped by default) and the routing of
# models' own F.scaled_dot_product_attention calls (opt-in: docs/attention.md says why).
ATTENTION = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer, torch.nn.TransformerEncoder,
             AttentionRouting)

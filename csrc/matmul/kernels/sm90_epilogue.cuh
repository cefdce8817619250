// The fused GEMM epilogue of the Hopper path, as a CUTLASS 3.x epilogue visitor tree (EVT):
//     pre = alpha * acc + bias[n]          (bias optional: a null pointer reads as 0)
//     preact = pre                         (optional store: a null pointer stores nothing)
//     D   = act(pre) + residual            (residual optional: read through the epilogue's C operand, whose
//                                           TMA load is skipped at run time when there is none)
// The activation is a run-time switch inside one node, so one kernel serves every supported activation.
// Torch-free; included by sm90_gemm.cuh and conv/conv_sm90.cu, only when the CUTLASS headers are on the include path.
#pragma once

#include "cutlass/epilogue/fusion/callbacks.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

#include "activation/activation_math.h"

namespace torch_dnn {
namespace matmul {
namespace sm90 {

using activation::Act;

// The activations the epilogue computes in-kernel; any other makes gemm_sm90_plan say no.
inline bool epilogue_act_supported(Act k) {
  return k == Act::Identity || k == Act::Relu || k == Act::Gelu || k == Act::GeluTanh || k == Act::Silu;
}

struct ActResidualArgs {
  int act = 0;  // an Act
  float a = 0.f, b = 0.f;
};

// An epilogue node's function of (pre, res) under the run-time activation p.act: the switch calls
// Fn::apply<K>(out, pre, res, a, b), with the activation K fixed at compile time in each case, so that one kernel
// serves every supported activation. Fn derives from ActSwitch<Fn>.
template <class Fn>
struct ActSwitch {
  using Arguments = ActResidualArgs;

  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& pre,
                                                     cutlass::Array<float, N> const& res, Arguments const& p) const {
    cutlass::Array<float, N> out;
    switch (static_cast<Act>(p.act)) {
      case Act::Relu: Fn::template apply<Act::Relu>(out, pre, res, p.a, p.b); break;
      case Act::Gelu: Fn::template apply<Act::Gelu>(out, pre, res, p.a, p.b); break;
      case Act::GeluTanh: Fn::template apply<Act::GeluTanh>(out, pre, res, p.a, p.b); break;
      case Act::Silu: Fn::template apply<Act::Silu>(out, pre, res, p.a, p.b); break;
      default: Fn::template apply<Act::Identity>(out, pre, res, p.a, p.b); break;
    }
    return out;
  }
};

// out = act(pre) + res, elementwise over one register fragment. FAST: the result is stored in 16 bits.
template <bool FAST>
struct ActPlusResidual {
  template <class T>
  struct Fn : ActSwitch<Fn<T>> {
    template <Act K, int N>
    CUTLASS_DEVICE static void apply(cutlass::Array<float, N>& out, cutlass::Array<float, N> const& pre,
                                     cutlass::Array<float, N> const& res, float a, float b) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N; ++i) out[i] = activation::act_forward<K, float, FAST>(pre[i], a, b) + res[i];
    }
  };
};

// The epilogue's source C (the residual), loaded only when `enabled`; reads as zeros otherwise.
template <class Element>
struct OptionalSrcFetch {
  struct SharedStorage {};
  struct Arguments {
    bool enabled = false;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE OptionalSrcFetch() {}
  CUTLASS_HOST_DEVICE OptionalSrcFetch(Params const& params, SharedStorage const&) : params(params) {}

  Params params;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return params.enabled; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return params.enabled; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class SrcTensor>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(SrcTensor const& tCrC, bool enabled) : tCrC(tCrC), enabled(enabled) {}
    SrcTensor const& tCrC;  // (CPY,CPY_M,CPY_N)
    bool enabled;

    template <typename ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<typename SrcTensor::value_type, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int) {
      using Frag = cutlass::Array<typename SrcTensor::value_type, FragmentSize>;
      if (enabled) return cute::recast<Frag>(tCrC)(epi_v);
      Frag zero;
      zero.fill(typename SrcTensor::value_type(0));
      return zero;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    return ConsumerStoreCallbacks<cute::remove_cvref_t<decltype(args.tCrC)>>(args.tCrC, params.enabled);
  }
};

// The fusion operation, so that the epilogue builder picks the aux (preact) store's smem layout and copy op.
template <class ElementOutput_, bool FAST_>
struct LinActResidualAux : cutlass::epilogue::fusion::FusionOperation {
  using ElementOutput = ElementOutput_;
  using ElementCompute = float;
  using ElementSource = ElementOutput_;
  static constexpr bool IsSourceSupported = true;
  static constexpr bool IsResidualSupported = true;
  using ElementScalar = float;
  static constexpr int AlignmentScalar = 1;
  using ElementBias = ElementOutput_;
  static constexpr int AlignmentBias = 128 / cute::sizeof_bits_v<ElementOutput_>;
  static constexpr bool IsPerColBiasSupported = true;
  static constexpr bool IsEltActSupported = true;
  using ElementAux = ElementOutput_;
  using GmemLayoutTagAux = cutlass::layout::RowMajor;
  static constexpr int AlignmentAux = 128 / cute::sizeof_bits_v<ElementOutput_>;
  static constexpr bool IsAuxOutSupported = true;
  static constexpr auto RoundStyle = cutlass::FloatRoundStyle::round_to_nearest;
  static constexpr bool FAST = FAST_;
};

template <int StagesD, class CtaTileShapeMNK, class EpilogueTile, class SmemLayoutAtom, class CopyOpR2S,
          class Element, bool FAST>
using LinActResidualAuxTree = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<ActPlusResidual<FAST>::template Fn, Element, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,  // act(pre) + res
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90AuxStore<StagesD, EpilogueTile, Element,
                                                cutlass::FloatRoundStyle::round_to_nearest,
                                                cute::Stride<int64_t, cute::_1, int64_t>, SmemLayoutAtom, CopyOpR2S,
                                                128 / cute::sizeof_bits_v<Element>>,  // preact = pre
        cutlass::epilogue::fusion::Sm90EVT<
            cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, float, float,
                                                   cutlass::FloatRoundStyle::round_to_nearest>,  // alpha*acc+bias
            cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, int64_t>>,
            cutlass::epilogue::fusion::Sm90AccFetch,
            cutlass::epilogue::fusion::Sm90RowBroadcast<0, CtaTileShapeMNK, Element, float,
                                                        cute::Stride<cute::_0, cute::_1, int64_t>,
                                                        128 / cute::sizeof_bits_v<Element>>>>,
    OptionalSrcFetch<Element>>;

// What the launcher fills in.
struct EpilogueParams {
  float alpha = 1.f;
  const void* bias = nullptr;
  void* preact = nullptr;
  int64_t ld_pre = 0, batch_stride_pre = 0;
  bool residual = false;
  ActResidualArgs act;
};

// The bias node: bias[n] broadcast down the columns of the kernel's tile, or (kPerRow, the swap-AB kernels
// that compute D^T) bias[m] broadcast along its rows.
template <class CtaTileShapeMNK, class Element, bool kPerRow>
using BiasBroadcast = cute::conditional_t<
    kPerRow,
    cutlass::epilogue::fusion::Sm90ColBroadcast<0, CtaTileShapeMNK, Element, float,
                                                cute::Stride<cute::_1, cute::_0, int64_t>,
                                                128 / cute::sizeof_bits_v<Element>>,
    cutlass::epilogue::fusion::Sm90RowBroadcast<0, CtaTileShapeMNK, Element, float,
                                                cute::Stride<cute::_0, cute::_1, int64_t>,
                                                128 / cute::sizeof_bits_v<Element>>>;

// The same epilogue without the preact store, for kernels that never save it: the aux store's smem
// (2 x the epilogue subtile) is what stands between the 128x256x64 mainloop and its 4th pipeline stage.
template <class CtaTileShapeMNK, class Element, bool FAST, bool kBiasPerRow>
using LinActResidualTree = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<ActPlusResidual<FAST>::template Fn, Element, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,  // act(pre) + res
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, float, float,
                                               cutlass::FloatRoundStyle::round_to_nearest>,  // alpha*acc+bias
        cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, int64_t>>,
        cutlass::epilogue::fusion::Sm90AccFetch, BiasBroadcast<CtaTileShapeMNK, Element, kBiasPerRow>>,
    OptionalSrcFetch<Element>>;

template <class CtaTileShapeMNK, class Element, bool FAST, bool kBiasPerRow = false>
struct LinActResidualCallbacks : LinActResidualTree<CtaTileShapeMNK, Element, FAST, kBiasPerRow> {
  using Impl = LinActResidualTree<CtaTileShapeMNK, Element, FAST, kBiasPerRow>;

  struct Arguments {
    EpilogueParams p;

    operator typename Impl::Arguments() const {
      using StrideBias = typename BiasBroadcast<CtaTileShapeMNK, Element, kBiasPerRow>::StrideMNL;
      using StrideAlpha = cute::Stride<cute::_0, cute::_0, int64_t>;
      return {
          {
              // alpha * acc + bias
              {{p.alpha}, {nullptr}, {StrideAlpha{cute::_0{}, cute::_0{}, 0}}},  // alpha
              {},                                                                // acc
              {static_cast<Element const*>(p.bias), Element(0), StrideBias{}},   // bias
              {}                                                                 // multiply_add
          },
          {p.residual},  // C = residual, loaded only when present
          p.act          // activation
      };
    }
  };

  using Impl::Impl;
};

}  // namespace sm90
}  // namespace matmul
}  // namespace torch_dnn

namespace cutlass::epilogue::fusion {

template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore, class ElementOutput,
          bool FAST, class CtaTileShapeMNK, class EpilogueTile, class SmemLayoutAtom, class CopyOpR2S>
struct FusionCallbacks<epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>,
                       torch_dnn::matmul::sm90::LinActResidualAux<ElementOutput, FAST>, CtaTileShapeMNK,
                       EpilogueTile, SmemLayoutAtom, CopyOpR2S>
    : torch_dnn::matmul::sm90::LinActResidualAuxTree<StagesD, CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom,
                                                     CopyOpR2S, ElementOutput, FAST> {
  using Impl = torch_dnn::matmul::sm90::LinActResidualAuxTree<StagesD, CtaTileShapeMNK, EpilogueTile,
                                                              SmemLayoutAtom, CopyOpR2S, ElementOutput, FAST>;
  using Operation = torch_dnn::matmul::sm90::LinActResidualAux<ElementOutput, FAST>;

  struct Arguments {
    torch_dnn::matmul::sm90::EpilogueParams p;

    operator typename Impl::Arguments() const {
      using StrideAux = cute::Stride<int64_t, cute::_1, int64_t>;
      using StrideBias = cute::Stride<cute::_0, cute::_1, int64_t>;
      using StrideAlpha = cute::Stride<cute::_0, cute::_0, int64_t>;
      StrideAux d_aux{p.ld_pre, cute::_1{}, p.batch_stride_pre};
      return {
          // act(pre) + res
          {
              // aux store of pre
              {
                  // alpha * acc + bias
                  {{p.alpha}, {nullptr}, {StrideAlpha{cute::_0{}, cute::_0{}, 0}}},    // alpha
                  {},                                                                  // acc
                  {static_cast<ElementOutput const*>(p.bias), ElementOutput(0), StrideBias{}},  // bias[n]
                  {}                                                                   // multiply_add
              },
              {static_cast<ElementOutput*>(p.preact), d_aux}  // preact (null: no store)
          },
          {p.residual},  // C = residual, loaded only when present
          p.act          // activation
      };
    }
  };

  using Impl::Impl;
};

}  // namespace cutlass::epilogue::fusion

// Weight copies kept between calls: staged ones (conv_staging.h: a weight that the tensor-core paths cannot read as
// it is, NCHW or channel counts not multiples of 8, copied into a padded channels-last buffer) and the TF32 ones of
// the Hopper path (conv_tf32.h: rounded to TF32, and for its input gradient flipped and transposed). Such a copy
// depends only on the weight's values and on the view the call passes, so it is kept, one per weight tensor and
// kind of copy, and reused
// while the weight is unchanged: the same tensor (held by a weak reference: a dead weight's entry is dropped),
// at the same version (every in-place change bumps it, the optimizer's step included), read through the same
// pointer, strides and extents, padded the same way, and on the same stream (the copy was queued there).
//
// Not kept: inference tensors (they carry no version), calls under CUDA graph capture (a replay would not restage
// a weight changed in place between replays), and everything when TORCH_DNN_CONV_WEIGHT_CACHE=0 (conv_knobs.h): the
// caller passes no owner then. A weight changed through `.data` (a separate version counter, as PyTorch's
// autocast cache also ignores) keeps its stale copy until its version or storage changes: change weights in place
// under torch.no_grad() instead, as torch.optim does.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <c10/util/intrusive_ptr.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>


namespace torch_dnn {
namespace conv {
namespace staging {

// What a kept copy is.
enum class CopyKind { Staged, Tf32, Tf32Flipped };

// The view a copy was made from, how it was padded, and what it is.
struct WeightView {
  CopyKind kind = CopyKind::Staged;
  const void* ptr = nullptr;
  int64_t stride[5] = {};
  int64_t extent[5] = {};
  int64_t n_pad = 0, c_pad = 0;
  at::ScalarType dtype = at::kFloat;
  c10::Stream stream{c10::Stream::DEFAULT, c10::Device(c10::kCPU)};

  bool operator==(const WeightView& o) const {
    for (int j = 0; j < 5; ++j)
      if (stride[j] != o.stride[j] || extent[j] != o.extent[j]) return false;
    return kind == o.kind && ptr == o.ptr && n_pad == o.n_pad && c_pad == o.c_pad && dtype == o.dtype &&
           stream == o.stream;
  }
};

class WeightCache {
 public:
  // Never destroyed: its tensors must not be freed by a static destructor after the CUDA context is gone.
  static WeightCache& instance() {
    static WeightCache* cache = new WeightCache();
    return *cache;
  }

  static bool keeps(const at::Tensor& owner) { return owner.defined() && !owner.is_inference(); }

  // The copy of `view` made from `owner` at its current version, or an undefined tensor.
  at::Tensor find(const at::Tensor& owner, const WeightView& view) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(Key(owner.unsafeGetTensorImpl(), view.kind));
    if (it != entries_.end() && !it->second.owner.expired() && it->second.version == owner._version() &&
        it->second.view == view) {
      ++hits_;
      return it->second.staged;
    }
    ++misses_;
    return at::Tensor();
  }

  // owner's kept copy of `view`, else make() (a new copy), then kept; make() alone where owner's copies are not kept.
  template <class Make>
  at::Tensor find_or_make(const at::Tensor& owner, const WeightView& view, Make&& make) {
    if (!keeps(owner)) return make();
    at::Tensor t = find(owner, view);
    if (!t.defined()) {
      t = make();
      keep(owner, view, t);
    }
    return t;
  }

  // Keeps `staged` as owner's copy of `view` (replacing its previous one of that kind) and drops the entries of dead
  // weights.
  void keep(const at::Tensor& owner, const WeightView& view, const at::Tensor& staged) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();)
      it = it->second.owner.expired() ? entries_.erase(it) : std::next(it);
    entries_.insert_or_assign(Key(owner.unsafeGetTensorImpl(), view.kind),
                              Entry{WeakImpl(owner.getIntrusivePtr()), owner._version(), view, staged});
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
    hits_ = misses_ = 0;
  }

  // (hits, misses, entries) since the last clear: what the tests observe.
  std::array<int64_t, 3> stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, misses_, int64_t(entries_.size())};
  }

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  using Key = std::pair<const c10::TensorImpl*, CopyKind>;
  struct Entry {
    // the weak reference also keeps the TensorImpl's memory from being reused, so a live key is its weight
    WeakImpl owner;
    int64_t version;
    WeightView view;
    at::Tensor staged;
  };
  std::mutex mu_;
  std::map<Key, Entry> entries_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace staging
}  // namespace conv
}  // namespace torch_dnn

// The TORCH_DNN_* tuning knobs, read from the environment at every call (so that one benchmark or test process
// can flip them between calls), in one place. Torch-free, header-only.
//
// getenv scans the whole environment; a GEMM's launcher asks for about fifteen knobs a call, which is
// microseconds of host time on a decode-sized problem. An env::Scope, opened by a launcher for the duration
// of one op call, scans the environment once for TORCH_DNN_ names and answers every lookup inside it from that
// snapshot (nearly always empty). Outside a scope, get() is getenv.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace torch_dnn {
namespace env {

constexpr const char kPrefix[] = "TORCH_DNN_";
constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;

struct Snapshot {
  static constexpr int kMax = 32;
  struct Entry {
    const char* name;  // "TORCH_DNN_...=value" in the environment
    size_t name_len;
    const char* value;
  } entries[kMax];
  int count = 0;
  bool overflow = false;  // more TORCH_DNN_ variables than kMax: lookups fall back to getenv
};

inline thread_local const Snapshot* current = nullptr;

inline const char* get(const char* name) {
  const Snapshot* s = current;
  if (s == nullptr || s->overflow) return std::getenv(name);
  const size_t len = std::strlen(name);
  for (int i = 0; i < s->count; ++i) {
    const auto& e = s->entries[i];
    if (e.name_len == len && std::memcmp(e.name, name, len) == 0) return e.value;
  }
  return nullptr;
}

// The knob's value if set and non-empty, else null.
inline const char* get_nonempty(const char* name) {
  const char* v = get(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

inline bool is(const char* name, const char* value) {
  const char* v = get(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// A two-way knob: true when `name` is `yes`, false when it is `no`, `unset` otherwise.
inline bool choice(const char* name, const char* yes, const char* no, bool unset) {
  return is(name, yes) ? true : is(name, no) ? false : unset;
}

inline int get_int(const char* name, int fallback) {
  const char* v = get_nonempty(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// Snapshot of the TORCH_DNN_ variables for the lifetime of the scope (nested scopes use the outermost one).
class Scope {
 public:
  Scope() {
    if (current != nullptr) return;
    for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
      const char* kv = *p;
      if (std::strncmp(kv, kPrefix, kPrefixLen) != 0) continue;
      const char* eq = std::strchr(kv, '=');
      if (eq == nullptr) continue;
      if (snap_.count == Snapshot::kMax) {
        snap_.overflow = true;
        break;
      }
      snap_.entries[snap_.count++] = {kv, size_t(eq - kv), eq + 1};
    }
    current = &snap_;
    owner_ = true;
  }
  ~Scope() {
    if (owner_) current = nullptr;
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Snapshot snap_;
  bool owner_ = false;
};

}  // namespace env
}  // namespace torch_dnn

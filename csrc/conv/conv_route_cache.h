// The convolution routes measured fastest under torch.backends.cudnn.benchmark, per problem signature
// (conv_autotune.h), kept for the process and, when TORCH_DNN_CONV_ROUTES_FILE names a file, in that file too: a
// process reads it at its first lookup and appends each route it measures, so that a later process (a training
// job's next run, its other ranks) skips the measurement. Torch-free.
//
// File format, one entry a line: "torch_dnn-conv-route 1 <route> <n> <n signature numbers>". Lines that do not parse
// are skipped; a signature found twice keeps its last route. The signature names the device by its kind (name and
// compute capability, conv_cuda.cpp), not its index, so that entries carry over between processes and machines of
// the same GPU.
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "conv/conv_knobs.h"

namespace torch_dnn {
namespace conv {

class RouteCache {
 public:
  static constexpr const char* kTag = "torch_dnn-conv-route";
  static constexpr int kVersion = 1;

  // The process's cache, with the file TORCH_DNN_CONV_ROUTES_FILE names at its first use (or none).
  static RouteCache& instance() {
    static RouteCache* cache = [] {
      const char* f = routes_file_knob();
      return new RouteCache(f != nullptr ? f : "");  // leaked: no destructor runs at exit
    }();
    return *cache;
  }

  // A cache backed by `path` (empty: none): its entries are read now.
  explicit RouteCache(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string tag;
      int version = 0, route = -1;
      size_t n = 0;
      if (!(ls >> tag >> version >> route >> n) || tag != kTag || version != kVersion || route < 0 || n > 4096)
        continue;
      std::vector<int64_t> sig(n);
      bool ok = true;
      for (auto& v : sig) ok = ok && static_cast<bool>(ls >> v);
      if (ok) routes_[sig] = route;
    }
  }

  // The kept route of `sig`, or -1.
  int find(const std::vector<int64_t>& sig) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = routes_.find(sig);
    return it == routes_.end() ? -1 : it->second;
  }

  // Keeps `route` for `sig`, appending it to the file (a file that cannot be written is left alone: the route is
  // still kept for this process).
  void keep(const std::vector<int64_t>& sig, int route) {
    std::lock_guard<std::mutex> lock(mu_);
    routes_[sig] = route;
    if (path_.empty()) return;
    std::ostringstream line;
    line << kTag << ' ' << kVersion << ' ' << route << ' ' << sig.size();
    for (const int64_t v : sig) line << ' ' << v;
    line << '\n';
    // one write of the whole line, appended: concurrent processes interleave whole entries
    if (FILE* f = std::fopen(path_.c_str(), "a")) {
      const std::string s = line.str();
      std::fwrite(s.data(), 1, s.size(), f);
      std::fclose(f);
    }
  }

 private:
  struct Hash {
    size_t operator()(const std::vector<int64_t>& v) const {
      size_t h = 1469598103934665603ull;
      for (const int64_t x : v) h = (h ^ std::hash<int64_t>{}(x)) * 1099511628211ull;
      return h;
    }
  };
  std::string path_;
  std::mutex mu_;
  std::unordered_map<std::vector<int64_t>, int, Hash> routes_;
};

}  // namespace conv
}  // namespace torch_dnn

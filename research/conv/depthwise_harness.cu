// The depthwise launchers of the tree (conv_direct_depthwise.cu) timed pass by pass (bf16; CUDA events over 50
// launches; bytes and GB/s of each), every pass first checked against the generic direct kernels (conv_direct.cu).
// Built by depthwise_variants.sh; args: N C H W R stride pad nhwc (R x R kernel, the same stride and padding both ways).
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <cuda_bf16.h>
#include "conv/conv_direct.cu"
#include "conv/conv_direct_depthwise.cu"

using namespace torch_dnn; using namespace torch_dnn::conv;
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)
static float bf(uint16_t b) { uint32_t w = uint32_t(b) << 16; float f; memcpy(&f, &w, 4); return f; }
static uint16_t fb(float f) { uint32_t w; memcpy(&w, &f, 4); return uint16_t((w + 0x7fff + ((w >> 16) & 1)) >> 16); }
static char* g_ws; static size_t g_off;
void* ws_get(void*, int64_t bytes) { void* p = g_ws + g_off; g_off += (size_t(bytes) + 255) / 256 * 256; return p; }
int main(int argc, char** argv) {
  int N = atoi(argv[1]), C = atoi(argv[2]), H = atoi(argv[3]), W = atoi(argv[4]), R = atoi(argv[5]);
  int st = atoi(argv[6]), pd = atoi(argv[7]), nhwc = atoi(argv[8]);
  int K = C, OH = (H + 2 * pd - R) / st + 1, OW = (W + 2 * pd - R) / st + 1;
  size_t nx = size_t(N) * C * H * W, nw = size_t(K) * R * R, ny = size_t(N) * K * OH * OW;
  std::vector<uint16_t> hx(nx), hy(ny), hw(nw);
  std::mt19937 rng(1); std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : hx) v = fb(u(rng)); for (auto& v : hy) v = fb(u(rng)); for (auto& v : hw) v = fb(u(rng));
  void *x, *y, *dy, *dx, *dx2, *w, *dw, *dw2;
  CK(cudaMalloc(&x, nx * 2)); CK(cudaMalloc(&dx, nx * 2)); CK(cudaMalloc(&dx2, nx * 2));
  CK(cudaMalloc(&y, ny * 2)); CK(cudaMalloc(&dy, ny * 2));
  CK(cudaMalloc(&w, nw * 2)); CK(cudaMalloc(&dw, nw * 2)); CK(cudaMalloc(&dw2, nw * 2));
  CK(cudaMalloc(&g_ws, size_t(1) << 30));
  CK(cudaMemcpy(x, hx.data(), nx * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dy, hy.data(), ny * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(w, hw.data(), nw * 2, cudaMemcpyHostToDevice));
  ConvArgs a; a.dtype = DType::BFloat16; auto& g = a.g;
  g.N = N; g.C = C; g.K = K; g.G = C; g.in[1] = H; g.in[2] = W; g.out[1] = OH; g.out[2] = OW; g.ker[1] = g.ker[2] = R;
  g.stride[1] = g.stride[2] = st; g.pad[1] = g.pad[2] = pd;
  a.workspace.fn = ws_get;
  auto set = [&](Operand5& o, void* p, int64_t c_, int64_t h_, int64_t w_, bool cl) {
    o.ptr = p;
    if (cl) { o.stride[0] = h_ * w_ * c_; o.stride[1] = 1; o.stride[3] = w_ * c_; o.stride[4] = c_; }
    else { o.stride[0] = c_ * h_ * w_; o.stride[1] = h_ * w_; o.stride[3] = w_; o.stride[4] = 1; }
    o.stride[2] = 0;
  };
  auto setw = [&](void* p) { set(a.w, p, 1, R, R, false); };
  // correctness of dgrad / wgrad against the generic direct kernels (a.x: dx written / x read)
  set(a.y, dy, K, OH, OW, nhwc); setw(w);
  set(a.x, dx, C, H, W, nhwc); CK(cudaMemset(dx, 0xff, nx * 2)); g_off = 0; CK(depthwise_dgrad(a, 0));
  set(a.x, dx2, C, H, W, nhwc); CK(cudaMemset(dx2, 0xff, nx * 2)); g_off = 0; CK(generic_dgrad(a, 0));
  set(a.x, x, C, H, W, nhwc);
  setw(dw); CK(cudaMemset(dw, 0xff, nw * 2)); g_off = 0; CK(depthwise_wgrad(a, 0));
  setw(dw2); CK(cudaMemset(dw2, 0xff, nw * 2)); g_off = 0; CK(generic_wgrad(a, 0));
  // forward against the generic kernels too (y written twice: depthwise into y, generic into dy2)
  void* y2; CK(cudaMalloc(&y2, ny * 2));
  set(a.x, x, C, H, W, nhwc); setw(w);
  set(a.y, y, K, OH, OW, nhwc); CK(cudaMemset(y, 0xff, ny * 2)); g_off = 0; CK(depthwise_fprop(a, 0));
  set(a.y, y2, K, OH, OW, nhwc); CK(cudaMemset(y2, 0xff, ny * 2)); g_off = 0; CK(generic_fprop(a, 0));
  set(a.y, dy, K, OH, OW, nhwc);
  CK(cudaDeviceSynchronize());
  auto diff = [&](void* p, void* q, size_t n, const char* what) {
    std::vector<uint16_t> r1(n), r2(n);
    CK(cudaMemcpy(r1.data(), p, n * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(r2.data(), q, n * 2, cudaMemcpyDeviceToHost));
    double md = 0, mx = 0; size_t bad = 0;
    for (size_t i = 0; i < n; ++i) { float s = bf(r1[i]), t = bf(r2[i]); if (!std::isfinite(s)) { ++bad; continue; } md = std::max(md, double(fabs(s - t))); mx = std::max(mx, double(fabs(t))); }
    printf("  %s vs generic: max diff %.3g (max %.3g) nonfinite %zu\n", what, md, mx, bad);
  };
  diff(y, y2, ny, "fprop"); diff(dx, dx2, nx, "dgrad"); diff(dw, dw2, nw, "wgrad");
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  const double bx = nx * 2.0, by_ = ny * 2.0;
  const char* names[3] = {"fprop", "dgrad", "wgrad"};
  const double bytes[3] = {bx + by_, bx + by_, bx + by_};
  printf("N%d C%d %dx%d k%d s%d p%d %s:", N, C, H, W, R, st, pd, nhwc ? "NHWC" : "NCHW");
  for (int pass = 0; pass < 3; ++pass) {
    auto run = [&] {
      g_off = 0;
      if (pass == 0) { set(a.x, x, C, H, W, nhwc); set(a.y, y, K, OH, OW, nhwc); setw(w); return depthwise_fprop(a, 0); }
      if (pass == 1) { set(a.x, dx, C, H, W, nhwc); set(a.y, dy, K, OH, OW, nhwc); setw(w); return depthwise_dgrad(a, 0); }
      set(a.x, x, C, H, W, nhwc); set(a.y, dy, K, OH, OW, nhwc); setw(dw); return depthwise_wgrad(a, 0);
    };
    for (int i = 0; i < 3; ++i) CK(run());
    const int it = 50;
    cudaEventRecord(e0);
    for (int i = 0; i < it; ++i) run();
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= it;
    printf(" | %s %.4f ms %.0f GB/s", names[pass], ms, bytes[pass] / ms / 1e6);
  }
  printf("\n");
}

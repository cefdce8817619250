"""What a C++ entry would save over the `torch.ops` entry: torch_dnn's relu, softmax and max_pool2d called through
(a) the functional wrapper, (b) `torch.ops.torch_dnn.<op>` (the packet), (c) its `.default` OpOverload, and pybind11
functions built here (torch.utils.cpp_extension.load_inline, full Python API, not the limited one the extension
uses) that call the dispatcher's handle of the same op: (d) typed (c10::TypedOperatorHandle::call: no schema parse,
no IValue boxing), (e) boxed from a stack of IValues built in C++, (f) generic: torch_dnn._entry's Op (the product's
entry: Python arguments converted by the op's schema, called boxed); PyTorch's own op
through its generated binding beside them. Tiny tensors, forward only, no autograd recording (torch.no_grad), CUDA
when present (launch included; queue drained around each 200-call sample), best of 15 interleaved turns; then the
same with inputs that require grad (each call records its autograd node). Needs the built extension (the handles
find torch_dnn's schemas).

    python research/host/probe_cpp_entry.py
"""
import torch
import torch.nn.functional as TF
from torch.utils.cpp_extension import load_inline

import torch_dnn  # noqa: F401  (registers torch_dnn's ops)
from torch_dnn._entry import Op  # the generic entry: csrc/python_entry/python_entry.cpp
import torch_dnn.functional as F
from probe_entry import per_call_us  # this folder's: the script's own directory is on sys.path

CPP = r"""
#include <torch/extension.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {
template <class Sig>
c10::TypedOperatorHandle<Sig> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
}  // namespace

at::Tensor relu(const at::Tensor& x) {
  static const auto op = handle<at::Tensor(const at::Tensor&)>("torch_dnn::relu");
  return op.call(x);
}
at::Tensor softmax(const at::Tensor& x, int64_t dim) {
  static const auto op = handle<at::Tensor(const at::Tensor&, int64_t, std::optional<at::ScalarType>)>(
      "torch_dnn::softmax");
  return op.call(x, dim, std::nullopt);
}
std::tuple<at::Tensor, at::Tensor> max_pool2d(const at::Tensor& x, std::vector<int64_t> k, std::vector<int64_t> s) {
  static const auto op = handle<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, c10::IntArrayRef,
                                                                   c10::IntArrayRef, c10::IntArrayRef,
                                                                   c10::IntArrayRef, bool)>("torch_dnn::max_pool2d");
  const int64_t zero[2] = {0, 0}, one[2] = {1, 1};
  return op.call(x, k, s, zero, one, false);
}

// the same ops called boxed
at::Tensor relu_boxed(const at::Tensor& x) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::relu", "");
  torch::jit::Stack st;
  st.emplace_back(x);
  op.callBoxed(st);
  return st[0].toTensor();
}
at::Tensor softmax_boxed(const at::Tensor& x, int64_t dim) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::softmax", "");
  torch::jit::Stack st;
  st.emplace_back(x);
  st.emplace_back(dim);
  st.emplace_back(c10::IValue());
  op.callBoxed(st);
  return st[0].toTensor();
}
at::Tensor max_pool2d_boxed(const at::Tensor& x, std::vector<int64_t> k, std::vector<int64_t> s) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("torch_dnn::max_pool2d", "");
  torch::jit::Stack st;
  st.emplace_back(x);
  st.emplace_back(k);
  st.emplace_back(s);
  st.emplace_back(std::vector<int64_t>{0, 0});
  st.emplace_back(std::vector<int64_t>{1, 1});
  st.emplace_back(false);
  op.callBoxed(st);
  return st[0].toTensor();
}
"""


def table(rows, sync, title):
    best = {(r, i): float("inf") for r, impls in rows.items() for i in impls}
    for _ in range(15):
        for r, impls in rows.items():
            for i, fn in impls.items():
                best[r, i] = min(best[r, i], per_call_us(fn, sync))
    print(title)
    names = list(next(iter(rows.values())))
    print("| op | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rows:
        print(f"| {r} | " + " | ".join(f"{best[r, i]:.2f}" for i in names) + " |")


def make_rows(entry, x, p):
    ops = torch.ops.torch_dnn
    g = {n: Op(f"torch_dnn::{n}") for n in ("relu", "softmax", "max_pool2d")}
    return {
        "relu": {"torch binding": lambda: torch.relu(x), "functional": lambda: F.relu(x),
                 "torch.ops packet": lambda: ops.relu(x), "OpOverload": lambda: ops.relu.default(x),
                 "C++ entry": lambda: entry.relu(x), "C++ boxed": lambda: entry.relu_boxed(x),
                 "C++ generic": lambda: g["relu"](x)},
        "softmax": {"torch binding": lambda: TF.softmax(x, -1), "functional": lambda: F.softmax(x, -1),
                    "torch.ops packet": lambda: ops.softmax(x, -1), "OpOverload": lambda: ops.softmax.default(x, -1),
                    "C++ entry": lambda: entry.softmax(x, -1), "C++ boxed": lambda: entry.softmax_boxed(x, -1),
                    "C++ generic": lambda: g["softmax"](x, -1)},
        "max_pool2d 3/2": {"torch binding": lambda: TF.max_pool2d(p, 3, 2), "functional": lambda: F.max_pool2d(p, 3, 2),
                           "torch.ops packet": lambda: ops.max_pool2d(p, [3, 3], [2, 2], [0, 0], [1, 1], False),
                           "OpOverload": lambda: ops.max_pool2d.default(p, [3, 3], [2, 2], [0, 0], [1, 1], False),
                           "C++ entry": lambda: entry.max_pool2d(p, [3, 3], [2, 2]),
                           "C++ boxed": lambda: entry.max_pool2d_boxed(p, [3, 3], [2, 2]),
                           "C++ generic": lambda: g["max_pool2d"](p, [3, 3], [2, 2], [0, 0], [1, 1], False)},
    }


def main():
    entry = load_inline("torch_dnn_probe_cpp_entry", CPP, functions=["relu", "softmax", "max_pool2d", "relu_boxed",
                                                                         "softmax_boxed", "max_pool2d_boxed"],
                        extra_cflags=["-O2"], verbose=False)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    x = torch.randn(4, 64, device=dev)
    p = torch.randn(2, 4, 8, 8, device=dev)
    rows = make_rows(entry, x, p)
    with torch.no_grad():
        for impls in rows.values():  # the same results through every entry
            outs = [f() for f in impls.values()]
            outs = [o[0] if isinstance(o, tuple) else o for o in outs]
            assert all(torch.equal(outs[1], o) for o in outs[1:])
        table(rows, sync, f"device {dev}, no autograd recording: us a call (best of 15 turns of 200 calls)")
    xg, pg = x.clone().requires_grad_(), p.clone().requires_grad_()
    table(make_rows(entry, xg, pg), sync, "inputs that require grad (each call records its node)")


if __name__ == "__main__":
    main()

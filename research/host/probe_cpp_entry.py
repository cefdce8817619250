"""What a C++ entry would save over the `torch.ops` entry: torch_dnn's relu, softmax and max_pool2d called through
(a) the functional wrapper, (b) `torch.ops.torch_dnn.<op>` (the packet), (c) its `.default` OpOverload, and pybind11
functions built here (torch.utils.cpp_extension.load_inline, full Python API, not the limited one the extension
uses) that call the dispatcher's handle of the same op: (d) typed (c10::TypedOperatorHandle::call: no schema parse,
no IValue boxing), (e) boxed from a stack of IValues built in C++, (f) generic: positional Python arguments
converted by the op's schema (plain tensors, ints, floats, bools, strings, int lists, dtypes, optionals, trailing
defaults) and called boxed, NotImplemented for anything else (the caller would take torch.ops); PyTorch's own op
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

// A generic entry: positional Python arguments converted by the op's schema (Tensor, int, float, bool, str, int[],
// ScalarType, optionals; trailing defaults), a boxed call, tensors back; NotImplemented for anything else (the
// caller would then take torch.ops). Only ops whose returns are all tensors are looked up.
static std::vector<c10::OperatorHandle> g_ops;
int64_t generic_lookup(const std::string& name) {
  const auto h = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "");
  for (const auto& r : h.schema().returns())
    if (r.type()->kind() != c10::TypeKind::TensorType) return -1;
  g_ops.push_back(h);
  return int64_t(g_ops.size()) - 1;
}
static bool to_ivalue(PyObject* o, const c10::Argument& arg, c10::IValue* out) {
  c10::TypePtr t = arg.real_type();
  if (t->kind() == c10::TypeKind::OptionalType) {
    if (o == Py_None) {
      *out = c10::IValue();
      return true;
    }
    t = t->castRaw<c10::OptionalType>()->getElementType();
  }
  switch (t->kind()) {
    case c10::TypeKind::TensorType:
      if (!THPVariable_CheckExact(o)) return false;  // plain tensors: no __torch_function__ to honour
      *out = THPVariable_Unpack(o);
      return true;
    case c10::TypeKind::IntType:
      if (!PyLong_CheckExact(o)) return false;
      *out = int64_t(PyLong_AsLongLong(o));
      return true;
    case c10::TypeKind::FloatType:
      if (PyFloat_CheckExact(o)) *out = PyFloat_AS_DOUBLE(o);
      else if (PyLong_CheckExact(o)) *out = double(PyLong_AsLongLong(o));
      else return false;
      return true;
    case c10::TypeKind::BoolType:
      if (!PyBool_Check(o)) return false;
      *out = o == Py_True;
      return true;
    case c10::TypeKind::StringType:
      if (!PyUnicode_Check(o)) return false;
      *out = std::string(PyUnicode_AsUTF8(o));
      return true;
    case c10::TypeKind::ScalarTypeType:
      if (!THPDtype_Check(o)) return false;
      *out = int64_t(reinterpret_cast<THPDtype*>(o)->scalar_type);
      return true;
    case c10::TypeKind::ListType: {
      if (t->castRaw<c10::ListType>()->getElementType()->kind() != c10::TypeKind::IntType) return false;
      std::vector<int64_t> v;
      if (PyLong_CheckExact(o) && arg.N()) {
        v.assign(size_t(*arg.N()), int64_t(PyLong_AsLongLong(o)));
      } else if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject** items = PySequence_Fast_ITEMS(o);
        v.reserve(size_t(n));
        for (Py_ssize_t i = 0; i < n; ++i) {
          if (!PyLong_CheckExact(items[i])) return false;
          v.push_back(int64_t(PyLong_AsLongLong(items[i])));
        }
      } else {
        return false;
      }
      *out = std::move(v);
      return true;
    }
    default:
      return false;
  }
}
py::object generic_call(int64_t idx, py::args args) {
  const c10::OperatorHandle& h = g_ops[size_t(idx)];
  const auto& params = h.schema().arguments();
  if (args.size() > params.size()) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  torch::jit::Stack st;
  st.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (i < args.size()) {
      c10::IValue v;
      if (!to_ivalue(args[i].ptr(), params[i], &v)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
      st.push_back(std::move(v));
    } else if (params[i].default_value()) {
      st.push_back(*params[i].default_value());
    } else {
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    }
  }
  h.callBoxed(st);
  if (st.size() == 1) return py::reinterpret_steal<py::object>(THPVariable_Wrap(st[0].toTensor()));
  py::tuple out(st.size());
  for (size_t i = 0; i < st.size(); ++i) out[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(st[i].toTensor()));
  return out;
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
    g = {n: entry.generic_lookup(f"torch_dnn::{n}") for n in ("relu", "softmax")}
    gp = entry.generic_lookup("torch_dnn::max_pool2d")
    call = entry.generic_call
    return {
        "relu": {"torch binding": lambda: torch.relu(x), "functional": lambda: F.relu(x),
                 "torch.ops packet": lambda: ops.relu(x), "OpOverload": lambda: ops.relu.default(x),
                 "C++ entry": lambda: entry.relu(x), "C++ boxed": lambda: entry.relu_boxed(x),
                 "C++ generic": lambda: call(g["relu"], x)},
        "softmax": {"torch binding": lambda: TF.softmax(x, -1), "functional": lambda: F.softmax(x, -1),
                    "torch.ops packet": lambda: ops.softmax(x, -1), "OpOverload": lambda: ops.softmax.default(x, -1),
                    "C++ entry": lambda: entry.softmax(x, -1), "C++ boxed": lambda: entry.softmax_boxed(x, -1),
                    "C++ generic": lambda: call(g["softmax"], x, -1)},
        "max_pool2d 3/2": {"torch binding": lambda: TF.max_pool2d(p, 3, 2), "functional": lambda: F.max_pool2d(p, 3, 2),
                           "torch.ops packet": lambda: ops.max_pool2d(p, [3, 3], [2, 2], [0, 0], [1, 1], False),
                           "OpOverload": lambda: ops.max_pool2d.default(p, [3, 3], [2, 2], [0, 0], [1, 1], False),
                           "C++ entry": lambda: entry.max_pool2d(p, [3, 3], [2, 2]),
                           "C++ boxed": lambda: entry.max_pool2d_boxed(p, [3, 3], [2, 2]),
                           "C++ generic": lambda: call(gp, p, [3, 3], [2, 2], [0, 0], [1, 1], False)},
    }


def main():
    entry = load_inline("torch_dnn_probe_cpp_entry", CPP, functions=["relu", "softmax", "max_pool2d", "relu_boxed",
                                                                         "softmax_boxed", "max_pool2d_boxed", "generic_lookup",
                                                                         "generic_call"],
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

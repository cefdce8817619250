// torch_dnn._entry: how the functional wrappers call an op in eager mode.
//
// An `Op` converts its Python arguments by the op's schema into a stack of IValues and calls the op boxed through
// the dispatcher: what `torch.ops.torch_dnn.<op>` does, without its Python-to-IValue machinery (which costs more
// than the call itself on small tensors: docs/host-overhead.md). Every dispatch key still applies (autograd,
// autocast, Python dispatch modes, the fake kernels), as the dispatcher applies them. What it does not convert
// returns NotImplemented, and the caller takes torch.ops, which handles everything: tensor subclasses and
// torch-function modes (which torch.ops hands to __torch_function__), lists of tensors, Python objects of other
// types (SymInts, numpy scalars), unknown keywords, missing arguments (torch.ops raises its error).
//
// torch's Python headers (python_variable.h) do not compile under Py_LIMITED_API, so this is a module apart from
// the abi3 torch_dnn._C, built for each Python version (setup.py).

#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstddef>
#include <string>
#include <vector>

namespace {

constexpr size_t kMaxArguments = 32;

struct OpObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  c10::OperatorHandle* handle;
};

PyObject* not_implemented() { Py_RETURN_NOTIMPLEMENTED; }

bool supported_type(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::ScalarTypeType:
      return true;
    case c10::TypeKind::ListType: {
      const auto element = t->castRaw<c10::ListType>()->getElementType()->kind();
      return element == c10::TypeKind::IntType || element == c10::TypeKind::SymIntType ||
             element == c10::TypeKind::BoolType;
    }
    default:
      return false;
  }
}

// An exact Python int as int64; false (no error left set) for anything else, overflow included.
bool to_int(PyObject* o, int64_t* out) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  *out = int64_t(v);
  return true;
}

// One argument by its schema type; false where torch.ops should take the call.
bool to_ivalue(PyObject* o, const c10::Argument& arg, c10::IValue* out) {
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
      // torch.Tensor or nn.Parameter: anything else may override __torch_function__
      if (!THPVariable_CheckExact(o)) return false;
      *out = THPVariable_Unpack(o);
      return true;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: {
      int64_t v;
      if (!to_int(o, &v)) return false;
      *out = v;
      return true;
    }
    case c10::TypeKind::FloatType: {
      if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return true;
      }
      int64_t v;
      if (!to_int(o, &v)) return false;
      *out = double(v);
      return true;
    }
    case c10::TypeKind::BoolType:
      if (!PyBool_Check(o)) return false;
      *out = o == Py_True;
      return true;
    case c10::TypeKind::StringType: {
      if (!PyUnicode_CheckExact(o)) return false;
      Py_ssize_t size = 0;
      const char* s = PyUnicode_AsUTF8AndSize(o, &size);
      if (s == nullptr) {
        PyErr_Clear();
        return false;
      }
      *out = std::string(s, size_t(size));
      return true;
    }
    case c10::TypeKind::ScalarTypeType:
      if (!THPDtype_Check(o)) return false;
      *out = int64_t(reinterpret_cast<THPDtype*>(o)->scalar_type);
      return true;
    case c10::TypeKind::ListType: {
      const bool bools = t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::BoolType;
      if (!bools && PyLong_CheckExact(o) && arg.N()) {  // int[2] given one int: every element that int
        int64_t v;
        if (!to_int(o, &v)) return false;
        *out = std::vector<int64_t>(size_t(*arg.N()), v);
        return true;
      }
      if (!PyList_Check(o) && !PyTuple_Check(o)) return false;  // tuples include torch.Size
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
      PyObject** items = PySequence_Fast_ITEMS(o);
      if (bools) {
        c10::List<bool> v;
        v.reserve(size_t(n));
        for (Py_ssize_t i = 0; i < n; ++i) {
          if (!PyBool_Check(items[i])) return false;
          v.push_back(items[i] == Py_True);
        }
        *out = std::move(v);
        return true;
      }
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (Py_ssize_t i = 0; i < n; ++i)
        if (!to_int(items[i], &v[size_t(i)])) return false;
      *out = std::move(v);
      return true;
    }
    default:
      return false;
  }
}

PyObject* op_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  const c10::OperatorHandle& op = *reinterpret_cast<OpObject*>(self)->handle;
  const auto& params = op.schema().arguments();
  const size_t n_params = params.size();
  const size_t n_positional = size_t(PyVectorcall_NARGS(nargsf));
  if (n_positional > n_params || at::impl::torch_function_mode_enabled()) return not_implemented();

  PyObject* given[kMaxArguments] = {};
  for (size_t i = 0; i < n_positional; ++i) {
    if (params[i].kwarg_only()) return not_implemented();
    given[i] = args[i];
  }
  const Py_ssize_t n_keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < n_keywords; ++k) {
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (name == nullptr) {
      PyErr_Clear();
      return not_implemented();
    }
    size_t i = 0;
    while (i < n_params && params[i].name() != name) ++i;
    if (i == n_params || given[i] != nullptr) return not_implemented();
    given[i] = args[n_positional + size_t(k)];
  }

  torch::jit::Stack stack;
  stack.reserve(n_params);
  for (size_t i = 0; i < n_params; ++i) {
    if (given[i] != nullptr) {
      c10::IValue v;
      if (!to_ivalue(given[i], params[i], &v)) return not_implemented();
      stack.push_back(std::move(v));
    } else if (params[i].default_value()) {
      stack.push_back(*params[i].default_value());
    } else {
      return not_implemented();
    }
  }
  {
    // as torch.ops' call: kernels that need Python (fake kernels, Python dispatch modes) take the GIL back
    pybind11::gil_scoped_release no_gil;
    op.callBoxed(stack);
  }
  if (stack.empty()) Py_RETURN_NONE;
  if (stack.size() == 1) return THPVariable_Wrap(std::move(stack[0]).toTensor());
  PyObject* out = PyTuple_New(Py_ssize_t(stack.size()));
  if (out == nullptr) return nullptr;
  for (size_t i = 0; i < stack.size(); ++i) {
    PyObject* t = THPVariable_Wrap(std::move(stack[i]).toTensor());
    if (t == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, Py_ssize_t(i), t);
  }
  return out;
  END_HANDLE_TH_ERRORS
}

// Op("torch_dnn::relu"): the op's default overload. TypeError where the op is not one this entry calls (an argument
// type it does not convert, a return that is not a tensor); ValueError where no such op is registered. Ops that
// write to an argument are called as any other: the dispatcher's ADInplaceOrView key bumps its version counter.
PyObject* op_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  HANDLE_TH_ERRORS
  const char* name = nullptr;
  static const char* keywords[] = {"name", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s", const_cast<char**>(keywords), &name)) return nullptr;
  const auto found = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!found) {
    PyErr_Format(PyExc_ValueError, "torch_dnn._entry.Op: no op %s is registered", name);
    return nullptr;
  }
  const c10::FunctionSchema& schema = found->schema();
  if (schema.arguments().size() > kMaxArguments) {
    PyErr_Format(PyExc_TypeError, "torch_dnn._entry.Op: %s has more than %d arguments", name, int(kMaxArguments));
    return nullptr;
  }
  for (const auto& a : schema.arguments()) {
    if (!supported_type(a.real_type())) {
      PyErr_Format(PyExc_TypeError, "torch_dnn._entry.Op: %s: argument '%s' is not one this entry calls with", name,
                   a.name().c_str());
      return nullptr;
    }
  }
  for (const auto& r : schema.returns()) {
    if (r.real_type()->kind() != c10::TypeKind::TensorType) {
      PyErr_Format(PyExc_TypeError, "torch_dnn._entry.Op: %s returns something other than tensors", name);
      return nullptr;
    }
  }
  PyObject* self = type->tp_alloc(type, 0);
  if (self == nullptr) return nullptr;
  auto* op = reinterpret_cast<OpObject*>(self);
  op->vectorcall = op_call;
  op->handle = new c10::OperatorHandle(*found);
  return self;
  END_HANDLE_TH_ERRORS
}

void op_dealloc(PyObject* self) {
  delete reinterpret_cast<OpObject*>(self)->handle;
  Py_TYPE(self)->tp_free(self);
}

PyObject* op_repr(PyObject* self) {
  const auto* handle = reinterpret_cast<OpObject*>(self)->handle;
  return PyUnicode_FromFormat("torch_dnn._entry.Op(%s)", handle == nullptr ? "?" : handle->schema().name().c_str());
}

PyTypeObject OpType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* torch_version(PyObject*, PyObject*) { return PyUnicode_FromString(TORCH_DNN_BUILT_WITH_TORCH); }

PyMethodDef methods[] = {
    {"torch_version", torch_version, METH_NOARGS, "The torch version this module was built against."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_entry",
                      "The functional wrappers' entry into torch_dnn's ops in eager calls (python_entry.cpp).", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__entry() {
  OpType.tp_name = "torch_dnn._entry.Op";
  OpType.tp_basicsize = sizeof(OpObject);
  OpType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  OpType.tp_vectorcall_offset = offsetof(OpObject, vectorcall);
  OpType.tp_call = PyVectorcall_Call;
  OpType.tp_new = op_new;
  OpType.tp_dealloc = op_dealloc;
  OpType.tp_repr = op_repr;
  OpType.tp_doc = "Op(name): the op's default overload, called from Python by its schema (python_entry.cpp).";
  if (PyType_Ready(&OpType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  Py_INCREF(&OpType);
  if (PyModule_AddObject(m, "Op", reinterpret_cast<PyObject*>(&OpType)) < 0) {
    Py_DECREF(&OpType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

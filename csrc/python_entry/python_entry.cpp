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
// A call allocates little besides the op's own work (host time: the boxed path's allocations were a fifth of a
// small pooling call): each argument's kind is read from the schema once, at construction; int lists are reused
// while their values repeat (each argument keeps its last one); the stack keeps its capacity between calls.
//
// torch's Python headers (python_variable.h) do not compile under Py_LIMITED_API, so this is a module apart from
// the abi3 torch_dnn._C, built for each Python version (setup.py).

#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

constexpr size_t kMaxArguments = 32;
// int lists up to this length are converted through the argument's cache (below); longer ones are built each call
constexpr size_t kMaxCachedList = 8;

// What an argument converts from, decided once from its schema type (Op's constructor).
enum class Kind : uint8_t { Tensor, Int, Float, Bool, String, ScalarType, IntList, BoolList };

struct Param {
  Kind kind = Kind::Tensor;
  bool optional = false;
  bool kwarg_only = false;
  int64_t fixed_size = 0;     // int[N]: N (one int given stands for N of it); 0: no size
  PyObject* name = nullptr;   // interned: keywords match by identity first
  // The int list last converted for this argument and its values: a call with the same values pushes this IValue
  // (a reference, as the schema's default lists are pushed) instead of allocating a new list. The ops read their
  // list arguments and never write to them.
  c10::IValue cached_list;
  int64_t cached_values[kMaxCachedList] = {};
  size_t cached_size = 0;
  bool cached = false;
};

struct OpObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  c10::OperatorHandle* handle;
  Param* params;
  size_t n_params;
  // the stack of a call, kept with its capacity for the next call; `stack_busy` while a call (with the GIL
  // released) uses it: a call meanwhile, from another thread or from inside the op, takes a stack of its own
  torch::jit::Stack* stack;
  bool stack_busy;
};

PyObject* not_implemented() { Py_RETURN_NOTIMPLEMENTED; }

// The argument's Kind; false for a type this entry does not convert.
bool kind_of(const c10::TypePtr& type, Param* p) {
  const c10::Type* t = type.get();
  if (t->kind() == c10::TypeKind::OptionalType) {
    p->optional = true;
    t = t->castRaw<c10::OptionalType>()->getElementType().get();
  }
  switch (t->kind()) {
    case c10::TypeKind::TensorType: p->kind = Kind::Tensor; return true;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: p->kind = Kind::Int; return true;
    case c10::TypeKind::FloatType: p->kind = Kind::Float; return true;
    case c10::TypeKind::BoolType: p->kind = Kind::Bool; return true;
    case c10::TypeKind::StringType: p->kind = Kind::String; return true;
    case c10::TypeKind::ScalarTypeType: p->kind = Kind::ScalarType; return true;
    case c10::TypeKind::ListType: {
      const auto element = t->castRaw<c10::ListType>()->getElementType()->kind();
      if (element == c10::TypeKind::BoolType) {
        p->kind = Kind::BoolList;
        return true;
      }
      p->kind = Kind::IntList;
      return element == c10::TypeKind::IntType || element == c10::TypeKind::SymIntType;
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

// An int list argument (a list or tuple of ints, or for int[N] one int); false where torch.ops should take the call.
bool to_int_list(PyObject* o, Param& p, c10::IValue* out) {
  int64_t one = 0;
  const bool single = p.fixed_size != 0 && PyLong_CheckExact(o);  // int[2] given one int: every element that int
  if (single) {
    if (!to_int(o, &one)) return false;
  } else if (!PyList_Check(o) && !PyTuple_Check(o)) {  // tuples include torch.Size
    return false;
  }
  const size_t n = single ? size_t(p.fixed_size) : size_t(PySequence_Fast_GET_SIZE(o));
  PyObject** items = single ? nullptr : PySequence_Fast_ITEMS(o);
  if (n > kMaxCachedList) {
    c10::List<int64_t> v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t e = one;
      if (!single && !to_int(items[i], &e)) return false;
      v.push_back(e);
    }
    *out = std::move(v);
    return true;
  }
  int64_t values[kMaxCachedList];
  for (size_t i = 0; i < n; ++i) {
    values[i] = one;
    if (!single && !to_int(items[i], &values[i])) return false;
  }
  bool same = p.cached && p.cached_size == n;
  for (size_t i = 0; same && i < n; ++i) same = values[i] == p.cached_values[i];
  if (!same) {
    c10::List<int64_t> v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i) v.push_back(values[i]);
    p.cached_list = std::move(v);
    std::copy(values, values + n, p.cached_values);
    p.cached_size = n;
    p.cached = true;
  }
  *out = p.cached_list;
  return true;
}

// One argument by its Kind; false where torch.ops should take the call.
bool to_ivalue(PyObject* o, Param& p, c10::IValue* out) {
  if (p.optional && o == Py_None) {
    *out = c10::IValue();
    return true;
  }
  switch (p.kind) {
    case Kind::Tensor:
      // torch.Tensor or nn.Parameter: anything else may override __torch_function__
      if (!THPVariable_CheckExact(o)) return false;
      *out = THPVariable_Unpack(o);
      return true;
    case Kind::Int: {
      int64_t v;
      if (!to_int(o, &v)) return false;
      *out = v;
      return true;
    }
    case Kind::Float: {
      if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return true;
      }
      int64_t v;
      if (!to_int(o, &v)) return false;
      *out = double(v);
      return true;
    }
    case Kind::Bool:
      if (!PyBool_Check(o)) return false;
      *out = o == Py_True;
      return true;
    case Kind::String: {
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
    case Kind::ScalarType:
      if (!THPDtype_Check(o)) return false;
      *out = int64_t(reinterpret_cast<THPDtype*>(o)->scalar_type);
      return true;
    case Kind::IntList:
      return to_int_list(o, p, out);
    case Kind::BoolList: {
      if (!PyList_Check(o) && !PyTuple_Check(o)) return false;
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
      PyObject** items = PySequence_Fast_ITEMS(o);
      c10::List<bool> v;
      v.reserve(size_t(n));
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!PyBool_Check(items[i])) return false;
        v.push_back(items[i] == Py_True);
      }
      *out = std::move(v);
      return true;
    }
  }
  return false;
}

// The index of the parameter a keyword names; n_params where none does.
size_t keyword_index(const Param* params, size_t n_params, PyObject* keyword) {
  for (size_t i = 0; i < n_params; ++i)
    if (params[i].name == keyword) return i;
  for (size_t i = 0; i < n_params; ++i) {  // a keyword string that is not the interned one
    const int cmp = PyUnicode_Compare(params[i].name, keyword);
    if (cmp == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return n_params;
    }
    if (cmp == 0) return i;
  }
  return n_params;
}

// The Op's kept stack for one call (or a fresh one where it is in use), cleared and released at the end.
class CallStack {
 public:
  explicit CallStack(OpObject* op) : op_(op), kept_(!op->stack_busy) {
    if (kept_) op_->stack_busy = true;
  }
  ~CallStack() {
    if (!kept_) return;
    op_->stack->clear();
    op_->stack_busy = false;
  }
  torch::jit::Stack& get() { return kept_ ? *op_->stack : own_; }

 private:
  OpObject* op_;
  bool kept_;
  torch::jit::Stack own_;
};

PyObject* op_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  auto* object = reinterpret_cast<OpObject*>(self);
  Param* params = object->params;
  const size_t n_params = object->n_params;
  const size_t n_positional = size_t(PyVectorcall_NARGS(nargsf));
  if (n_positional > n_params || at::impl::torch_function_mode_enabled()) return not_implemented();

  PyObject* given[kMaxArguments];
  std::fill_n(given, n_params, nullptr);
  for (size_t i = 0; i < n_positional; ++i) {
    if (params[i].kwarg_only) return not_implemented();
    given[i] = args[i];
  }
  const Py_ssize_t n_keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < n_keywords; ++k) {
    const size_t i = keyword_index(params, n_params, PyTuple_GET_ITEM(kwnames, k));
    if (i == n_params || given[i] != nullptr) return not_implemented();
    given[i] = args[n_positional + size_t(k)];
  }

  const c10::OperatorHandle& op = *object->handle;
  CallStack call(object);
  torch::jit::Stack& stack = call.get();
  stack.reserve(n_params);
  for (size_t i = 0; i < n_params; ++i) {
    if (given[i] != nullptr) {
      c10::IValue v;
      if (!to_ivalue(given[i], params[i], &v)) return not_implemented();
      stack.push_back(std::move(v));
    } else if (const auto& d = op.schema().arguments()[i].default_value()) {
      stack.push_back(*d);
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
    Param p;
    if (!kind_of(a.real_type(), &p)) {
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
  op->n_params = schema.arguments().size();
  op->params = new Param[op->n_params];
  op->stack = new torch::jit::Stack();
  op->stack_busy = false;
  for (size_t i = 0; i < op->n_params; ++i) {
    const c10::Argument& a = schema.arguments()[i];
    Param& p = op->params[i];
    kind_of(a.real_type(), &p);  // checked above
    p.kwarg_only = a.kwarg_only();
    p.fixed_size = a.N() ? *a.N() : 0;
    p.name = PyUnicode_InternFromString(a.name().c_str());
    if (p.name == nullptr) {
      Py_DECREF(self);
      return nullptr;
    }
  }
  return self;
  END_HANDLE_TH_ERRORS
}

void op_dealloc(PyObject* self) {
  auto* op = reinterpret_cast<OpObject*>(self);
  for (size_t i = 0; op->params != nullptr && i < op->n_params; ++i) Py_XDECREF(op->params[i].name);
  delete[] op->params;
  delete op->stack;
  delete op->handle;
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

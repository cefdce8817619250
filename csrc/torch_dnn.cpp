// The Python module torch_dnn._C. Importing it runs the static TORCH_LIBRARY registrations of every family;
// its one function reports how it was built.
#include <Python.h>

#ifndef TORCH_DNN_BUILT_WITH_TORCH
#define TORCH_DNN_BUILT_WITH_TORCH "unknown"
#endif
#ifndef TORCH_DNN_CUDA_ARCHS
#define TORCH_DNN_CUDA_ARCHS ""
#endif

namespace {

PyObject* build_info(PyObject*, PyObject*) {
#ifdef TORCH_DNN_WITH_CUDA
  const char* with_cuda = "1";
#else
  const char* with_cuda = "0";
#endif
  return Py_BuildValue("{s:s,s:s,s:s}", "torch", TORCH_DNN_BUILT_WITH_TORCH, "with_cuda", with_cuda, "cuda_archs",
                       TORCH_DNN_CUDA_ARCHS);
}

PyMethodDef methods[] = {
    {"build_info", build_info, METH_NOARGS, "How this extension was built: torch version, CUDA, archs."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "torch_dnn kernels (ops live in torch.ops.torch_dnn)", -1, methods};

}  // namespace

extern "C" PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module_def); }

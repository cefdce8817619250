"""Build torch_dnn._C and torch_dnn._entry.

_C holds every op: a CUDAExtension when the installed torch has CUDA and nvcc is found, otherwise a CppExtension with the CPU
kernels only. Honours TORCH_CUDA_ARCH_LIST (default "8.0;9.0a" when no GPU is visible), MAX_JOBS and
TORCH_DNN_DEVICE_CODE=ptx (PTX only, no SASS: what CI builds). It is built against Python's limited API
(abi3). _entry (csrc/python_entry/) is the functional wrappers' C++ way into the ops, one source built against the
full Python API (torch's Python headers need it), so for this Python version only; torch_dnn runs without it.
"""
import glob
import os
import shutil
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _find_cuda_home():
    """CUDA_HOME as torch would find it, except that an nvcc wrapper script on PATH does not fool us."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for c in candidates:
        if c and os.path.exists(os.path.join(c, "bin", "nvcc")) and os.path.exists(
            os.path.join(c, "include", "cuda_runtime.h")
        ):
            return c
    return None


def _cutlass_include_dir():
    """CUTLASS/CuTe headers of the nvidia-cutlass wheel (cutlass_library/source/include), found without importing
    the package; None when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        d = os.path.join(base, "source", "include")
        if os.path.exists(os.path.join(d, "cutlass", "cutlass.h")) and os.path.exists(os.path.join(d, "cute", "tensor.hpp")):
            return d
    return None


def _pip_nvidia_include_dirs():
    """Library headers (cusparse.h, cublas_v2.h ...) that a slim toolkit lacks live in the pip nvidia packages,
    found as Python finds them (a virtual environment may see them in the system's site-packages)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    bases = sorted(set(spec.submodule_search_locations or [])) if spec else []
    dirs = [d for b in bases for d in sorted(glob.glob(os.path.join(b, "cu*", "include")))]
    if not dirs:  # older layout: one package per library
        dirs = [d for b in bases for d in sorted(glob.glob(os.path.join(b, "*", "include")))]
    return [d for d in dirs if os.path.isdir(d)]


cuda_home = _find_cuda_home()
if cuda_home:
    os.environ["CUDA_HOME"] = cuda_home  # must be set before cpp_extension is imported

import torch  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, include_paths  # noqa: E402

with_cuda = torch.version.cuda is not None and cuda_home is not None and os.environ.get("TORCH_DNN_CPU_ONLY") != "1"
if with_cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
    os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0a"

# Launchers (*_cuda.cpp, compiled by g++ with torch headers) and kernels (*.cu, nvcc, torch-free) go only
# into a CUDA build; everything else is common.
PYTHON_ENTRY = ["csrc/python_entry/python_entry.cpp"]
all_cpp = [f for f in sorted(glob.glob("csrc/**/*.cpp", recursive=True)) if f not in PYTHON_ENTRY]
cuda_launchers = [f for f in all_cpp if f.endswith("_cuda.cpp")]
cuda_kernels = sorted(glob.glob("csrc/**/*.cu", recursive=True))
# The Hopper GEMM (CUTLASS 3.x kernels) is built only when the CUTLASS headers are installed; the matmul
# launcher then calls it (#ifdef TORCH_DNN_WITH_SM90_GEMM), else it uses the portable kernels alone.
SM90_GEMM = ["csrc/matmul/gemm_sm90.cu", "csrc/matmul/gemm_sm90_skinny.cu"]
cutlass_include = _cutlass_include_dir()
if cutlass_include is None:
    cuda_kernels = [f for f in cuda_kernels if f not in SM90_GEMM]
sources = [f for f in all_cpp if f not in cuda_launchers]
# Two sources with one stem in one folder (x.cpp and x.cu) would build the same x.o: ninja refuses.
_stems = [os.path.splitext(f)[0] for f in all_cpp + cuda_kernels]
_clash = sorted({s for s in _stems if _stems.count(s) > 1})
if _clash:
    sys.exit(f"torch_dnn setup.py: sources that would build the same object file: {_clash}; rename one of each")

# -fopenmp: the CPU kernels split their work with at::parallel_for, which is an OpenMP region in torch's builds;
# compiled without it the region is a plain serial loop. The runtime is the libgomp.so.1 that torch already loads.
# -fno-trapping-math: the CPU kernels' ternaries and selects (activation, softmax) vectorise only when GCC may assume
# that no float operation traps; no value changes, only floating-point exception flags could. It is set for every
# source because the precompiled torch headers (below) must be compiled with the flags of the sources that use them.
# -Wno-stringop-overflow: g++ 12 reports a false one inside c10::IValue's destructor (torch headers) where the
# autocast kernels pass optional<double> arguments to the dispatcher (conv_fused.cpp, matmul.cpp).
cxx_flags = ["-O3", "-std=c++20", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
             "-Wno-stringop-overflow", "-fno-trapping-math", "-fopenmp"]
# torch's headers as system headers (GCC then ignores torch's own -I for them): their warnings are torch's, and g++
# 12 loses their `#pragma GCC diagnostic` silencing when they come from a precompiled header. They leave the
# dependency files; another torch changes TORCH_DNN_BUILT_WITH_TORCH, and with it every command ninja compares.
for _d in include_paths():
    cxx_flags += ["-isystem", _d]
link_flags = ["-fopenmp"]
define_macros = [("TORCH_DNN_BUILT_WITH_TORCH", f'"{torch.__version__}"')]
include_dirs = [os.path.join(ROOT, "csrc")]
nvcc_flags = ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "-lineinfo", "-Xcompiler=-Wall"]

if with_cuda:
    sources += cuda_launchers + cuda_kernels
    define_macros.append(("TORCH_DNN_WITH_CUDA", "1"))
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ")
    define_macros.append(("TORCH_DNN_CUDA_ARCHS", f'"{archs}"'))
    if os.environ.get("TORCH_DNN_DEVICE_CODE") == "ptx":
        # PTX only, no SASS: every CUDA source still goes through nvcc's front end and optimiser, only ptxas is
        # skipped (about a third of the CUDA compile time); the driver assembles the PTX when a GPU loads it. CI
        # builds this way (.ci/run): it has no GPU and 2 cores. An explicit -gencode makes torch add none of its own.
        for a in archs.split():
            cc = a.replace("+PTX", "").replace(".", "")
            nvcc_flags.append(f"-gencode=arch=compute_{cc},code=compute_{cc}")
    include_dirs += _pip_nvidia_include_dirs()
    if cutlass_include is not None:
        define_macros.append(("TORCH_DNN_WITH_SM90_GEMM", "1"))
        # -isystem: CUTLASS's own headers stay out of our -Wall; only nvcc compiles them (gemm_sm90*.cu)
        nvcc_flags += ["-isystem", cutlass_include]
    ext = CUDAExtension(
        "torch_dnn._C",
        sources,
        include_dirs=include_dirs,
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        extra_link_args=link_flags,
        py_limited_api=True,
    )
else:
    ext = CppExtension(
        "torch_dnn._C",
        sources,
        include_dirs=include_dirs,
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_flags,
        py_limited_api=True,
    )

# No OpenMP and no precompiled header (one source: the header would cost more than it saves, and it is compiled
# without Py_LIMITED_API, so _C's header would not fit it).
entry_ext = CppExtension(
    "torch_dnn._entry",
    PYTHON_ENTRY,
    define_macros=define_macros[:1],
    extra_compile_args={"cxx": [f for f in cxx_flags if f != "-fopenmp"]},
)

if os.environ.get("TORCH_DNN_PRINT_FLAGS"):  # for scripts/compile_one.py: the flags, then stop
    import json

    print(json.dumps({"cxx": cxx_flags, "nvcc": nvcc_flags, "defines": define_macros, "includes": include_dirs,
                      "cuda_home": cuda_home}))
    sys.exit(0)

print(
    f"torch_dnn: building {'CUDA' if with_cuda else 'CPU-only'} extension against torch {torch.__version__}"
    + (f", CUDA_HOME={cuda_home}, TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST')}" if with_cuda else ""),
    file=sys.stderr,
)

class KeptBuildExtension(BuildExtension.with_options(use_ninja=True)):
    """Objects go to one kept folder (build/temp.<platform>), also under `pip install -e .`, whose editable build
    would compile into a throwaway folder: a second install (the README's test command after the main job) then
    finds every object current in ninja's incremental build and only links."""

    def finalize_options(self):
        super().finalize_options()
        from sysconfig import get_platform

        tag = f"temp.{get_platform()}-{sys.implementation.cache_tag}"
        self.build_temp = os.path.join(ROOT, "build", tag)

    def build_extension(self, ext):
        if ext is entry_ext:
            # its own folder: ninja's log of one folder keeps only the outputs of the last build.ninja it ran, so
            # two extensions sharing one would rebuild each other's objects
            kept, self.build_temp = self.build_temp, os.path.join(self.build_temp, "python_entry")
            try:
                return super().build_extension(ext)
            finally:
                self.build_temp = kept
        # torch's BuildExtension has replaced self.compiler.compile by its ninja writer; wrap it so that the C++
        # sources get the precompiled torch headers with exactly the flags ninja will compile them with.
        ninja_compile = self.compiler.compile

        def compile_with_pch(sources, output_dir=None, macros=None, include_dirs=None, debug=0, extra_preargs=None,
                             extra_postargs=None, depends=None):
            pch = _precompile_torch_headers(self.compiler, output_dir, macros, include_dirs, debug, extra_preargs,
                                            extra_postargs, depends)
            if pch is not None:
                extra_postargs = dict(extra_postargs, cxx=[*extra_postargs["cxx"], "-Winvalid-pch", "-include", pch])
            return ninja_compile(sources, output_dir, macros, include_dirs, debug, extra_preargs, extra_postargs,
                                 depends)

        self.compiler.compile = compile_with_pch
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = ninja_compile


def _precompile_torch_headers(compiler, output_dir, macros, include_dirs, debug, extra_preargs, extra_postargs,
                              depends):
    """Precompiles csrc/common/precompiled_torch.h with the C++ sources' flags (as torch's ninja writer forms them)
    into <build>/pch/<hash>/, the hash over the header, the command and the torch version: when any of them changes
    the -include path changes, and with it every source's command, so ninja rebuilds them all (the headers inside a
    PCH are not in the sources' dependency files). Returns the header path to -include, or None (the sources then
    compile without it) where the header does not precompile; a compiler that rejects the result reads the header
    itself (-Winvalid-pch says so)."""
    import hashlib
    import subprocess

    from torch.utils.cpp_extension import get_cxx_compiler

    if not isinstance(extra_postargs, dict) or sys.platform == "win32":
        return None
    output_dir = os.path.abspath(output_dir)
    _, _, _, pp_opts, _ = compiler._setup_compile(output_dir, macros, include_dirs, [], depends, extra_postargs)
    flags = [*compiler.compiler_so[1:], *compiler._get_cc_args(pp_opts, debug, extra_preargs), *extra_postargs["cxx"]]
    with open(os.path.join(ROOT, "csrc", "common", "precompiled_torch.h")) as f:
        text = f.read()
    cxx = get_cxx_compiler()
    key = hashlib.sha1("\0".join([text, cxx, torch.__version__, *flags]).encode()).hexdigest()[:16]
    pch_root = os.path.join(output_dir, "pch")
    folder = os.path.join(pch_root, key)
    header = os.path.join(folder, "precompiled_torch.h")
    if os.path.exists(header + ".gch"):
        return header
    shutil.rmtree(pch_root, ignore_errors=True)  # older ones: 0.4 GB each
    os.makedirs(folder)
    with open(header, "w") as f:
        f.write(text)
    partial = header + ".gch.partial"
    cmd = [cxx, *flags, "-x", "c++-header", header, "-o", partial]
    print("torch_dnn setup.py: precompiling the torch headers:", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"torch_dnn setup.py: the torch headers did not precompile; compiling without them:\n{r.stderr[-2000:]}")
        return None
    os.replace(partial, header + ".gch")
    return header


setup(
    name="torch_dnn",
    version="0.1.0",
    description="cuDNN-class deep-learning primitives as a PyTorch operator plugin",
    packages=find_packages(include=["torch_dnn", "torch_dnn.*"]),
    ext_modules=[ext, entry_ext],
    cmdclass={"build_ext": KeptBuildExtension},
    python_requires=">=3.9",
    install_requires=["torch"],
)

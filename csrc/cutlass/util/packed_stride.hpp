// CUTLASS's conv collectives (cutlass/conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp) include
// "cutlass/util/packed_stride.hpp", which the nvidia-cutlass wheel ships under source/tools/util/include rather
// than under source/include, the one CUTLASS folder on the build's include path (setup.py). csrc/ is searched
// first, so this forwards to the wheel's header through the include path's own folder: <...>/source/include/../
// tools/util/include/. (Adding that folder to setup.py's nvcc flags would recompile every .cu of the build.)
#pragma once
#if __has_include("../tools/util/include/cutlass/util/packed_stride.hpp")
#include "../tools/util/include/cutlass/util/packed_stride.hpp"
#else
#error "torch_dnn: CUTLASS's tools/util/include/cutlass/util/packed_stride.hpp was not found next to its include folder"
#endif

// The torch headers that nearly every host source includes. setup.py precompiles them once a build and puts them
// ahead of every C++ source (-include): reading them was most of a host source's compile time. Sources still
// include what they use; include guards make the second inclusion free. (No #pragma once: GCC warns of it in the
// file it precompiles.)

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

"""The file of convolution routes measured under torch.backends.cudnn.benchmark (csrc/conv/conv_route_cache.h,
TORCH_DNN_CONV_ROUTES_FILE): one process appends the routes it measures, a later one reads them before its first
lookup. Exercised through a small C++ program (the cache is torch-free), run twice on one file, as two processes of a
training job would; the GPU side (measuring, the device kind in the signature) is test_conv_staging's."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include "conv/conv_route_cache.h"
using torch_dnn::conv::RouteCache;
int main(int argc, char** argv) {
  RouteCache cache(argv[1]);
  const std::vector<int64_t> a{1, 2, 3, -4}, b{7, 8}, c{9};
  if (std::strcmp(argv[2], "write") == 0) {
    if (cache.find(a) != -1) return 1;
    cache.keep(a, 2);
    cache.keep(b, 0);
    cache.keep(b, 3);  // a later measurement replaces the earlier one
    std::printf("%d %d %d\n", cache.find(a), cache.find(b), cache.find(c));
  } else {
    std::printf("%d %d %d\n", cache.find(a), cache.find(b), cache.find(c));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("routes")
    src, exe = d / "routes.cpp", d / "routes"
    src.write_text(PROGRAM)
    try:
        subprocess.run(["g++", "-std=c++17", "-O0", f"-I{ROOT}/csrc", str(src), "-o", str(exe)], check=True)
    except FileNotFoundError:
        pytest.skip("g++ is not installed")
    return str(exe)


def run(program, path, mode):
    r = subprocess.run([program, path, mode], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(v) for v in r.stdout.split()]


def test_routes_carry_over_to_a_later_process(program, tmp_path):
    path = str(tmp_path / "routes.txt")
    assert run(program, path, "write") == [2, 3, -1]
    assert run(program, path, "read") == [2, 3, -1]
    lines = open(path).read().splitlines()
    assert lines[0] == "torch_dnn-conv-route 1 2 4 1 2 3 -4" and len(lines) == 3


def test_unreadable_lines_are_skipped(program, tmp_path):
    path = tmp_path / "routes.txt"
    path.write_text("garbage\n"
                    "torch_dnn-conv-route 2 1 4 1 2 3 -4\n"    # another version
                    "torch_dnn-conv-route 1 1 4 1 2 3\n"       # cut short
                    "torch_dnn-conv-route 1 1 2 7 8\n")
    assert run(program, str(path), "read") == [-1, 1, -1]


def test_a_file_that_cannot_be_written_only_loses_the_file(program, tmp_path):
    path = str(tmp_path / "no_such_dir" / "routes.txt")
    assert run(program, path, "write") == [2, 3, -1]
    assert not os.path.exists(path)

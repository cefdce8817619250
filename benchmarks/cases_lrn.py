"""Benchmark cases of the lrn family: local_response_norm(5) forward on 64x96x55x55 bf16 (AlexNet's first LRN),
against eager and torch.compile of the same function. Bytes are the minimum traffic: the input read once, the
output written once. Its row shares the results table of group_norm's instance_norm case (group
"instance_norm / lrn"): both are judged against the copy ceiling."""
import math

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, rand_cuda


def _lrn_case(dtype):
    shape = (64, 96, 55, 55)
    es = torch.empty((), dtype=dtype).element_size()

    def lrn(x):
        return TF.local_response_norm(x, 5, 1e-4, 0.75, 2.0)

    return Case("lrn", "local_response_norm(5) fwd 64x96x55x55 NCHW bf16",
                lambda: (rand_cuda(shape, dtype, "NCHW"),),
                {"torch_dnn": lambda x: F.local_response_norm(x, 5, 1e-4, 0.75, 2.0), "eager": lrn,
                 "compile": torch.compile(lrn, dynamic=False)},
                bytes=2 * math.prod(shape) * es, target=">=80% copy", group="instance_norm / lrn")


def cases(quick: bool = False):
    return [_lrn_case(torch.bfloat16)]

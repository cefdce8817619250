import pytest
import torch

import torch_dnn  # noqa: F401  (loads the extension once for every test)
from torch_dnn.testing import no_tf32
# a parametrised test whose every case skipped itself fails (the hooks are found here by name)
from tests.ran_nothing import pytest_collection_finish, pytest_runtest_makereport  # noqa: F401


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_tf32():
    # References and PyTorch's own results are computed without TF32, so the error rule judges against full
    # float32 (torch_dnn/testing.py).
    with no_tf32():
        yield

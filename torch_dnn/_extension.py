"""Loading torch_dnn._C, with a clear message when it is missing or was built for another torch."""
import importlib

import torch

_BUILD_HINT = "Build it from the repository root with: pip install --no-build-isolation -e ."


def load_extension():
    try:
        ext = importlib.import_module("torch_dnn._C")
    except ImportError as e:
        raise ImportError(
            f"torch_dnn: the compiled extension torch_dnn._C is missing or failed to load ({e}). "
            f"It must be built against the installed torch {torch.__version__}. {_BUILD_HINT}"
        ) from e
    built = ext.build_info()["torch"]
    if built != torch.__version__:
        raise ImportError(
            f"torch_dnn: torch_dnn._C was built against torch {built}, but torch {torch.__version__} is installed. "
            f"Rebuild the extension. {_BUILD_HINT}"
        )
    return ext


def build_info() -> dict:
    """How the extension was built: the torch it was built against, CUDA on/off, the CUDA archs."""
    ext = importlib.import_module("torch_dnn._C")
    info = dict(ext.build_info())
    info["with_cuda"] = info["with_cuda"] == "1"
    return info

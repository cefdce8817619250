"""What every family's ops module shares: the family table and the in-place-with-autograd rule."""
import torch

# family name -> list of public op names (torch.ops.torch_dnn.<name>), filled by each family module.
FAMILIES: dict = {}


def add_family(name: str, op_names) -> None:
    FAMILIES[name] = list(op_names)


def needs_autograd(*tensors) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def apply_inplace(functional_op, inplace_op, input, *args):
    """Run the in-place op, or, where autograd must record the op, the functional op written back into input.

    Mutating custom ops cannot carry an autograd formula; writing the differentiable result back with copy_
    gives the same values, the same aliasing and the same autograd errors as PyTorch's in-place ops (a leaf
    that requires grad cannot be modified in place). The functional op runs on a copy because its backward
    reads the input, which the write-back overwrites.
    """
    if needs_autograd(input):
        return input.copy_(functional_op(input.clone(), *args))
    inplace_op(input, *args)
    return input

"""What every family's ops module shares: the family table, the ops handle of the functional wrappers (`ops`,
which skips the Python autograd layer when no gradient is needed) and the in-place-with-autograd rule."""
import torch
import torch.autograd.forward_ad as _forward_ad

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


def _any_requires_grad_py(*args, **kwargs) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values()))


# torch's own check (C++; tensors in lists count too), as its Python autograd kernel uses it
_any_requires_grad = getattr(torch._C, "_any_requires_grad", _any_requires_grad_py)


class _FunctionalOps:
    """torch.ops.torch_dnn as the functional wrappers call it: the same ops, except that a call that records no
    autograd graph (grad mode off, or no tensor argument requires grad) dispatches below the Autograd key.

    Why: each op's autograd formula is registered from Python (torch.library.register_autograd), so even a call
    that needs no gradient goes C++ -> Python (autograd_impl) -> C++ again: about 5-10 us of host time per call,
    which is the whole budget of a decode-sized GEMM or a small pooling kernel. Below the Autograd key the op's
    result is the same (it would not have required grad anyway). Not taken for ops that mutate an argument (the
    autograd layer bumps their version counters), under forward-mode AD, or while torch.compile traces (the
    plain op is what it should see)."""

    def __getattr__(self, name):
        packet = getattr(torch.ops.torch_dnn, name)
        if any(a.alias_info is not None and a.alias_info.is_write
               for ov in packet.overloads() for a in getattr(packet, ov)._schema.arguments):
            fn = packet
        else:
            # one overload per op: calling it skips the packet's overload resolution, and calling its C++ callable
            # (OpOverload._op) skips OpOverload.__call__'s Python frame (host time)
            overload = packet.default if packet.overloads() == ["default"] else packet
            overload = getattr(overload, "_op", overload)

            def fn(*args, **kwargs):
                # is_compiling first: dynamo folds it to True and never traces the C++ checks after it
                if (torch.compiler.is_compiling() or _forward_ad._current_level >= 0
                        or (torch.is_grad_enabled() and _any_requires_grad(*args, **kwargs))):
                    return packet(*args, **kwargs)
                with _below_autograd():
                    return overload(*args, **kwargs)
            fn.__name__ = fn.__qualname__ = name
        self.__dict__[name] = fn  # resolved once per name
        return fn


_below_autograd = torch._C._AutoDispatchBelowAutograd
ops = _FunctionalOps()

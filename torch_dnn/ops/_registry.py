"""What every family's ops module shares: the family table, the ops handle of the functional wrappers (`ops`,
which skips the Python autograd layer when no gradient is needed) and the in-place-with-autograd rule."""
import os

import torch
import torch.autograd.forward_ad as _forward_ad
from torch.utils._python_dispatch import _get_current_dispatch_mode as _get_dispatch_mode

# family name -> list of public op names (torch.ops.torch_dnn.<name>), filled by each family module.
FAMILIES: dict = {}


def add_family(name: str, op_names) -> None:
    """Records the family's ops and resolves each in `ops` now: a first lookup (_FunctionalOps.__getattr__) that
    came inside torch.compile's tracing would break the graph (Dynamo cannot trace it), e.g. a model compiled
    before any eager call."""
    FAMILIES[name] = list(op_names)
    for op_name in op_names:
        getattr(ops, op_name)


def needs_autograd(*tensors) -> bool:
    # a plain loop: no generator object per call (host time), and torch.compile traces it
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


def apply_inplace(functional_op, inplace_op, input, *args):
    """Run the in-place op, or, where its C++ autograd kernel cannot record it, the functional op written back into
    input.

    A non-leaf, non-view input under plain eager autograd (autocast included: the activations have no autocast rule)
    is modified by the in-place op itself, whose Autograd-key kernel (autograd_register.h:
    register_in_place_autograd) records a node saving the result, or a copy of the input where the derivative
    cannot be read from the result, as PyTorch's in-place ops do. Otherwise (a leaf or a view that requires grad,
    torch.compile's tracing, torch.func transforms, subclasses) the functional op runs on a copy and its result is
    written back with copy_: the same values, aliasing and autograd errors as PyTorch's in-place ops (a leaf that
    requires grad cannot be modified in place); the copy because the functional op's backward reads the input, which
    the write-back overwrites.
    """
    if needs_autograd(input):
        if not input.is_leaf and input._base is None and _plain_call((input, *args), {}, autocast_ok=True):
            inplace_op(input, *args)
            return input
        return input.copy_(functional_op(input.clone(), *args))
    inplace_op(input, *args)
    return input


def _any_requires_grad_py(*args, **kwargs) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values()))


# torch's own check (C++; tensors in lists count too), as its Python autograd kernel uses it
_any_requires_grad = getattr(torch._C, "_any_requires_grad", _any_requires_grad_py)


# op name -> (backward, setup_context, cpp_kernel): the formulas given to register_autograd, for the transform Functions
_FORMULAS: dict = {}


def register_autograd(qualname: str, backward, setup_context, cpp_kernel: bool = False) -> None:
    """torch.library.register_autograd, and the formula kept for the functional wrappers' fast path.

    cpp_kernel: the family registers this op's autograd in C++ (the same formula: csrc/<family>/*_autograd.cpp or
    common/autograd_register.cpp), which takes every call that reaches the Autograd key; the formula here is then
    kept only for torch.func's transforms (_transform_function)."""
    if not cpp_kernel:
        torch.library.register_autograd(qualname, backward, setup_context=setup_context)
    _FORMULAS[qualname.split("::")[1]] = (backward, setup_context, cpp_kernel)


# op names whose formula register_single_input_formula derived from the C++ spec (tests: none is hand-written)
_DERIVED_FROM_SPEC: set = set()


def register_single_input_formula(name: str) -> None:
    """register_autograd (cpp_kernel=True) for an op of one differentiable input whose C++ autograd kernel was
    registered with a SingleInputSpec (csrc/common/autograd_register.h), with the formula derived from that spec,
    read through torch.ops.torch_dnn._single_input_autograd_spec: setup_context saves the tensors the spec names
    (the input, the first or the second output), the forward's first n_args arguments after the input (every one for
    -1; keyword-only ones included, in schema order) and, where the spec says so, the input's dtype; backward calls
    <name>_backward(grad of the first output, saved..., those arguments), the backward schema's keyword-only
    arguments by name, and gives no gradient to the other arguments. One place for the formula: the C++ spec."""
    saved, n_args, input_dtype = torch.ops.torch_dnn._single_input_autograd_spec(name)
    forward_schema = getattr(torch.ops.torch_dnn, name).default._schema
    backward_schema = getattr(torch.ops.torch_dnn, f"{name}_backward").default._schema
    kw_names = [a.name for a in forward_schema.arguments if a.kwarg_only]
    n_forward_args = len(forward_schema.arguments) - 1
    n_passed = (n_forward_args if n_args < 0 else n_args) + bool(input_dtype)
    backward_args = backward_schema.arguments[1 + len(saved):]
    if len(backward_args) != n_passed:
        raise RuntimeError(f"torch_dnn: {name}: its single-input autograd spec passes {n_passed} arguments after the "
                           f"saved tensors, {backward_schema.name} takes {len(backward_args)}")
    n_positional = sum(not a.kwarg_only for a in backward_args)
    backward_kw = [a.name for a in backward_args if a.kwarg_only]
    picks = [("output", int(s[-1])) if s.startswith("output") else ("input", 0) for s in saved]
    backward_op = getattr(ops, f"{name}_backward")

    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        outputs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*(outputs[i] if kind == "output" else inputs[0] for kind, i in picks))
        args = [*inputs[1:], *(keyword_only_inputs[k] for k in kw_names)]
        if n_args >= 0:
            args = args[:n_args]
        if input_dtype:
            args.append(inputs[0].dtype)
        ctx.backward_args, ctx.n_inputs = args, len(inputs)

    def backward(ctx, grad, *_grads_of_other_outputs):  # max pooling's indices: not differentiable
        args = ctx.backward_args
        dx = backward_op(grad, *ctx.saved_tensors, *args[:n_positional], **dict(zip(backward_kw, args[n_positional:])))
        return (dx,) + (None,) * (ctx.n_inputs - 1)

    register_autograd(f"torch_dnn::{name}", backward, setup_context, cpp_kernel=True)
    _DERIVED_FROM_SPEC.add(name)


# torch.compiler.is_compiling itself, bound once: Dynamo folds the same function (a call of it while tracing reads
# True), and an eager call skips two attribute lookups (host time of every functional call)
_is_compiling = torch.compiler.is_compiling
_is_any_autocast_enabled = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: True)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_torch_function_mode_enabled = torch._C._is_torch_function_mode_enabled
_dispatch_stack_len = torch._C._len_torch_dispatch_stack  # what _get_dispatch_mode() reads: > 0 when a mode is on


def _transform_function(packet, schema, backward, setup_context):
    """The op with its registered formula as an autograd.Function of the form torch.func's transforms take (forward
    without ctx, setup_context, a generated vmap rule) behind a binder of the op's arguments (defaults filled in,
    keyword-only ones passed as one dict), or None where the schema does not allow it (tensors inside a list are
    invisible to autograd.Function). Its forward calls the op through the dispatcher (`packet`): under a transform
    it runs one level down, where the op's own kernels (and, for vmap, the batching fallback) take it. The ops' own
    autograd kernels (C++, or torch.library's from Python) are refused by torch.func.grad, vjp, jacrev and vmap."""
    if any(str(a.type).startswith("List[") and "Tensor" in str(a.type) for a in (*schema.arguments, *schema.returns)):
        return None
    positional = [a for a in schema.arguments if not a.kwarg_only]
    names = [a.name for a in positional]
    missing = object()
    defaults = [a.default_value if a.has_default_value() else missing for a in positional]
    kw_defaults = {a.name: a.default_value for a in schema.arguments if a.kwarg_only and a.has_default_value()}
    has_kw = any(a.kwarg_only for a in schema.arguments)

    def setup(ctx, inputs, output):  # inputs: the positional arguments, then the keyword-only dict
        if has_kw:
            setup_context(ctx=ctx, inputs=inputs[:-1], keyword_only_inputs=inputs[-1], output=output)
        else:
            setup_context(ctx=ctx, inputs=inputs[:-1], output=output)

    def backward_(ctx, *grads):
        needs = ctx.needs_input_grad
        ctx.needs_input_grad = needs[:-1]
        try:
            result = backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = needs
        return (*result, None) if isinstance(result, tuple) else (result, None)

    def forward(*args):
        return packet(*args[:-1], **args[-1])

    name = schema.name.split("::")[-1]
    transform = type(f"Transform_{name}", (torch.autograd.Function,),
                     {"forward": staticmethod(forward), "setup_context": staticmethod(setup),
                      "backward": staticmethod(backward_), "generate_vmap_rule": True})

    def apply(*args, **kwargs):
        full = list(args)
        for i in range(len(args), len(names)):
            v = kwargs.pop(names[i], defaults[i])
            if v is missing:
                raise TypeError(f"{schema.name}: missing argument '{names[i]}'")
            full.append(v)
        kw = dict(kw_defaults)
        kw.update(kwargs)
        return transform.apply(*full, kw)

    return apply


def _transform_call() -> bool:
    """A torch.func transform is active and nothing else would act on the call first (as _plain_call)."""
    if _is_compiling() or _forward_ad._current_level >= 0 or not _functorch_active():
        return False
    return not (_is_any_autocast_enabled() or torch._C._is_torch_function_mode_enabled()
                or _get_dispatch_mode() is not None)


def _plain_call(args, kwargs, autocast_ok=False) -> bool:
    """Not traced by torch.compile, no forward-mode AD, autocast (unless autocast_ok: an op without an autocast
    rule), functorch transform, Python dispatch or function mode, and only plain tensors: the call would reach the
    Autograd key unchanged, so a Function applied from Python gives what the dispatcher would."""
    if _is_compiling() or _forward_ad._current_level >= 0:
        return False
    if not autocast_ok and _is_any_autocast_enabled():
        return False
    if _functorch_active() or _torch_function_mode_enabled() or _dispatch_stack_len() > 0:
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and type(a) not in _PLAIN_TENSORS:
            return False
    for a in kwargs.values():
        if isinstance(a, torch.Tensor) and type(a) not in _PLAIN_TENSORS:
            return False
    return True


class _FunctionalOps:
    """torch.ops.torch_dnn as the functional wrappers call it: the same ops, called in eager mode through
    torch_dnn._entry (C++: arguments converted by the op's schema, a boxed call through the dispatcher; what it does
    not convert, such as tensor subclasses or torch-function modes, it hands back and the overload's C++ callable
    takes), except that a call under a torch.func transform applies the op's formula as
    the transform Function (_transform_function), or, recording no graph, dispatches below the Autograd key (the
    ops' own autograd kernels are refused by the transforms).

    Every op's autograd kernel is C++ (cpp_kernel=True in register_autograd: none goes C++ -> Python -> C++), and
    each calls the kernels below it directly when the call records no graph (grad mode off, or no tensor argument
    requiring grad): that costs less host time than a Python-side switch below the Autograd key, which eager calls
    therefore do not make. Ops that mutate an argument go through every key (the autograd layer bumps their version
    counters); under forward-mode AD, or while torch.compile traces, the packet is called (the plain op is what they
    should see)."""

    def __getattr__(self, name):
        packet = getattr(torch.ops.torch_dnn, name)
        if any(a.alias_info is not None and a.alias_info.is_write
               for ov in packet.overloads() for a in getattr(packet, ov)._schema.arguments):
            # through every dispatch key (the autograd layer bumps the version counters), by the overload's C++
            # callable in eager (host time), the packet while torch.compile traces
            op_fast = getattr(packet.default, "_op", packet) if packet.overloads() == ["default"] else packet
            entry = _python_entry(packet)
            if entry is None:
                def fn(*args, **kwargs):
                    if _is_compiling():
                        return packet(*args, **kwargs)
                    return op_fast(*args, **kwargs)
            else:
                def fn(*args, **kwargs):
                    if _is_compiling():
                        return packet(*args, **kwargs)
                    out = entry(*args, **kwargs)  # NotImplemented: a call only torch.ops converts
                    return op_fast(*args, **kwargs) if out is NotImplemented else out
            fn.__name__ = fn.__qualname__ = name
        else:
            # one overload per op: calling it skips the packet's overload resolution, and calling its C++ callable
            # (OpOverload._op) skips OpOverload.__call__'s Python frame (host time)
            overload = packet.default if packet.overloads() == ["default"] else packet
            overload = getattr(overload, "_op", overload)

            formula = _FORMULAS.get(name)
            transform = None
            if formula is not None and packet.overloads() == ["default"]:
                transform = _transform_function(packet.default, packet.default._schema, *formula[:2])

            def transformed(args, kwargs):
                # under a torch.func transform
                if torch.is_grad_enabled() and _any_requires_grad(*args, **kwargs):
                    if transform is not None and _transform_call():
                        return transform(*args, **kwargs)
                else:
                    with _below_autograd():
                        return overload(*args, **kwargs)
                return overload(*args, **kwargs)

            entry = _python_entry(packet)
            if entry is None:
                def fn(*args, **kwargs):
                    # is_compiling first: dynamo folds it to True and never traces the C++ checks after it
                    if _is_compiling() or _forward_ad._current_level >= 0:
                        return packet(*args, **kwargs)
                    # _functorch_active (C++): false in eager calls, which go straight to the op (its C++ autograd
                    # kernel calls the kernels below it when the call records no graph)
                    if _functorch_active():
                        return transformed(args, kwargs)
                    return overload(*args, **kwargs)
            else:
                def fn(*args, **kwargs):
                    if _is_compiling() or _forward_ad._current_level >= 0:
                        return packet(*args, **kwargs)
                    if _functorch_active():
                        return transformed(args, kwargs)
                    out = entry(*args, **kwargs)  # NotImplemented: a call only torch.ops converts
                    return overload(*args, **kwargs) if out is NotImplemented else out
            fn.__name__ = fn.__qualname__ = name
        self.__dict__[name] = fn  # resolved once per name
        return fn


def _load_python_entry():
    """torch_dnn._entry's Op type (csrc/python_entry/python_entry.cpp), or None where the module is not built for
    this Python, was built against another torch, or TORCH_DNN_PYTHON_ENTRY=0: the wrappers then call torch.ops."""
    if os.environ.get("TORCH_DNN_PYTHON_ENTRY", "1") == "0":
        return None
    try:
        from torch_dnn import _entry
    except ImportError:
        return None
    return _entry.Op if _entry.torch_version() == torch.__version__ else None


_ENTRY_OP = _load_python_entry()


def _python_entry(packet):
    """The op's C++ entry for eager calls: an Op where the op has one overload and the entry converts every
    argument type of its schema; else None."""
    if _ENTRY_OP is None or packet.overloads() != ["default"]:
        return None
    try:
        return _ENTRY_OP(packet.default._schema.name)
    except TypeError:
        return None


def python_entry_active() -> bool:
    """Whether the functional wrappers call ops through torch_dnn._entry (build facts, tests)."""
    return _ENTRY_OP is not None


_below_autograd = torch._C._AutoDispatchBelowAutograd
ops = _FunctionalOps()

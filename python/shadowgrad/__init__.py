"""shadowgrad: gradient accumulation into a shadow tree, for any PyTorch model and any torch.optim optimizer.

Each microbatch's gradient is folded into one tensor per parameter, held in ``grad_dtype``, the moment autograd
produces it (a C++ post-hook on the parameter's AccumulateGrad node, which leaves the tensor's own
``register_post_accumulate_grad_hook`` slot to the user; docs/python.md).
``p.grad`` stays None between microbatches, so no fp32 gradient tree is ever kept: with
``grad_dtype=torch.bfloat16`` the accumulated gradients take half the memory of the usual ``.grad`` loop.

    import torch, shadowgrad

    acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=torch.bfloat16)
    optimizer = shadowgrad.optim.AdamW(model.parameters(), lr=3e-4)   # or any torch.optim optimizer
    for batch in loader:
        with acc.accumulate():                      # begin() ... end()
            for x, y in microbatches(batch, K):
                (loss_fn(model(x), y) / K).backward()   # folded at once; p.grad stays None
        acc.clip_grad_norm_(1.0)                    # fp32 global norm of the accumulated gradient
        acc.step(optimizer)                         # optimizer reads the shadows as .grad; shadows zeroed

BatchNorm and other buffers: each microbatch's forward computes its own batch statistics and updates the
running statistics, so they move K times per optimizer step (see docs/python.md, "BatchNorm under GA").
"""
import contextlib

import torch  # loads libtorch_python, which _C links against

from . import _build_info


def _check_torch(built, loaded):
    """A C++ extension loads only in the torch it was built against; say so in one line instead of failing with an
    undefined symbol."""
    if built != loaded:
        raise ImportError(f"shadowgrad was built against torch {built} but this environment has torch {loaded}: "
                          "rebuild it here with `pip install --no-build-isolation --force-reinstall "
                          "<shadowgrad checkout>`")


_check_torch(_build_info.TORCH_VERSION, torch.__version__)

from . import _C  # noqa: E402 (only once the torch is known to match)
from . import optim  # shadowgrad.optim.AdamW: the fused AdamW that reads the bf16 shadows directly

__version__ = _C.__version__
__all__ = ["ShadowAccumulator", "optim", "two_batch_estimates"]

# torch.optim optimizers whose update of a parameter reads only that parameter's gradient and state, so that one
# step() per parameter is the same update as one step() for all (ShadowAccumulator.step). Exact types only: a
# subclass may couple parameters. LBFGS does (one flat gradient) and is not here.
_PER_PARAMETER_OPTIMIZERS = tuple(getattr(torch.optim, name) for name in (
    "SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")
    if hasattr(torch.optim, name))


class ShadowAccumulator:
    """Accumulates the gradients of ``params`` over several backward() calls in a shadow tree of ``grad_dtype``.

    Args:
        params: an iterable of tensors, e.g. ``model.parameters()``. Parameters without ``requires_grad`` are
            skipped. Every one that requires grad must be a leaf tensor (a parameter, not a result of an op).
        grad_dtype: the dtype of the shadow tree (default ``torch.float32``). ``torch.bfloat16`` halves the memory
            of the accumulated gradients; each fold is computed in fp32 and rounded once into ``grad_dtype``.

    Use:
        ``begin()`` / ``end()`` (or ``with acc.accumulate():``) around the microbatches' backward() calls, then
        optionally ``clip_grad_norm_(max_norm)``, then ``step(optimizer)``.

    Raises:
        TypeError, ValueError: ``params`` is a single tensor, holds a non-tensor, a non-leaf tensor or the same
            parameter twice, is empty (for instance a ``model.parameters()`` generator that was already consumed)
            or has nothing that requires grad; ``grad_dtype`` is not a floating torch.dtype.
        RuntimeError: the methods below, when called out of order (each message says what to do).
    """

    def __init__(self, params, grad_dtype=torch.float32):
        """Allocates the shadow tree (zeros, in ``grad_dtype``) and hooks each parameter's AccumulateGrad node;
        the hooks do nothing until ``begin()``. See the class docstring for the arguments and errors."""
        if isinstance(params, torch.Tensor):
            raise TypeError("ShadowAccumulator: params must be an iterable of tensors such as model.parameters(), "
                            "not a single Tensor; wrap it in a list")
        try:
            params = list(params)
        except TypeError:
            raise TypeError("ShadowAccumulator: params must be an iterable of tensors such as model.parameters(), "
                            f"got {type(params).__name__}") from None
        if not params:
            raise ValueError("ShadowAccumulator: the parameter list is empty. model.parameters() is a generator: "
                             "if it was already iterated (e.g. passed to an optimizer), it is consumed. Call "
                             "model.parameters() again, or keep params = list(model.parameters()) and pass that")
        seen = set()
        for i, p in enumerate(params):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"ShadowAccumulator: params[{i}] is a {type(p).__name__}, not a Tensor (param "
                                "groups are for optimizers; pass the tensors)")
            if p.requires_grad and not p.is_leaf:
                raise ValueError(f"ShadowAccumulator: params[{i}] (shape {list(p.shape)}) is not a leaf tensor: "
                                 "it was computed from other tensors (e.g. w * 2 or w.to(...)), so autograd never "
                                 "stores a .grad for it. Pass the model's parameters themselves")
            if id(p) in seen:
                raise ValueError(f"ShadowAccumulator: params[{i}] appears twice; its gradient would be folded twice")
            seen.add(id(p))
        if not any(p.requires_grad for p in params):
            raise ValueError(f"ShadowAccumulator: none of the {len(params)} parameters requires grad: nothing to "
                             "accumulate")
        if not isinstance(grad_dtype, torch.dtype) or not grad_dtype.is_floating_point:
            raise TypeError(f"ShadowAccumulator: grad_dtype must be a floating torch.dtype such as torch.bfloat16, "
                            f"got {grad_dtype!r}")
        self._engine = _C.Engine(params, grad_dtype)
        self._grad_dtype = grad_dtype
        self._open = False

    # -- the accumulation window -------------------------------------------------------------------------------
    def begin(self):
        """Opens the accumulation window: from now on, every gradient autograd stores is folded into the shadow
        tree and the parameter's ``.grad`` is reset to None.

        Raises RuntimeError if the window is already open, or if a parameter already has a ``.grad`` (it would be
        folded together with the next one: call ``optimizer.zero_grad(set_to_none=True)`` first; in PyTorch 1.13
        plain ``zero_grad()`` leaves zero tensors)."""
        if self._open:
            raise RuntimeError("ShadowAccumulator.begin(): the window is already open; call end() first")
        for i, p in enumerate(self._engine.params):
            if p.grad is not None:
                raise RuntimeError(f"ShadowAccumulator.begin(): parameter {i} (shape {list(p.shape)}) already has "
                                   ".grad, which would be folded in twice. Set it to None first "
                                   "(optimizer.zero_grad(set_to_none=True) or model.zero_grad(set_to_none=True))")
        self._engine.begin()
        self._open = True

    def end(self):
        """Closes the accumulation window. The shadow tree then holds the sum of the folded gradients (parameters
        no backward() reached read as zero), and backward() behaves as usual again.

        Raises RuntimeError if no window is open."""
        if not self._open:
            raise RuntimeError("ShadowAccumulator.end(): no window is open; call begin() first")
        self._engine.end()
        self._open = False

    @contextlib.contextmanager
    def accumulate(self):
        """``with acc.accumulate():`` is ``acc.begin()`` on entry and ``acc.end()`` on exit (also on an
        exception)."""
        self.begin()
        try:
            yield self
        finally:
            self.end()

    # -- the update --------------------------------------------------------------------------------------------
    def global_norm(self):
        """The global L2 norm of the shadow tree, as a float, computed in fp32 parameter by parameter."""
        self._check_closed("global_norm")
        return self._engine.global_norm()

    def clip_grad_norm_(self, max_norm):
        """Scales the shadow tree so that its global L2 norm is at most ``max_norm`` (if ``max_norm`` > 0), like
        ``torch.nn.utils.clip_grad_norm_``, and returns the norm before clipping as a float. The scaling is done
        per parameter in fp32 and stored back in ``grad_dtype``: no fp32 copy of the tree is made.

        Raises RuntimeError inside an accumulation window (clip once, on the fully accumulated gradient)."""
        self._check_closed("clip_grad_norm_")
        return self._engine.clip_global_norm_(float(max_norm))

    def step(self, optimizer):
        """Runs ``optimizer.step()`` with the shadow tree as the parameters' ``.grad``, then zeroes the shadow tree and
        sets every ``.grad`` back to None. Works with any ``torch.optim`` optimizer (AdamW, SGD with momentum, ...).

        When ``grad_dtype`` differs from a parameter's dtype, two ways are used:

        - torch.optim's own per-parameter optimizers (exactly SGD, Adam, AdamW, Adamax, Adadelta, Adagrad, ASGD,
          NAdam, RAdam, RMSprop, Rprop; not subclasses, not LBFGS) are stepped one parameter at a time, each with
          its shadow converted to the parameter's dtype, into one buffer reused for every parameter: at most one
          converted gradient exists at a time, and the optimizer's math runs in one dtype (PyTorch's mixed-dtype
          CPU kernels are much slower). The update is the one a single ``step()`` with those gradients makes, bit
          for bit.
        - ``shadowgrad.optim.AdamW`` (the fastest way: its fused update reads a bf16 shadow with no converted copy)
          gets the shadows themselves, lent as ``.grad`` from C++ (Python refuses a ``.grad`` of another dtype), in
          one ``step()``: no copy at all.
        - Any other optimizer (a subclass, LBFGS, a third-party one) gets each shadow converted to its parameter's
          dtype, exactly (bf16 -> fp32 is lossless), in one ``step()``: for that step a converted gradient tree
          exists. (PyTorch 2.x's optimizers refuse a ``.grad`` whose dtype differs from the parameter's, e.g.
          ``lerp`` in Adam: "expected dtype float for `end`".)

        Raises RuntimeError inside an accumulation window, or if a parameter has a ``.grad`` of its own (a
        backward() outside the window)."""
        self._check_closed("step")
        if not callable(getattr(optimizer, "step", None)):
            raise TypeError(f"ShadowAccumulator.step(): expected a torch.optim optimizer, got "
                            f"{type(optimizer).__name__}")
        if self._steps_per_parameter(optimizer):
            self._step_per_parameter(optimizer)
            return
        if isinstance(optimizer, optim.AdamW) or all(p.dtype == self._grad_dtype for p in self._engine.params):
            self._engine.lend()
            try:
                optimizer.step()
            finally:
                self._engine.reclaim()
            self._keep_state_in_param_dtype(optimizer)
            return
        self._step_with_converted_grads(optimizer)

    def zero_(self):
        """Zeroes the shadow tree without an update (e.g. to skip a step). Lazy: the next fold overwrites."""
        self._engine.zero_()

    # -- introspection -----------------------------------------------------------------------------------------
    @property
    def shadows(self):
        """The shadow tree: a list of tensors in ``grad_dtype``, one per accumulated parameter, in ``params``
        order. They are the accumulator's own storage (not copies)."""
        return self._engine.shadows

    @property
    def params(self):
        """The accumulated parameters (those of ``params`` that require grad), in order."""
        return self._engine.params

    @property
    def nbytes(self):
        """Bytes held by the shadow tree (sum of numel * element size)."""
        return self._engine.nbytes

    @property
    def grad_dtype(self):
        """The torch.dtype of the shadow tree."""
        return self._grad_dtype

    @property
    def folds(self):
        """How many gradients were folded in the current or last window (one per parameter per backward)."""
        return self._engine.folds

    @property
    def microbatch_sq_norms(self):
        """One float per ``backward()`` of the current or last window, in fold order: the squared L2 norm of
        everything that backward folded, summed over parameters, computed in fp32 from each gradient as it
        arrived (before rounding into ``grad_dtype``). With ``squared_norm()`` after ``end()`` (the big batch),
        these give the gradient noise scale of your own model; see docs/batch-size.md for the estimators. If your
        loss is a per-microbatch mean, microbatch m's gradient is already its own mean; if you divide by the
        whole window's count, rescale as the trainer does."""
        return list(self._engine.microbatch_sq_norms)

    def squared_norm(self):
        """The squared L2 norm of the shadow tree (fp32 sums): the big batch of the noise scale."""
        return self._engine.squared_norm()

    @property
    def fold_seconds(self):
        """Wall seconds spent folding gradients into the shadow tree in the current or last window (the work of
        the AccumulateGrad hooks: add, round, free)."""
        return self._engine.fold_seconds

    def __repr__(self):
        return (f"ShadowAccumulator({len(self.params)} parameters, grad_dtype={self._grad_dtype}, "
                f"nbytes={self.nbytes})")

    # -- internals ---------------------------------------------------------------------------------------------
    def _check_closed(self, what):
        if self._open:
            raise RuntimeError(f"ShadowAccumulator.{what}() inside an accumulation window: call end() (or leave "
                               "the `with acc.accumulate():` block) first")

    def _steps_per_parameter(self, optimizer):
        if type(optimizer) not in _PER_PARAMETER_OPTIMIZERS:
            return False
        params = self._engine.params
        if all(p.dtype == self._grad_dtype for p in params):
            return False  # the shadows are already in the parameters' dtype: lend them, one step
        ours = {id(p) for p in params}
        # A parameter outside the accumulator with a .grad of its own would be stepped once per call.
        return not any(p.grad is not None and id(p) not in ours
                       for group in optimizer.param_groups for p in group["params"])

    @staticmethod
    def _refuse_own_grads(params):
        for i, p in enumerate(params):
            if p.grad is not None:
                raise RuntimeError(f"ShadowAccumulator.step(): parameter {i} already has .grad (a backward() "
                                   "outside begin()/end()?); its gradient would be lost. Call backward() inside "
                                   "the window, or zero the grads first")

    def _step_per_parameter(self, optimizer):
        params = self._engine.params
        self._refuse_own_grads(params)
        # One buffer per parameter dtype and device, as large as the largest such parameter, holds each converted
        # gradient in turn: a fresh allocation per parameter pays page faults on first touch (a 62.5 MiB .to() took
        # 130-150 ms against 32 ms for a copy_ into mapped memory, under load). It lives for this step only; torch's
        # per-parameter optimizers copy what they keep of a gradient (SGD's momentum starts as clone(grad)).
        scratch = {}
        for p, shadow in zip(params, self._engine.shadows):
            if shadow.dtype != p.dtype:
                key = (p.dtype, p.device)
                scratch[key] = max(scratch.get(key, 0), p.numel())
        scratch = {key: torch.empty(n, dtype=key[0], device=key[1]) for key, n in scratch.items()}
        try:
            for p, shadow in zip(params, self._engine.shadows):
                if shadow.dtype == p.dtype:
                    p.grad = shadow
                else:
                    p.grad = scratch[(p.dtype, p.device)][:p.numel()].view(p.shape).copy_(shadow)
                optimizer.step()
                p.grad = None
        finally:
            for p in params:
                p.grad = None
            self._engine.zero_()

    def _step_with_converted_grads(self, optimizer):
        params = self._engine.params
        self._refuse_own_grads(params)
        try:
            for p, shadow in zip(params, self._engine.shadows):
                p.grad = shadow if shadow.dtype == p.dtype else shadow.to(p.dtype)
            optimizer.step()
        finally:
            for p in params:
                p.grad = None
            self._engine.zero_()

    def _keep_state_in_param_dtype(self, optimizer):
        state = getattr(optimizer, "state", None)
        if not state:
            return
        for p in self._engine.params:
            if p.dtype == self._grad_dtype or p not in state:
                continue
            entry = state[p]
            for key, value in entry.items():
                if (isinstance(value, torch.Tensor) and value.dtype == self._grad_dtype
                        and value.shape == p.shape):
                    entry[key] = value.to(p.dtype)


def two_batch_estimates(small_sq, b_small, big_sq, b_big):
    """McCandlish et al. 2018 (arXiv 1812.06162, appendix A.1): unbiased estimates of |G|^2 and tr(Sigma) from the
    squared norm ``small_sq`` of a mean gradient over ``b_small`` examples (or tokens) and ``big_sq`` over
    ``b_big > b_small``. Returns ``(grad_sq, trace)``. Average each over many steps (or smooth each with an EMA) and
    only then divide: ``trace / grad_sq`` is the noise scale B_simple, in the unit of b.

    With ``ShadowAccumulator``: if each microbatch's loss is divided by the window's total count T, microbatch m
    (b_m examples) folded ``(b_m / T)`` times its mean gradient, so ``small_sq = microbatch_sq_norms[m] * (T / b_m)**2``
    and ``big_sq = squared_norm()`` with ``b_big = T``. See docs/batch-size.md."""
    if not 0 < b_small < b_big:
        raise ValueError(f"two_batch_estimates: need 0 < b_small < b_big, got {b_small} and {b_big}")
    grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return grad_sq, trace

"""shadowgrad.optim.AdamW: torch.optim.AdamW with each parameter's update in one fused C++ pass.

    optimizer = shadowgrad.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)   # as torch.optim.AdamW
    acc.step(optimizer)      # with a ShadowAccumulator: reads the bf16 shadows themselves, no fp32 copy
    optimizer.step()         # or in a plain loop, on fp32 .grad

It is a subclass of torch.optim.AdamW with the same arguments, state (``step``, ``exp_avg``, ``exp_avg_sq``) and
``state_dict()``, so its state loads into torch.optim.AdamW and back.
"""
import torch
from torch.optim import adamw as _torch_adamw  # the module: its functional adamw() is torch.optim.AdamW's step

from . import _C

__all__ = ["AdamW"]


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW whose update reads each element of the parameter, its gradient and both moments once and
    writes the parameter and the moments once (the trainer's fused AdamW loop, src/optim/AdamWUpdate.h), where
    torch's step makes about ten passes over memory per parameter.

    Same arguments, defaults and update as ``torch.optim.AdamW`` (the formula and order of operations of its
    single-tensor step; the results agree within fp32 rounding, since the compiler may fuse a multiply-add
    differently). A ``bfloat16`` ``.grad`` on an fp32 parameter, as ``ShadowAccumulator.step`` lends the shadow
    tree, is widened element by element inside the loop: no converted copy of the gradient is made.

    The fused loop takes fp32, contiguous CPU parameters with a contiguous fp32 or bf16 gradient. Other parameters,
    and param groups with ``amsgrad``, ``maximize`` or ``capturable``, take torch.optim.AdamW's own step (``foreach``
    is used only there). ``state_dict()`` / ``load_state_dict()`` are torch.optim.AdamW's.
    """

    @torch.no_grad()
    def step(self, closure=None):
        """Performs one optimization step (see torch.optim.AdamW.step); returns the closure's loss, if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if any(p.grad.is_sparse for p in params):
                raise RuntimeError("AdamW does not support sparse gradients")
            if group["amsgrad"] or group["maximize"] or group["capturable"]:
                self._stock_step(group, params)
                continue
            states = [self._state(p, group) for p in params]
            beta1, beta2 = group["betas"]
            left = _C.adamw_step(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                                 [s["exp_avg_sq"] for s in states], [s["step"] for s in states],
                                 float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                                 float(group["weight_decay"]))
            if left:
                self._stock_step(group, [params[i] for i in left])
        return loss

    def _state(self, p, group):
        """torch.optim.AdamW's state for p, created as it creates it."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = (torch.zeros((1,), dtype=torch.float, device=p.device) if group["capturable"]
                             else torch.tensor(0.))
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _stock_step(self, group, params):
        """torch.optim.AdamW's own update of `params` (some of `group`'s). A gradient in another dtype than its
        parameter (a lent shadow) is converted first, one parameter at a time (at most one converted copy exists):
        torch's mixed-dtype kernels are slow, and its foreach kernels refuse mixed dtypes."""
        if all(p.grad.dtype == p.dtype for p in params):
            self._torch_adamw(group, params, [p.grad for p in params])
            return
        for p in params:
            self._torch_adamw(group, [p], [p.grad if p.grad.dtype == p.dtype else p.grad.to(p.dtype)])

    def _torch_adamw(self, group, params, grads):
        states = [self._state(p, group) for p in params]
        beta1, beta2 = group["betas"]
        _torch_adamw.adamw(
            params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
            [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else [], [s["step"] for s in states],
            foreach=group["foreach"], capturable=group["capturable"], amsgrad=group["amsgrad"], beta1=beta1,
            beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=group["maximize"])

"""shadowgrad.optim.AdamW against torch.optim.AdamW: the same update within fp32 rounding (fp32 and bf16
gradients), the same state and state_dict, torch's own step where the fused loop does not apply.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest python/tests/test_optim.py -v
"""
import unittest
from unittest import mock

import torch
from torch.optim import adamw as torch_adamw

import shadowgrad
from test_shadowgrad import batches, model_pair, train_ga, train_plain

OPTIONS = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
# torch.optim.AdamW is the reference with fused=False (its single-tensor/foreach math, not its own fused kernel).
REFERENCE = dict(OPTIONS, fused=False)
# fp32 rounding of a few ops, relative to the largest element; a different formula misses it by far (checked below).
TOLERANCE = 2e-6


def start_tensors(seed=0):
    """A tensor larger than one thread's block (32 Ki elements), a matrix, a vector."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(100_003, generator=gen), torch.randn(17, 5, generator=gen), torch.randn(3, generator=gen)]


def leaves(tensors):
    return [t.clone().requires_grad_() for t in tensors]


def run(make, params, steps, seed=1, dtype=torch.float32):
    """`steps` updates of make(params) with seeded gradients (rounded through `dtype`, given in fp32)."""
    opt = make(params)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(dtype).float()
        opt.step()
    return opt


def worst_rel_diff(xs, ys):
    return max(float((x - y).abs().max() / y.abs().max().clamp_min(1e-30)) for x, y in zip(xs, ys))


def groups(params, lr2=1e-2):
    """Two param groups with their own lr and weight decay."""
    return [{"params": params[:1]}, {"params": params[1:], "lr": lr2, "weight_decay": 0.0}]


class FusedAdamWTest(unittest.TestCase):
    def compare(self, steps, **options):
        start = start_tensors()
        a, b = leaves(start), leaves(start)
        stock = run(lambda ps: torch.optim.AdamW(groups(ps), **{**REFERENCE, **options}), a, steps)
        fused = run(lambda ps: shadowgrad.optim.AdamW(groups(ps), **{**OPTIONS, **options}), b, steps)
        worst = worst_rel_diff(b, a)
        for pa, pb in zip(a, b):
            sa, sb = stock.state[pa], fused.state[pb]
            self.assertEqual(sorted(sa), sorted(sb))
            self.assertEqual(float(sb["step"]), float(steps))
            worst = max(worst, worst_rel_diff([sb["exp_avg"], sb["exp_avg_sq"]], [sa["exp_avg"], sa["exp_avg_sq"]]))
            self.assertEqual(sb["exp_avg"].dtype, torch.float32)
        return worst, a, b

    def test_matches_torch_adamw_within_fp32_rounding(self):
        worst, a, b = self.compare(steps=6)
        self.assertLess(worst, TOLERANCE)
        self.assertGreater(worst_rel_diff(b, start_tensors()), 1e-3, "the parameters moved")

    def test_the_tolerance_catches_a_different_update(self):
        # The same comparison against AdamW with another beta2 (a test that can fail).
        start = start_tensors()
        a, b = leaves(start), leaves(start)
        run(lambda ps: torch.optim.AdamW(ps, **{**REFERENCE, "betas": (0.9, 0.96)}), a, 6)
        run(lambda ps: shadowgrad.optim.AdamW(ps, **OPTIONS), b, 6)
        self.assertGreater(worst_rel_diff(b, a), 10 * TOLERANCE)

    def test_the_fused_loop_is_used_not_torchs_step(self):
        params = leaves(start_tensors())
        with mock.patch.object(torch_adamw, "adamw", side_effect=AssertionError("torch's step ran")):
            run(lambda ps: shadowgrad.optim.AdamW(ps, **OPTIONS), params, 2)

    def test_amsgrad_and_maximize_take_torchs_step_bit_for_bit(self):
        for options in (dict(amsgrad=True), dict(maximize=True), dict(foreach=True, amsgrad=True)):
            with self.subTest(**options):
                worst, _, _ = self.compare(steps=3, **options)
                self.assertEqual(worst, 0.0)

    def test_a_non_contiguous_parameter_takes_torchs_step(self):
        start = [torch.randn(7, 5).t(), torch.randn(40_000)]
        self.assertFalse(start[0].is_contiguous())
        a = [t.clone(memory_format=torch.preserve_format).requires_grad_() for t in start]
        b = [t.clone(memory_format=torch.preserve_format).requires_grad_() for t in start]
        self.assertFalse(b[0].is_contiguous())
        run(lambda ps: torch.optim.AdamW(ps, **OPTIONS), a, 3)
        run(lambda ps: shadowgrad.optim.AdamW(ps, **OPTIONS), b, 3)
        self.assertTrue(torch.equal(a[0], b[0]), "torch's own step, bit for bit")
        self.assertLess(worst_rel_diff(b[1:], a[1:]), TOLERANCE)

    def test_closure_and_parameters_without_grad(self):
        params = leaves(start_tensors())
        opt = shadowgrad.optim.AdamW(params, **OPTIONS)
        before = [p.detach().clone() for p in params]

        def closure():
            opt.zero_grad(set_to_none=True)
            loss = (params[1] ** 2).sum()
            loss.backward()
            return loss

        loss = opt.step(closure)
        self.assertIsInstance(loss, torch.Tensor)
        self.assertTrue(torch.equal(params[0], before[0]), "no .grad: not stepped")
        self.assertFalse(torch.equal(params[1], before[1]))
        self.assertNotIn(params[0], opt.state)

    def test_in_place_update_is_seen_by_autograd(self):
        # A backward through a graph that saved the parameter before the step must fail, as with torch's step.
        p = torch.randn(10, requires_grad=True)
        opt = shadowgrad.optim.AdamW([p], **OPTIONS)
        p.grad = torch.ones(10)
        y = (p * p).sum()
        opt.step()
        with self.assertRaisesRegex(RuntimeError, "inplace"):
            y.backward()


class StateDictTest(unittest.TestCase):
    def test_round_trip_resumes_bit_for_bit(self):
        start = start_tensors()
        whole = leaves(start)
        run(lambda ps: shadowgrad.optim.AdamW(groups(ps), **OPTIONS), whole, 6, seed=1)
        # the same 6 steps as 3 + 3, through state_dict() into a new optimizer on a copy of the parameters
        first = leaves(start)
        gen = torch.Generator().manual_seed(1)
        opt = shadowgrad.optim.AdamW(groups(first), **OPTIONS)
        for step in range(6):
            if step == 3:
                saved = opt.state_dict()
                first = [p.detach().clone().requires_grad_() for p in first]
                opt = shadowgrad.optim.AdamW(groups(first, lr2=0.5), **OPTIONS)  # lr2 replaced by the saved one
                opt.load_state_dict(saved)
            for p in first:
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        for a, b in zip(whole, first):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(opt.param_groups[1]["lr"], 1e-2)

    def test_state_dict_loads_into_torch_adamw_and_back(self):
        params = leaves(start_tensors())
        fused = run(lambda ps: shadowgrad.optim.AdamW(ps, **OPTIONS), params, 2)
        stock = torch.optim.AdamW(params, **OPTIONS)
        stock.load_state_dict(fused.state_dict())
        again = shadowgrad.optim.AdamW(params, **OPTIONS)
        again.load_state_dict(stock.state_dict())
        for p in params:
            for key in ("step", "exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(again.state[p][key], fused.state[p][key]))


class WithShadowAccumulatorTest(unittest.TestCase):
    def test_reads_bf16_shadows_like_torch_adamw_fed_them_in_fp32(self):
        _, model = model_pair()
        acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=torch.bfloat16)
        opt = shadowgrad.optim.AdamW(model.parameters(), **OPTIONS)
        ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
        ref_opt = torch.optim.AdamW(ref, **REFERENCE)
        for mbs in batches(3):
            with acc.accumulate():
                for x, y in mbs:
                    (torch.nn.functional.cross_entropy(model(x), y) / len(mbs)).backward()
            for r, s in zip(ref, acc.shadows):
                r.grad = s.float()  # the same bf16 values, widened
            ref_opt.step()
            with mock.patch.object(torch_adamw, "adamw", side_effect=AssertionError("torch's step ran")):
                acc.step(opt)
            self.assertTrue(all(p.grad is None for p in model.parameters()))
        self.assertLess(worst_rel_diff(list(model.parameters()), ref), TOLERANCE)
        for p in model.parameters():
            self.assertEqual(opt.state[p]["exp_avg"].dtype, torch.float32)

    def test_tracks_the_plain_loop(self):
        plain, ga = model_pair()
        data = batches(6)
        lp, _ = train_plain(plain, torch.optim.AdamW(plain.parameters(), lr=1e-2), data)
        acc = shadowgrad.ShadowAccumulator(ga.parameters(), grad_dtype=torch.bfloat16)
        lg, _ = train_ga(ga, shadowgrad.optim.AdamW(ga.parameters(), lr=1e-2), data, acc)
        for a, b in zip(lp, lg):
            self.assertAlmostEqual(a, b, delta=2e-2)
        self.assertLess(lg[-1], lg[0])


if __name__ == "__main__":
    unittest.main()

"""Tests of `import shadowgrad`, called only the way a user calls it. Run by ctest (test `python`), or:

    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s python/tests -v
"""
import copy
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import shadowgrad

K = 4
VOCAB, TOPICS = 32, 4


class TopicNet(nn.Module):
    """A model shadowgrad has never seen: embedding -> conv -> BatchNorm -> linear."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        # No conv bias: BatchNorm subtracts the batch mean right after, so a bias's gradient is zero in exact
        # arithmetic, and whether rounding noise moves it depends on the host (bias=False, as conv-BN nets use).
        self.conv = nn.Conv1d(8, 16, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, TOPICS)

    def forward(self, tokens):
        x = self.embed(tokens).transpose(1, 2)
        return self.head(F.relu(self.norm(self.conv(x))).mean(2))


def batches(steps, seed=0, batch=6):
    """steps x K microbatches of (tokens, topic): each sequence's tokens come from its topic's range."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        mbs = []
        for _ in range(K):
            topic = torch.randint(TOPICS, (batch,), generator=gen)
            tokens = torch.randint(VOCAB // TOPICS, (batch, 12), generator=gen) + topic[:, None] * (VOCAB // TOPICS)
            mbs.append((tokens, topic))
        out.append(mbs)
    return out


def model_pair():
    torch.manual_seed(0)
    a = TopicNet()
    return a, copy.deepcopy(a)


def train_plain(model, opt, data):
    """The idiomatic loop: loss / K into .grad, one step. Returns per-step losses and accumulated grads."""
    losses, grads = [], []
    for mbs in data:
        total = 0.0
        for x, y in mbs:
            loss = F.cross_entropy(model(x), y)
            (loss / K).backward()
            total += loss.item()
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total / K)
    return losses, grads


def train_ga(model, opt, data, acc, between=None):
    losses, grads = [], []
    for mbs in data:
        total = 0.0
        with acc.accumulate():
            for x, y in mbs:
                loss = F.cross_entropy(model(x), y)
                (loss / K).backward()
                total += loss.item()
                if between:
                    between(model)
        grads.append([s.float().clone() for s in acc.shadows])
        acc.step(opt)
        losses.append(total / K)
    return losses, grads


class ParityTest(unittest.TestCase):
    def test_fp32_matches_plain_loop_within_1e6(self):
        plain, ga = model_pair()
        data = batches(3)
        opt_p = torch.optim.AdamW(plain.parameters(), lr=1e-2)
        opt_g = torch.optim.AdamW(ga.parameters(), lr=1e-2)
        acc = shadowgrad.ShadowAccumulator(ga.parameters())
        self.assertEqual(acc.grad_dtype, torch.float32)
        lp, gp = train_plain(plain, opt_p, data)
        lg, gg = train_ga(ga, opt_g, data, acc)
        for step in range(3):
            for a, b in zip(gp[step], gg[step]):
                torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
            self.assertAlmostEqual(lg[step], lp[step], delta=1e-6)
        # the loss after the 3 optimizer steps, on fresh data, in eval mode
        x, y = batches(1, seed=99)[0][0]
        plain.eval(), ga.eval()
        with torch.no_grad():
            self.assertAlmostEqual(F.cross_entropy(ga(x), y).item(), F.cross_entropy(plain(x), y).item(), delta=1e-6)
        for a, b in zip(plain.parameters(), ga.parameters()):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
        torch.testing.assert_close(ga.norm.running_mean, plain.norm.running_mean, rtol=0, atol=1e-6)

    def test_a_wrong_normalisation_is_caught(self):
        # The same comparison must fail when the GA loop forgets the / K (a test that can fail).
        plain, ga = model_pair()
        data = batches(1)
        _, gp = train_plain(plain, torch.optim.SGD(plain.parameters(), lr=0.1), data)
        acc = shadowgrad.ShadowAccumulator(ga.parameters())
        with acc.accumulate():
            for x, y in data[0]:
                F.cross_entropy(ga(x), y).backward()
        wrong = [s.clone() for s in acc.shadows]
        self.assertFalse(all(torch.allclose(a, b, atol=1e-6) for a, b in zip(gp[0], wrong)))

    def test_grad_is_none_between_microbatches(self):
        _, model = model_pair()
        acc = shadowgrad.ShadowAccumulator(model.parameters())
        seen = []
        train_ga(model, torch.optim.SGD(model.parameters(), lr=0.1), batches(2), acc,
                 between=lambda m: seen.extend(p.grad is None for p in m.parameters()))
        self.assertEqual(len(seen), 2 * K * len(list(model.parameters())))
        self.assertTrue(all(seen))
        self.assertTrue(all(p.grad is None for p in model.parameters()))  # also after step()
        self.assertEqual(acc.folds, K * len(acc.params))

    def test_outside_the_window_backward_is_plain(self):
        _, model = model_pair()
        acc = shadowgrad.ShadowAccumulator(model.parameters())
        x, y = batches(1)[0][0]
        F.cross_entropy(model(x), y).backward()
        self.assertTrue(all(p.grad is not None for p in model.parameters()))
        self.assertTrue(all(float(s.abs().sum()) == 0 for s in acc.shadows))


class Bf16Test(unittest.TestCase):
    def test_nbytes_and_loss_close_to_fp32_over_8_steps(self):
        ref, model = model_pair()
        data = batches(8)
        acc32 = shadowgrad.ShadowAccumulator(ref.parameters(), grad_dtype=torch.float32)
        acc16 = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=torch.bfloat16)
        numel = sum(p.numel() for p in model.parameters())
        self.assertEqual(acc16.nbytes, 2 * numel)
        self.assertEqual(acc32.nbytes, 4 * numel)
        self.assertTrue(all(s.dtype == torch.bfloat16 for s in acc16.shadows))
        l32, _ = train_ga(ref, torch.optim.AdamW(ref.parameters(), lr=1e-2), data, acc32)
        l16, _ = train_ga(model, torch.optim.AdamW(model.parameters(), lr=1e-2), data, acc16)
        for a, b in zip(l32, l16):
            self.assertAlmostEqual(a, b, delta=1e-2)
        self.assertLess(l16[-1], l16[0])


class FoldTest(unittest.TestCase):
    def test_bf16_fold_of_fp32_gradients_equals_add_bit_for_bit(self):
        # The fold of an fp32 gradient into a bf16 shadow is shadowgrad's own loop (no fp32 temporaries); it must
        # round exactly as torch's add_ does, specials included (3 Mi elements: several threads' chunks).
        n = 3_000_007
        start = (torch.randn(n, generator=torch.Generator().manual_seed(1)) * 3).bfloat16()
        g = torch.randn(n, generator=torch.Generator().manual_seed(2)) * 1e-2
        g[:6] = torch.tensor([float("inf"), float("nan"), 3e38, -3e38, 1e-40, -0.0])
        p = nn.Parameter(torch.zeros(n))
        acc = shadowgrad.ShadowAccumulator([p], grad_dtype=torch.bfloat16)
        with acc.accumulate():
            (p * torch.ones(n)).sum().backward()  # the first fold after construction or a step overwrites
            acc.shadows[0].copy_(start)
            (p * g).sum().backward()              # the second adds
        want = start.clone().add_(g)
        got = acc.shadows[0]
        self.assertTrue(torch.equal(got.isnan(), want.isnan()))
        self.assertTrue(torch.equal(got.nan_to_num(0), want.nan_to_num(0)))


class OptimizerTest(unittest.TestCase):
    """Python optimizers read the bf16 shadows lent as .grad of fp32 parameters; results track the fp32 plain loop."""

    def run_optimizer(self, make):
        plain, ga = model_pair()
        data = batches(6)
        lp, _ = train_plain(plain, make(plain.parameters()), data)
        opt = make(ga.parameters())
        acc = shadowgrad.ShadowAccumulator(ga.parameters(), grad_dtype=torch.bfloat16)
        before = [p.detach().clone() for p in ga.parameters()]
        lg, _ = train_ga(ga, opt, data, acc)
        self.assertTrue(all(not torch.equal(a, b) for a, b in zip(before, ga.parameters())), "every parameter moved")
        for a, b in zip(lp, lg):
            self.assertAlmostEqual(a, b, delta=2e-2)
        self.assertLess(lg[-1], lg[0])
        for p in ga.parameters():  # optimizer state stays in the parameter's dtype
            for value in opt.state[p].values():
                if isinstance(value, torch.Tensor) and value.shape == p.shape:
                    self.assertEqual(value.dtype, torch.float32)
        return opt

    def test_adamw(self):
        self.run_optimizer(lambda ps: torch.optim.AdamW(ps, lr=1e-2))

    def test_adamw_foreach(self):
        self.run_optimizer(lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True))

    def test_sgd_momentum(self):
        opt = self.run_optimizer(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
        self.assertTrue(all(s["momentum_buffer"].dtype == torch.float32 for s in opt.state.values()))

    def test_sgd_momentum_foreach(self):
        self.run_optimizer(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True))

    def test_generic_path_adamw_and_sgd_subclasses(self):
        # Subclasses are not known to be per-parameter: they get fp32 conversions of the shadows in one step().
        class MyAdamW(torch.optim.AdamW):
            pass

        class MySGD(torch.optim.SGD):
            pass

        self.run_optimizer(lambda ps: MyAdamW(ps, lr=1e-2))
        opt = self.run_optimizer(lambda ps: MySGD(ps, lr=0.1, momentum=0.9))
        self.assertTrue(all(s["momentum_buffer"].dtype == torch.float32 for s in opt.state.values()))

    def same_as_one_step_with_upcast_grads(self, make):
        # step() must give bit for bit what one step() of an fp32 optimizer fed the shadow's values gives.
        ref, ga = model_pair()
        opt_r, opt_g = make(ref.parameters()), make(ga.parameters())
        acc = shadowgrad.ShadowAccumulator(ga.parameters(), grad_dtype=torch.bfloat16)
        for mbs in batches(3):
            with acc.accumulate():
                for x, y in mbs:
                    (F.cross_entropy(ga(x), y) / K).backward()
            for p, s in zip(ref.parameters(), acc.shadows):
                p.grad = s.float()
            with torch.no_grad():
                for (x, _) in mbs:  # the same BatchNorm running-stat updates as ga's forwards
                    ref(x)
            opt_r.step()
            opt_r.zero_grad(set_to_none=True)
            acc.step(opt_g)
            for a, b in zip(ref.parameters(), ga.parameters()):
                self.assertTrue(torch.equal(a, b))

    def test_bit_identical_to_one_step_with_upcast_grads(self):
        class MySGD(torch.optim.SGD):
            pass

        for make in (lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),   # one step per parameter
                     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                     lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
                     lambda ps: MySGD(ps, lr=0.1, momentum=0.9)):                     # converted, one step
            self.same_as_one_step_with_upcast_grads(make)

    def test_a_foreign_parameter_with_its_own_grad_is_stepped_once(self):
        _, ga = model_pair()
        extra = nn.Parameter(torch.ones(3))
        opt = torch.optim.AdamW(list(ga.parameters()) + [extra], lr=1e-2)
        acc = shadowgrad.ShadowAccumulator(ga.parameters(), grad_dtype=torch.bfloat16)
        with acc.accumulate():
            x, y = batches(1)[0][0]
            F.cross_entropy(ga(x), y).backward()
        extra.grad = torch.ones(3)
        acc.step(opt)
        self.assertEqual(float(opt.state[extra]["step"]), 1.0)
        self.assertTrue(all(float(opt.state[p]["step"]) == 1.0 for p in ga.parameters()))


class MisuseTest(unittest.TestCase):
    def setUp(self):
        _, self.model = model_pair()
        self.acc = shadowgrad.ShadowAccumulator(self.model.parameters(), grad_dtype=torch.bfloat16)
        self.x, self.y = batches(1)[0][0]

    def backward(self):
        F.cross_entropy(self.model(self.x), self.y).backward()

    def test_begin_with_existing_grad(self):
        self.backward()
        with self.assertRaisesRegex(RuntimeError, r"already has \.grad.*set_to_none=True"):
            self.acc.begin()
        self.model.zero_grad(set_to_none=False)  # zeros, not None: still refused
        with self.assertRaisesRegex(RuntimeError, "already has .grad"):
            self.acc.begin()
        self.model.zero_grad(set_to_none=True)
        self.acc.begin()
        self.acc.end()

    def test_non_leaf(self):
        w = nn.Parameter(torch.ones(3))
        with self.assertRaisesRegex(ValueError, "params\\[1\\].*not a leaf"):
            shadowgrad.ShadowAccumulator([w, w * 2])

    def test_empty(self):
        with self.assertRaisesRegex(ValueError, "empty"):
            shadowgrad.ShadowAccumulator([])

    def test_consumed_generator(self):
        params = self.model.parameters()
        torch.optim.SGD(params, lr=0.1)  # consumes the generator
        with self.assertRaisesRegex(ValueError, "consumed"):
            shadowgrad.ShadowAccumulator(params)

    def test_nothing_requires_grad(self):
        with self.assertRaisesRegex(ValueError, "none of the 1 parameters requires grad"):
            shadowgrad.ShadowAccumulator([torch.ones(3)])

    def test_step_inside_window(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.acc.begin()
        self.backward()
        with self.assertRaisesRegex(RuntimeError, "step\\(\\) inside an accumulation window"):
            self.acc.step(opt)
        with self.assertRaisesRegex(RuntimeError, "clip_grad_norm_\\(\\) inside"):
            self.acc.clip_grad_norm_(1.0)
        self.acc.end()
        self.acc.step(opt)

    def test_step_with_with_block_raises_inside(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        with self.assertRaises(RuntimeError):
            with self.acc.accumulate():
                self.acc.step(opt)
        self.acc.begin()  # the with block closed the window on the way out
        self.acc.end()

    def test_backward_outside_window_then_step(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.backward()
        with self.assertRaisesRegex(RuntimeError, "outside begin\\(\\)/end\\(\\)"):
            self.acc.step(opt)
        self.assertTrue(all(p.grad is not None for p in self.model.parameters()), "user's .grad left as it was")

    def test_window_order(self):
        with self.assertRaisesRegex(RuntimeError, "no window is open"):
            self.acc.end()
        self.acc.begin()
        with self.assertRaisesRegex(RuntimeError, "already open"):
            self.acc.begin()
        self.acc.end()

    def test_bad_arguments(self):
        with self.assertRaisesRegex(TypeError, "single Tensor"):
            shadowgrad.ShadowAccumulator(nn.Parameter(torch.ones(3)))
        with self.assertRaisesRegex(TypeError, "grad_dtype"):
            shadowgrad.ShadowAccumulator(self.model.parameters(), grad_dtype=torch.int32)
        with self.assertRaisesRegex(TypeError, "grad_dtype"):
            shadowgrad.ShadowAccumulator(self.model.parameters(), grad_dtype="bfloat16")
        with self.assertRaisesRegex(TypeError, "not a Tensor"):
            shadowgrad.ShadowAccumulator([{"params": list(self.model.parameters())}])
        w = nn.Parameter(torch.ones(3))
        with self.assertRaisesRegex(ValueError, "twice"):
            shadowgrad.ShadowAccumulator([w, w])
        with self.assertRaisesRegex(TypeError, "torch.optim optimizer"):
            self.acc.step(None)

    def test_skipped_params_without_requires_grad(self):
        frozen = nn.Parameter(torch.ones(3), requires_grad=False)
        acc = shadowgrad.ShadowAccumulator([frozen] + list(self.model.parameters()))
        self.assertEqual(len(acc.params), len(list(self.model.parameters())))


class ApiTest(unittest.TestCase):
    @staticmethod
    def one_microbatch(model):
        """An fp32 accumulator on `model` after one backward; returns (accumulator, x, y)."""
        acc = shadowgrad.ShadowAccumulator(model.parameters())
        x, y = batches(1)[0][0]
        with acc.accumulate():
            F.cross_entropy(model(x), y).backward()
        return acc, x, y

    def test_docstrings_on_every_public_name(self):
        self.assertTrue(shadowgrad.__doc__ and "accumulate" in shadowgrad.__doc__)
        cls = shadowgrad.ShadowAccumulator
        for name in ["__init__", "begin", "end", "accumulate", "clip_grad_norm_", "step", "zero_", "shadows",
                     "params", "nbytes", "grad_dtype", "global_norm", "folds"]:
            doc = getattr(cls, name).__doc__
            self.assertTrue(doc and len(doc) > 30, name)
        self.assertIn("grad_dtype", cls.__doc__)

    def test_clip_returns_fp32_norm_like_torch(self):
        ref, model = model_pair()
        acc, x, y = self.one_microbatch(model)
        F.cross_entropy(ref(x), y).backward()
        expected = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1).item()
        norm = acc.clip_grad_norm_(0.1)
        self.assertIsInstance(norm, float)
        self.assertAlmostEqual(norm, expected, delta=1e-5 * expected)
        self.assertAlmostEqual(acc.global_norm(), 0.1, delta=1e-5)
        for p, s in zip(ref.parameters(), acc.shadows):
            torch.testing.assert_close(s, p.grad, rtol=1e-5, atol=1e-7)

    def test_zero_(self):
        acc, _, _ = self.one_microbatch(model_pair()[1])
        self.assertGreater(acc.global_norm(), 0)
        acc.zero_()
        self.assertEqual(acc.global_norm(), 0)
        self.assertIn("ShadowAccumulator(6 parameters, grad_dtype=torch.float32", repr(acc))


if __name__ == "__main__":
    unittest.main()

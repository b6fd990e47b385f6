"""The gradient noise scale through the Python API: ShadowAccumulator.microbatch_sq_norms and squared_norm() on a
model whose tr(Sigma) and |G|^2 are known, and on a module of torch's own (one value per backward, fold order)."""
import math
import unittest

import torch
import torch.nn as nn

import shadowgrad


class GaussianModel(unittest.TestCase):
    """Example i's loss is 0.5 |w - x_i|^2 with x_i ~ N(0, I_d): its gradient w - x_i has mean G = w and covariance
    I_d, so tr(Sigma) = d and |G|^2 = |w|^2."""

    D, GRAD_SQ, STEPS = 64, 4.0, 300

    def estimate(self, grad_dtype, sizes):
        gen = torch.Generator().manual_seed(99)
        w = nn.Parameter(torch.full((self.D,), math.sqrt(self.GRAD_SQ / self.D)))
        acc = shadowgrad.ShadowAccumulator([w], grad_dtype=grad_dtype)
        total = sum(sizes)
        g_sum = tr_sum = 0.0
        for _ in range(self.STEPS):
            with acc.accumulate():
                for b in sizes:
                    x = torch.randn(b, self.D, generator=gen)
                    (0.5 * (w - x).pow(2).sum() / total).backward()
            folded = acc.microbatch_sq_norms
            self.assertIsInstance(folded, list)
            self.assertEqual(len(folded), len(sizes))
            self.assertTrue(all(isinstance(v, float) for v in folded))
            big = acc.squared_norm()
            for sq, b in zip(folded, sizes):
                g, tr = shadowgrad.two_batch_estimates(sq * (total / b) ** 2, b, big, total)
                g_sum += g / (self.STEPS * len(sizes))
                tr_sum += tr / (self.STEPS * len(sizes))
            acc.zero_()
        return g_sum, tr_sum

    def test_within_15_percent(self):
        for dtype in (torch.float32, torch.bfloat16):
            for sizes in ([8, 8, 8, 8], [4, 6, 10, 12]):
                with self.subTest(dtype=dtype, sizes=sizes):
                    g, tr = self.estimate(dtype, sizes)
                    self.assertLess(abs(tr / self.D - 1), 0.15, f"tr(Sigma) {tr} vs {self.D}")
                    self.assertLess(abs(g / self.GRAD_SQ - 1), 0.15, f"|G|^2 {g} vs {self.GRAD_SQ}")


class ForeignModule(unittest.TestCase):
    def test_one_value_per_backward_equal_to_the_gradients_norm(self):
        torch.manual_seed(0)
        model = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1)
        xs = [torch.randn(2, 5, 16) for _ in range(3)]
        expected = []
        for x in xs:  # each microbatch's own gradient, the plain way
            model.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            expected.append(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None))
        model.zero_grad(set_to_none=True)
        acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=torch.bfloat16)
        with acc.accumulate():
            for x in xs:
                model(x).pow(2).mean().backward()
        got = acc.microbatch_sq_norms
        self.assertEqual(len(got), 3)
        for g, e in zip(got, expected):
            self.assertAlmostEqual(g / e, 1.0, places=5)
        with self.assertRaises(ValueError):
            shadowgrad.two_batch_estimates(1.0, 8, 1.0, 8)


if __name__ == "__main__":
    unittest.main()

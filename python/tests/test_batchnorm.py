"""BatchNorm under gradient accumulation, with numbers (docs/python.md, "BatchNorm under GA").

GA runs K forwards of B samples, not one forward of K*B, so BatchNorm (in training mode) (1) normalises each
microbatch with that microbatch's own mean and variance and (2) updates its running statistics K times per
optimizer step. shadowgrad changes neither: it only moves where the gradients go. These tests pin the numbers:
run with -v to see them (`PYTHONPATH=build/python /usr/bin/python3 -m unittest -v python/tests/test_batchnorm.py`).
"""
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import shadowgrad

K, B, C = 4, 8, 3


def microbatches():
    """K microbatches of B samples x C channels; microbatch k has mean about k: the spread BatchNorm sees."""
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(B, C, generator=gen) + k for k in range(K)]


class BatchNormUnderGA(unittest.TestCase):
    def test_running_stats_are_updated_k_times(self):
        m = 0.1
        xs = microbatches()
        ga = nn.BatchNorm1d(C, momentum=m)
        acc = shadowgrad.ShadowAccumulator(ga.parameters(), grad_dtype=torch.bfloat16)
        with acc.accumulate():
            for x in xs:
                (ga(x).pow(2).mean() / K).backward()
        big = nn.BatchNorm1d(C, momentum=m)
        big(torch.cat(xs))

        # K updates: running = (1-m)^K * running_0 + sum_k m (1-m)^(K-1-k) * mean_k
        means = [x.mean(0) for x in xs]
        expected = sum(m * (1 - m) ** (K - 1 - k) * means[k] for k in range(K))
        torch.testing.assert_close(ga.running_mean, expected, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(big.running_mean, m * torch.cat(xs).mean(0), rtol=1e-6, atol=1e-6)
        self.assertEqual(int(ga.num_batches_tracked), K)
        self.assertEqual(int(big.num_batches_tracked), 1)
        # The weight left on the old running statistics after one optimizer step: (1-m)^K, not 1-m.
        self.assertAlmostEqual((1 - m) ** K, 0.6561, places=6)
        print(f"\n  momentum {m}, K={K}: running_mean[0] GA {ga.running_mean[0]:.4f} vs one big batch "
              f"{big.running_mean[0]:.4f}; num_batches_tracked {int(ga.num_batches_tracked)} vs "
              f"{int(big.num_batches_tracked)}; weight kept on the old statistics per optimizer step "
              f"{(1 - m) ** K:.4f} vs {1 - m:.4f} (effective momentum {1 - (1 - m) ** K:.4f})")
        self.assertGreater(float((ga.running_mean - big.running_mean).abs().max()), 0.3)

    def test_momentum_none_gives_the_big_batch_running_mean(self):
        # momentum=None is a cumulative average over every forward: with equal microbatches its running_mean is the
        # big batch's mean exactly; its running_var misses the spread between microbatches.
        xs = microbatches()
        ga = nn.BatchNorm1d(C, momentum=None)
        for x in xs:
            ga(x)
        big = nn.BatchNorm1d(C, momentum=None)
        big(torch.cat(xs))
        torch.testing.assert_close(ga.running_mean, big.running_mean, rtol=1e-5, atol=1e-6)
        within = torch.stack([x.var(0) for x in xs]).mean(0)
        torch.testing.assert_close(ga.running_var, within, rtol=1e-5, atol=1e-6)
        print(f"\n  momentum=None: running_mean[0] GA {ga.running_mean[0]:.4f} = big batch "
              f"{big.running_mean[0]:.4f}; running_var[0] GA {ga.running_var[0]:.4f} vs big batch "
              f"{big.running_var[0]:.4f} (GA averages the within-microbatch variances)")
        self.assertGreater(float(big.running_var[0] - ga.running_var[0]), 0.5)

    def test_gradient_differs_from_the_big_batch_only_with_batchnorm(self):
        # Training-mode BatchNorm normalises by each microbatch's own statistics, so the GA gradient is not the
        # big-batch gradient. Without BatchNorm (or in eval mode) it is, to fp32 rounding.
        xs = microbatches()
        y = [torch.randint(2, (B,), generator=torch.Generator().manual_seed(k)) for k in range(K)]

        def relative_gap(make):
            torch.manual_seed(0)
            ga = make()
            big = make()
            big.load_state_dict(ga.state_dict())
            acc = shadowgrad.ShadowAccumulator(ga.parameters())
            with acc.accumulate():
                for x, t in zip(xs, y):
                    (F.cross_entropy(ga(x), t) / K).backward()
            F.cross_entropy(big(torch.cat(xs)), torch.cat(y)).backward()
            num = sum(float((s - p.grad).pow(2).sum()) for s, p in zip(acc.shadows, big.parameters()))
            den = sum(float(p.grad.pow(2).sum()) for p in big.parameters())
            return (num / den) ** 0.5

        with_bn = relative_gap(lambda: nn.Sequential(nn.Linear(C, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2)))
        without = relative_gap(lambda: nn.Sequential(nn.Linear(C, 16), nn.ReLU(), nn.Linear(16, 2)))
        print(f"\n  ||g_GA - g_big|| / ||g_big||: with BatchNorm {with_bn:.3f}, without {without:.1e}")
        self.assertGreater(with_bn, 0.05)
        self.assertLess(without, 1e-5)


if __name__ == "__main__":
    unittest.main()

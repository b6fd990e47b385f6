"""shadowgrad on models nobody here wrote: torchvision's ResNet-18 (BatchNorm) and torch's own nn.TransformerEncoder,
eager and under torch.compile. Each compares one window's accumulated gradient with the plain `.grad` loop's, per
window (ResNet-18 with 2-image BatchNorm is chaotic over several steps: docs/python.md).

    .venv/bin/python -m unittest python/tests/test_foreign_models.py -v      (with shadowgrad importable)
"""
import copy
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

import shadowgrad

try:
    import torchvision
except ImportError:  # the CPU-only torch 2.13.0 venv has no torchvision that loads beside it
    torchvision = None

K = 3


def plain_window(model, microbatches, loss_fn):
    model.zero_grad(set_to_none=True)
    for x, y in microbatches:
        (loss_fn(model(x), y) / K).backward()
    return [p.grad.clone() for p in model.parameters()]


def shadow_window(model, microbatches, loss_fn, grad_dtype):
    acc = shadowgrad.ShadowAccumulator(model.parameters(), grad_dtype=grad_dtype)
    grads_seen = []
    with acc.accumulate():
        for x, y in microbatches:
            (loss_fn(model(x), y) / K).backward()
            grads_seen.append(any(p.grad is not None for p in model.parameters()))
    return acc, [s.float().clone() for s in acc.shadows], grads_seen


def assert_window_matches(test, plain, shadows, grad_dtype):
    # fp32: the same adds in the same order as AccumulateGrad's; bf16: each fold rounds once into 8 mantissa bits.
    # (bf16: an element summed from larger partial sums can be off by a few bf16 steps of those, relative to the
    # tensor's largest element.)
    rtol, atol = (1e-6, 1e-7) if grad_dtype == torch.float32 else (2e-2, 4e-3)
    test.assertEqual(len(plain), len(shadows))
    for a, b in zip(plain, shadows):
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol * max(1.0, float(a.abs().max())))


def image_batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g)) for _ in range(n)]


def sequence_batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, 8, 16, generator=g), torch.randn(2, 8, 16, generator=g)) for _ in range(n)]


def transformer(layers=2):
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), layers)


@unittest.skipIf(torchvision is None, "torchvision is not installed beside this torch")
class ResNet18Test(unittest.TestCase):
    def window(self, grad_dtype):
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10)  # no weights: nothing is downloaded
        twin = copy.deepcopy(model)
        data = image_batches(K)
        plain = plain_window(model, data, F.cross_entropy)
        _, shadows, grads_seen = shadow_window(twin, data, F.cross_entropy, grad_dtype)
        self.assertFalse(any(grads_seen), "a .grad appeared inside the window")
        assert_window_matches(self, plain, shadows, grad_dtype)
        # BatchNorm's running statistics moved K times in both
        torch.testing.assert_close(twin.bn1.running_mean, model.bn1.running_mean, rtol=0, atol=0)

    def test_fp32_window(self):
        self.window(torch.float32)

    def test_bf16_window(self):
        self.window(torch.bfloat16)


class TransformerEncoderTest(unittest.TestCase):
    def test_fp32_and_bf16_windows(self):
        for grad_dtype in (torch.float32, torch.bfloat16):
            model = transformer()
            twin = copy.deepcopy(model)
            data = sequence_batches(K)
            plain = plain_window(model, data, F.mse_loss)
            _, shadows, grads_seen = shadow_window(twin, data, F.mse_loss, grad_dtype)
            self.assertFalse(any(grads_seen))
            assert_window_matches(self, plain, shadows, grad_dtype)

    def test_a_lost_microbatch_is_caught(self):
        # The comparison must fail when one microbatch's fold is missing (the test can fail).
        model = transformer()
        twin = copy.deepcopy(model)
        data = sequence_batches(K)
        plain = plain_window(model, data, F.mse_loss)
        _, shadows, _ = shadow_window(twin, data[:-1], F.mse_loss, torch.float32)
        with self.assertRaises(AssertionError):
            assert_window_matches(self, plain, shadows, torch.float32)


@unittest.skipUnless(hasattr(torch, "compile"), "torch.compile needs torch >= 2.0")
class CompiledModelTest(unittest.TestCase):
    """A torch.compile'd model inside acc.accumulate(): the compiled backward still ends in each parameter's
    AccumulateGrad node, so shadowgrad's post-hooks fire and fold (docs/python.md, "torch.compile")."""

    def test_compiled_transformer_folds_like_eager(self):
        # One layer: every kind of parameter the encoder has, and inductor's C++ compile of a second layer's kernels
        # spared (the whole process with a cold cache: 37 s of CPU with 2 layers, 28 s with 1, 2026-12-07).
        model = transformer(layers=1)
        twin = copy.deepcopy(model)
        data = sequence_batches(K)
        plain = plain_window(model, data, F.mse_loss)
        compiled = torch.compile(twin)
        acc, shadows, grads_seen = shadow_window(compiled, data, F.mse_loss, torch.float32)
        self.assertFalse(any(grads_seen), "a .grad appeared inside the window: the post-hooks did not fire")
        self.assertEqual(acc.folds, K * len(acc.params))
        # Inductor may fuse and reorder the backward's fp32 ops: equal within fp32 rounding, not bit for bit.
        for a, b in zip(plain, shadows):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * max(1.0, float(a.abs().max())))


class UserHookTest(unittest.TestCase):
    def test_users_post_accumulate_grad_hook_still_fires(self):
        # shadowgrad's folds hang on the AccumulateGrad node, not on the tensor's single post-accumulate slot that
        # register_post_accumulate_grad_hook fills: a user's own hook there keeps working beside it.
        model = transformer()
        seen = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad is not None))
        acc = shadowgrad.ShadowAccumulator(model.parameters())
        with acc.accumulate():
            for x, y in sequence_batches(K):
                (F.mse_loss(model(x), y) / K).backward()
        self.assertEqual(len(seen), K * len(list(model.parameters())))
        self.assertEqual(acc.folds, K * len(acc.params))


if __name__ == "__main__":
    unittest.main()

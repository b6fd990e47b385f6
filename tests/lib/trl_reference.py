#!/usr/bin/env python3
"""TRL 1.16's DPOTrainer as the reference for the preference parity tests (issue 55, docs/preference.md), fp32 on the
CPU, on tiny random Hugging Face models (tests/hf_parity_test.py's build).

`trl_steps` runs DPOTrainer the way it is exact: every pair in ONE batch (per_device_train_batch_size = the number of
pairs, no accumulation), fp32 (bf16=False, use_cpu), the reference log-probs precomputed (precompute_ref_log_probs),
plain SGD (no momentum, no weight decay, constant LR, no warmup, no clipping), no dropout, no gradient checkpointing.
The pre-tokenized rows ({"prompt_ids", "chosen_ids", "rejected_ids"}) reach the collator as they are:
`_prepare_dataset` returns the dataset untouched, so no EOS is added and nothing is re-tokenized. With an adapter
directory, the model is that peft adapter on the base (trainable) and TRL's reference is a frozen copy of the starting
adapter (its "ref" adapter), as TRL does for a PeftModel.

Each step's record holds TRL's loss (the value its compute_loss returned, unrounded) and its metrics under our
metrics.jsonl names: rewards_chosen, rewards_rejected, rewards_accuracy, rewards_margin, logps_chosen, logps_rejected.
`dpo_nll_weight` w > 0 is TRL's RPO: loss_type=[LOSS, "sft"], loss_weights=[1, w].

`direct` computes the same step's loss and metrics by hand in plain torch (float64: log-softmax, the answers' summed
log-probs, the formulas), and `check` holds TRL against it: the loss and metrics of step 1 and step 2 (policy = TRL's
weights after step 1, reference = the start) and the gradient of step 1 ((w0 - w1) / lr against autograd of the hand
loss). What TRL 1.16 does, read from its source and held by `check`:
- sigmoid: -log sigmoid(beta h); hinge: relu(1 - beta h); h = (chosen - ref_chosen) - (rejected - ref_rejected) of
  the answers' summed log-probs; each a mean over the batch's pairs.
- ipo: each log-ratio divided by its own answer's token count, then (h_norm - 1/(2 beta))^2, a mean over pairs.
- sft: the chosen answers' NLL summed over the batch's chosen answer tokens and divided by their count (one mean over
  all chosen tokens, not a mean of per-answer means), times its weight.

Usage:
  trl_reference.py run MODEL_DIR PAIRS.jsonl OUT_DIR [--loss-type sigmoid|ipo|hinge] [--beta B] [--nll-weight W]
                   [--lr LR] [--steps N] [--adapter DIR]   -> OUT_DIR/steps.json, OUT_DIR/model (after the last step)
  trl_reference.py check WORK_DIR   -> builds a tiny Llama and 8 ragged pairs, holds TRL against the hand computation
Exit: 0 pass; 1 fail; 77 skipped (no trl or peft in this Python).
"""
import argparse
import contextlib
import io
import json
import math
import os
import shutil
import sys
import tempfile
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from hf_parity_test import V, build, rel  # noqa: E402

try:
    import datasets
    import peft
    import trl
    from trl.trainer.dpo_trainer import DPOConfig, DPOTrainer
except ImportError as e:
    print(f"skipped: {e.name} is not in this Python (pip install trl==1.16.0 datasets==5.2.0)")
    sys.exit(77)
import transformers  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5.24 on names TRL 1.16 still passes
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
datasets.disable_progress_bars()
datasets.disable_caching()

# TRL's metric name -> ours (metrics.jsonl)
METRICS = {"rewards/chosen": "rewards_chosen", "rewards/rejected": "rewards_rejected",
           "rewards/accuracies": "rewards_accuracy", "rewards/margins": "rewards_margin",
           "logps/chosen": "logps_chosen", "logps/rejected": "logps_rejected"}
LOSS_TYPES = ("sigmoid", "ipo", "hinge")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name: (loss type, dpo_nll_weight, LoRA from a starting adapter, SGD learning rate). The rates put every tensor's
# step-1 update between 2e-3 and 0.9 of its weight, so fp32 weights hold the update to about 1e-5 and step 2 moves.
CASES = {"sigmoid": ("sigmoid", 0.0, False, 1.0), "ipo": ("ipo", 0.0, False, 0.01), "hinge": ("hinge", 0.0, False, 1.0),
         "sigmoid_nll": ("sigmoid", 0.5, False, 1.0), "lora_sigmoid_nll": ("sigmoid", 0.5, True, 1.0)}
# (prompt, chosen, rejected) lengths: ragged, each sequence within 16 tokens; 8 pairs, so K=4 microbatches of 2
PAIR_SHAPES = [(2, 1, 5), (3, 11, 2), (5, 2, 2), (1, 9, 14), (8, 4, 1), (4, 12, 7), (6, 1, 3), (10, 6, 4)]


def make_pairs(shapes=PAIR_SHAPES, seed=3):
    """Random pre-tokenized pairs; the two answers always differ in their first token."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for p, c, r in shapes:
        prompt, chosen, rejected = (torch.randint(0, V, (n,), generator=g).tolist() for n in (p, c, r))
        if rejected[0] == chosen[0]:
            rejected[0] = (chosen[0] + 1) % V
        pairs.append({"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected})
    return pairs


def make_adapter(model_dir, out_dir, r=4, alpha=8.0, seed=11):
    """A peft LoRA adapter on all seven projections with B not zero (init_lora_weights=False)."""
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGETS, lora_dropout=0.0,
                             init_lora_weights=False, task_type="CAUSAL_LM")
    peft.get_peft_model(load_base(model_dir), config).save_pretrained(out_dir)
    return out_dir


def load_base(model_dir, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()


def load_policy(model_dir, adapter_dir=None, dtype=torch.float32, trainable=False):
    model = load_base(model_dir, dtype)
    if adapter_dir:
        model = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=trainable)
        if dtype != torch.float32:
            model = model.to(dtype)
    return model


def tiny_tokenizer():
    """DPOTrainer wants a tokenizer for its pad id; the rows are token ids already, so any vocabulary of V will do."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    vocab = {f"t{i}": i for i in range(V)}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")),
                                                pad_token="t0", eos_token="t1")


def trainable_tensors(model):
    """The trained tensors under the names they have in the saved files (peft's adapter names without `.default`)."""
    if isinstance(model, peft.PeftModel):
        return {n.replace(".default", ""): p for n, p in model.named_parameters() if ".default." in n}
    return dict(model.named_parameters())


class PretokenizedDPOTrainer(DPOTrainer):
    """DPOTrainer fed the rows as they are, recording each training step's loss and metrics unrounded."""

    def __init__(self, *args, **kwargs):
        self.records = []
        super().__init__(*args, **kwargs)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        return dataset

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if self.model.training:
            record = {"loss": float(loss.detach())}
            record.update({ours: self._metrics["train"][theirs][-1] for theirs, ours in METRICS.items()})
            self.records.append(record)
        return loss


class Snapshots(transformers.TrainerCallback):
    """The trained tensors after each step, and their gradients as the optimizer is about to take them."""

    def __init__(self):
        self.trainer, self.weights, self.grads = None, [], []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads.append({n: p.grad.detach().clone() for n, p in trainable_tensors(self.trainer.model).items()})

    def on_step_end(self, args, state, control, **kwargs):
        self.weights.append({n: p.detach().clone() for n, p in trainable_tensors(self.trainer.model).items()})


def dpo_config(output_dir, pairs, loss_type, beta, nll_weight, lr, steps, accumulation):
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r} is not one of {LOSS_TYPES}")
    losses, weights = ([loss_type, "sft"], [1.0, nll_weight]) if nll_weight else ([loss_type], None)
    if len(pairs) % accumulation:
        raise ValueError(f"{len(pairs)} pairs do not split into {accumulation} microbatches")
    return DPOConfig(output_dir=output_dir, per_device_train_batch_size=len(pairs) // accumulation,
                     gradient_accumulation_steps=accumulation,
                     max_steps=steps, learning_rate=lr, optim="sgd", lr_scheduler_type="constant", warmup_steps=0,
                     weight_decay=0.0, max_grad_norm=0.0, bf16=False, fp16=False, use_cpu=True,
                     gradient_checkpointing=False, precompute_ref_log_probs=True, beta=beta, loss_type=losses,
                     loss_weights=weights, max_length=None, disable_dropout=True, report_to="none",
                     save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, seed=0)


def trl_steps(model_dir, pairs, loss_type="sigmoid", beta=0.1, nll_weight=0.0, lr=1.0, steps=1, adapter_dir=None,
              out_dir=None, accumulation=1):
    """`steps` SGD steps of TRL's DPOTrainer with every pair in one batch. Returns (records, weights, grads): each
    step's loss and metrics, the trained tensors before the first step and after each step (weights[0] is the start),
    and each step's gradients. accumulation=K > 1 is TRL's own GA over K microbatches (a control: a mean of
    microbatch means); a step's record is then the mean of its microbatches' records, as TRL logs it.
    With out_dir, save_pretrained writes the model (or the adapter alone) after the last step there."""
    model = load_policy(model_dir, adapter_dir, trainable=True)
    start = {n: p.detach().clone() for n, p in trainable_tensors(model).items()}
    snapshots = Snapshots()
    os.environ.setdefault("TQDM_DISABLE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        trainer = PretokenizedDPOTrainer(
            model=model, args=dpo_config(os.path.join(tmp, "trl"), pairs, loss_type, beta, nll_weight, lr, steps,
                                         accumulation),
            train_dataset=datasets.Dataset.from_list(pairs), processing_class=tiny_tokenizer(),
            callbacks=[snapshots])
        snapshots.trainer = trainer
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
    if len(trainer.records) != steps * accumulation or not len(snapshots.weights) == len(snapshots.grads) == steps:
        raise RuntimeError(f"TRL ran {len(trainer.records)} microbatches and {len(snapshots.weights)} optimizer steps, "
                           f"not {steps} x {accumulation}")
    records = [{k: sum(r[k] for r in trainer.records[i:i + accumulation]) / accumulation for k in trainer.records[i]}
               for i in range(0, len(trainer.records), accumulation)]
    if out_dir:
        if isinstance(trainer.model, peft.PeftModel):
            trainer.model.save_pretrained(out_dir, selected_adapters=["default"])
        else:
            trainer.model.save_pretrained(out_dir)
    return records, [start, *snapshots.weights], snapshots.grads


# --- the same step by hand, plain torch in float64 -------------------------------------------------------------------

def answer_logps(model, pairs):
    """Per pair: the chosen and rejected answers' per-token log-probs (autograd live), each sequence on its own."""
    out = []
    for pair in pairs:
        sides = []
        for answer in (pair["chosen_ids"], pair["rejected_ids"]):
            ids = torch.tensor([pair["prompt_ids"] + answer])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
            sides.append(logp.gather(1, ids[0, 1:, None])[-len(answer):, 0])
        out.append(sides)
    return out


def preference_loss(policy, reference, loss_type, beta, nll_weight):
    """The loss and metrics over all pairs from per-token answer log-probs (lists of [chosen, rejected] tensors)."""
    pc, pr = (torch.stack([p[i].sum() for p in policy]) for i in (0, 1))
    rc, rr = (torch.stack([p[i].sum() for p in reference]).detach() for i in (0, 1))
    if loss_type == "ipo":
        nc, nr = (torch.tensor([float(len(p[i])) for p in policy], dtype=torch.float64) for i in (0, 1))
        per_pair = ((pc - rc) / nc - (pr - rr) / nr - 1 / (2 * beta)) ** 2
    else:
        h = beta * ((pc - rc) - (pr - rr))
        per_pair = -torch.nn.functional.logsigmoid(h) if loss_type == "sigmoid" else torch.relu(1 - h)
    loss = per_pair.mean()
    if nll_weight:
        chosen = torch.cat([p[0] for p in policy])
        loss = loss + nll_weight * (-chosen.sum() / chosen.numel())
    reward_c, reward_r = beta * (pc - rc).detach(), beta * (pr - rr).detach()
    metrics = {"rewards_chosen": reward_c.mean().item(), "rewards_rejected": reward_r.mean().item(),
               "rewards_accuracy": (reward_c > reward_r).double().mean().item(),
               "rewards_margin": (reward_c - reward_r).mean().item(), "logps_chosen": pc.mean().item(),
               "logps_rejected": pr.mean().item()}
    return loss, metrics


def policy_at(model_dir, adapter_dir=None, weights=None):
    """The float64 model at the start, or with `weights` (trained tensors by their saved names) loaded."""
    model = load_policy(model_dir, adapter_dir, torch.float64, trainable=True)
    params = trainable_tensors(model)
    if weights is not None:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(weights[n])
    return model, params


def direct(model_dir, pairs, loss_type, beta, nll_weight, adapter_dir=None, policy_weights=None):
    """The hand computation: reference = the start; policy = the start, or the start with `policy_weights` loaded.
    Returns (loss, metrics, gradients of the trained tensors)."""
    with torch.no_grad():
        ref_logps = answer_logps(policy_at(model_dir, adapter_dir)[0], pairs)
    model, params = policy_at(model_dir, adapter_dir, policy_weights)
    loss, metrics = preference_loss(answer_logps(model, pairs), ref_logps, loss_type, beta, nll_weight)
    loss.backward()
    return loss.item(), metrics, {n: p.grad.detach().clone() for n, p in params.items()}


def wrong_loss(model_dir, pairs, loss_type, beta, nll_weight, adapter_dir, policy_weights):
    """Controls: the sft term as a mean of per-answer means, or IPO without its length normalisation."""
    with torch.no_grad():
        ref = answer_logps(policy_at(model_dir, adapter_dir)[0], pairs)
        pol = answer_logps(policy_at(model_dir, adapter_dir, policy_weights)[0], pairs)
        if nll_weight:
            dpo = preference_loss(pol, ref, loss_type, beta, 0)[0].item()
            return dpo + nll_weight * -sum(p[0].mean().item() for p in pol) / len(pol), "sft as a mean of means"
        h = torch.stack([(a[0].sum() - b[0].sum()) - (a[1].sum() - b[1].sum()) for a, b in zip(pol, ref)])
        return ((h - 1 / (2 * beta)) ** 2).mean().item(), "IPO without length normalisation"


# --- check: TRL against the hand computation -------------------------------------------------------------------------

def record_error(theirs, loss, metrics, beta):
    """The largest relative error of a step's loss and metrics against the hand values. A reward is beta times a
    difference of two summed log-probs, so its error is taken relative to beta x the log-probs' size (rewards are 0 at
    step 1, and fp32's cancellation sits at that scale); the accuracy must be equal."""
    reward_scale = beta * max(abs(metrics["logps_chosen"]), abs(metrics["logps_rejected"]))
    errors = {"loss": abs(theirs["loss"] - loss) / abs(loss)}
    for name, value in metrics.items():
        scale = reward_scale if name.startswith("rewards_") else abs(value)
        errors[name] = (theirs[name] != value) if name == "rewards_accuracy" else abs(theirs[name] - value) / scale
    return max(errors.values()), max(errors, key=errors.get)


def compare_records(label, theirs, loss, metrics, beta, tol):
    worst, where = record_error(theirs, loss, metrics, beta)
    shown = ", ".join(f"{n} {theirs[n]:.6g}" for n in metrics)
    print(f"  {label}: loss {theirs['loss']:.8f} (by hand {loss:.8f}), {shown}; worst rel err {worst:.2e} ({where}; "
          f"limit {tol:g})")
    return worst <= tol


def check_case(model_dir, pairs, loss_type, nll_weight, adapter_dir, lr, beta=0.1, tol=1e-6, grad_tol=1e-5):
    label = f"{loss_type}{f'+sft({nll_weight:g})' if nll_weight else ''}{' LoRA' if adapter_dir else ''}"
    print(f"case {label}, beta {beta:g}, SGD lr {lr:g}:")
    records, weights, trl_grads = trl_steps(model_dir, pairs, loss_type, beta, nll_weight, lr, steps=2,
                                            adapter_dir=adapter_dir)
    ok = True
    loss1, metrics1, grads = direct(model_dir, pairs, loss_type, beta, nll_weight, adapter_dir)
    ok &= compare_records("step 1", records[0], loss1, metrics1, beta, tol)
    errors = {n: rel(trl_grads[0][n], grads[n]) for n in grads}
    worst = max(errors, key=errors.get)
    grad_err = errors[worst]
    print(f"  step-1 gradients, TRL's .grad against autograd of the hand loss: max rel err {grad_err:.2e} (limit "
          f"{grad_tol:g}; at {worst})")
    sgd_err = max(rel(weights[0][n] - lr * trl_grads[0][n], weights[1][n]) for n in grads)
    ratio = min((weights[0][n] - weights[1][n]).norm().item() / weights[0][n].norm().item() for n in grads)
    print(f"  step-1 weights against w0 - lr x TRL's .grad (plain SGD): max rel err {sgd_err:.2e}; the smallest "
          f"update is {ratio:.1e} of its weight")
    ok &= sgd_err <= 1e-6
    ok &= grad_err <= grad_tol
    loss2, metrics2, _ = direct(model_dir, pairs, loss_type, beta, nll_weight, adapter_dir, policy_weights=weights[1])
    ok &= compare_records("step 2 (policy = TRL's w1)", records[1], loss2, metrics2, beta, tol)
    # a control that must miss: the sft term as a mean of per-answer means (step 1), or IPO without its length
    # normalisation (step 2: at step 1 every log-ratio is 0)
    if nll_weight or loss_type == "ipo":
        step = 0 if nll_weight else 1
        wrong, what = wrong_loss(model_dir, pairs, loss_type, beta, nll_weight, adapter_dir, weights[step])
        miss = abs(records[step]["loss"] - wrong) / abs(wrong)
        print(f"  control, {what} at step {step + 1}: {wrong:.8f}, misses TRL by {miss:.2e} (must exceed 1e-3)")
        ok &= miss > 1e-3
    return ok


def check(work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir = os.path.join(work, "llama")
    build("Llama", {}).save_pretrained(model_dir)
    adapter_dir = make_adapter(model_dir, os.path.join(work, "adapter"))
    pairs = make_pairs()
    print(f"trl {trl.__version__}, peft {peft.__version__}, transformers {transformers.__version__}, torch "
          f"{torch.__version__}; {len(pairs)} pairs, answers {sum(len(p['chosen_ids']) for p in pairs)} chosen and "
          f"{sum(len(p['rejected_ids']) for p in pairs)} rejected tokens")
    failed = [name for name, (loss_type, nll_weight, lora, lr) in CASES.items()
              if not check_case(model_dir, pairs, loss_type, nll_weight, adapter_dir if lora else None, lr)]
    if failed:
        sys.exit(f"FAILED: {failed}")
    print("trl_reference: TRL agrees with the hand computation in every case")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("model_dir")
    r.add_argument("pairs")
    r.add_argument("out_dir")
    r.add_argument("--loss-type", default="sigmoid", choices=LOSS_TYPES)
    r.add_argument("--beta", type=float, default=0.1)
    r.add_argument("--nll-weight", type=float, default=0.0)
    r.add_argument("--lr", type=float, default=1.0)
    r.add_argument("--steps", type=int, default=1)
    r.add_argument("--adapter")
    c = sub.add_parser("check")
    c.add_argument("work")
    args = parser.parse_args()
    if args.command == "check":
        check(args.work)
        return
    pairs = [json.loads(line) for line in open(args.pairs) if line.strip()]
    os.makedirs(args.out_dir, exist_ok=True)
    records, _, _ = trl_steps(args.model_dir, pairs, args.loss_type, args.beta, args.nll_weight, args.lr, args.steps,
                           args.adapter, os.path.join(args.out_dir, "model"))
    with open(os.path.join(args.out_dir, "steps.json"), "w") as f:
        json.dump(records, f, indent=1)
    print(json.dumps(records))


if __name__ == "__main__":
    main()

"""Pre-tokenized preference pairs for the shell tests (no tokenizer needed): prompts of 1-6 tokens, answers of 1-9;
the chosen answer counts up from the prompt's last token (learnable), the rejected one is random.

Usage: python3 tests/lib/ragged_pairs.py DIR NAME:PAIRS:SEED ... [--other]
writes DIR/NAME.jsonl for each; with --other also DIR/NAME_other.jsonl, its first chosen answer changed (another file
for a refused resume).
"""
import json
import sys


def pairs(n, seed):
    x, rows = seed, []

    def nxt():
        nonlocal x
        x = (x * 1103515245 + 12345) % 2**31
        return x >> 8

    for _ in range(n):
        prompt = [nxt() % 64 for _ in range(1 + nxt() % 6)]
        chosen = [(prompt[-1] + 1 + j) % 64 for j in range(1 + nxt() % 9)]
        rejected = [nxt() % 64 for _ in range(1 + nxt() % 9)]
        rows.append({"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected})
    return rows


def write(path, rows):
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")


def main(argv):
    out, specs = argv[0], [a for a in argv[1:] if a != "--other"]
    for spec in specs:
        name, n, seed = spec.split(":")
        rows = pairs(int(n), int(seed))
        write(f"{out}/{name}.jsonl", rows)
        if "--other" in argv:
            rows[0]["chosen_ids"] = [1]
            write(f"{out}/{name}_other.jsonl", rows)


if __name__ == "__main__":
    main(sys.argv[1:])

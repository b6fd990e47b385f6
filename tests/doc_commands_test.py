#!/usr/bin/env python3
"""Every command line in README.md and docs/*.md that runs build/..., scripts/... or bench/... must at least parse.

Measured figures may drift with the machine; flags and config keys must not. For each such command (in fenced code
blocks, and in inline `code` spans) this checks, cheaply and without training:
- the program exists, and `--help` exits 0 (scripts) or it is a built binary;
- every --flag it uses appears in that program's --help;
- every key=value it passes to the trainer (trainer, sweep.sh, train.sh, launch.sh, memory_table.sh) is a config key;
- a complete `build/trainer CONFIG key=value...` line (no placeholders) passes `--print-config`, unless the docs show
  it as a bad-input example (the next line of the block starts with `error:`), which must then exit 2.

And the figures the docs claim exactly, which must come out exactly:
- docs/config.md and configs/base.yml are what `build/trainer --help-config-markdown` and `--print-config` print;
- an error message shown after `<!-- exact: COMMAND -->` (one comment per `error:` entry of the fenced block that
  follows, in order; a wrapped entry is joined with spaces) is COMMAND's `error:` line, character for character,
  with exit 2. COMMAND runs in a scratch directory, so runs/ lands there.

Usage: tests/doc_commands_test.py REPO BUILD_DIR     Exit: 0 all parse; 1 some do not (each listed).
Cost: one --help per program, one --print-config per trainer line, and each exact example: a few seconds.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

REPO, BUILD = sys.argv[1], sys.argv[2]
TRAINER_ARGS = {"trainer", "sweep.sh", "train.sh", "launch.sh", "memory_table.sh"}
PROGRAM = re.compile(r"^(?:\./)?(build/[\w.-]+|(?:scripts|bench)/[\w./-]+\.sh)$")


def run(args, timeout=120, cwd=REPO, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd, **kw)


def help_text(program):
    path = os.path.join(BUILD, program[len("build/"):]) if program.startswith("build/") else os.path.join(REPO, program)
    if not os.access(path, os.X_OK):
        return None, f"{program}: no such executable ({path})"
    try:  # --help must answer at once: a program that ignores it and starts working is a rough edge
        r = run([path, "--help"], timeout=10)
    except subprocess.TimeoutExpired:
        return None, f"{program} --help did not answer within 10 s (does it ignore --help and start working?)"
    if r.returncode != 0:
        return None, f"{program} --help exited {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}"
    return r.stdout + r.stderr, None


def config_keys():
    r = run([os.path.join(BUILD, "trainer"), "--help-config"])
    return set(re.findall(r"^\s*([a-z][a-z0-9_]*)\s", r.stdout, re.M))


def commands(path):
    """(line number, command text, next line) for each command in the file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    in_block = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_block = not in_block
            i += 1
            continue
        if in_block:
            text, start = line, i
            while text.rstrip().endswith("\\") and i + 1 < len(lines):  # continuation lines
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i]
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            yield start + 1, text, nxt
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield i + 1, span, ""
        i += 1


def split_commands(text):
    text = re.sub(r"^\s*\$\s+", "", text)
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:
        return []
    out, cur = [], []
    for t in tokens:
        if t in ("|", "||", "&&", ";", "&") or t.startswith(">") or t.startswith("2>"):
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    out.append(cur)
    result = []
    for cmd in out:
        while cmd and re.match(r"^[A-Z_][A-Z0-9_]*=", cmd[0]):  # VAR=value prefixes
            cmd = cmd[1:]
        if cmd and cmd[0] in ("sudo", "exec", "time", "nice"):
            cmd = cmd[1:]
        if cmd and PROGRAM.match(cmd[0]):
            result.append(cmd)
    return result


def generated_files():
    """Problems with the files generated from the config key table (src/config/ConfigKeys.def)."""
    problems = []
    for rel, flag in (("docs/config.md", "--help-config-markdown"), ("configs/base.yml", "--print-config")):
        r = run([os.path.join(BUILD, "trainer"), flag])
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            if r.returncode != 0 or r.stdout != f.read():
                problems.append(f"{rel} is not what `build/trainer {flag}` prints; regenerate it: "
                                f"build/trainer {flag} > {rel}")
    return problems


EXACT = re.compile(r"^<!--\s*exact:\s*(.+?)\s*-->\s*$")


def exact_examples(path):
    """(line number, command, the error entry it must print) for each `<!-- exact: COMMAND -->` comment."""
    lines = open(path, encoding="utf-8").read().split("\n")
    pending, entries, out = [], [], []
    in_block = False
    for i, line in enumerate(lines):
        m = EXACT.match(line.strip())
        if m and not in_block:
            pending.append((i + 1, m.group(1)))
        elif line.lstrip().startswith("```"):
            in_block = not in_block
            if not in_block and pending:  # the block that follows the comments has ended
                for (lineno, cmd), entry in zip(pending, entries + [None] * len(pending)):
                    out.append((lineno, cmd, entry))
                pending, entries = [], []
        elif in_block and pending:
            if line.startswith("error:"):
                entries.append(line.strip())
            elif entries and line.strip() and not line.lstrip().startswith(("#", "build/", "scripts/", "bench/")):
                entries[-1] += " " + line.strip()  # a wrapped message
    return out


def check_exact(rel, lineno, command, expected):
    """Runs COMMAND (VAR=value prefixes become its environment) and compares its error line with the doc's."""
    where = f"{rel}:{lineno}: {command}"
    if expected is None:
        return [f"{where}\n    no `error:` entry in the fenced block after the comment"]
    tokens = shlex.split(command)
    env = dict(os.environ)
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):
        key, value = tokens.pop(0).split("=", 1)
        env[key] = value
    if not tokens or tokens[0] != "build/trainer":
        return [f"{where}\n    an exact example must run build/trainer"]
    with tempfile.TemporaryDirectory(prefix="doc_exact.") as scratch:
        r = run([os.path.join(BUILD, "trainer"), *tokens[1:]], timeout=300, cwd=scratch, env=env)
    said = [re.sub(r"^\[rank \d+\] ", "", l) for l in (r.stdout + r.stderr).split("\n")]
    said = [l for l in said if l.startswith("error:")]
    if r.returncode != 2 or said[-1:] != [expected]:
        return [f"{where}\n    the doc says: {expected}\n    it printed ({r.returncode}): "
                f"{said[-1] if said else (r.stderr or r.stdout).strip()[-300:]}"]
    return []


def main():
    docs = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    keys = config_keys()
    if len(keys) < 20:
        print(f"could not read the config keys from trainer --help-config (got {len(keys)})")
        return 1
    helps, problems, checked = {}, [], 0
    for doc in docs:
        rel = os.path.relpath(doc, REPO)
        for lineno, text, nxt in commands(doc):
            for cmd in split_commands(text):
                program = PROGRAM.match(cmd[0]).group(1)
                where = f"{rel}:{lineno}: {' '.join(cmd)}"
                if program not in helps:
                    helps[program] = help_text(program)
                help_out, err = helps[program]
                checked += 1
                if err:
                    problems.append(f"{where}\n    {err}")
                    continue
                joined = " ".join(cmd)
                placeholder = any(c in joined for c in "<>[]…") or "..." in joined or any(
                    t.isupper() for t in cmd[1:])  # e.g. CONFIG, RUN, key=v1,v2,...: only flags are checked
                expect_error = nxt.lstrip().startswith("error:")
                for tok in cmd[1:]:
                    flag = tok.split("=", 1)[0]
                    if flag.startswith("--") and not re.search(re.escape(flag) + r"\b", help_out):
                        problems.append(f"{where}\n    flag {flag} is not in `{program} --help`")
                    elif (not tok.startswith("-") and "=" in tok and os.path.basename(program) in TRAINER_ARGS
                          and not placeholder and not expect_error):
                        key = tok.split("=", 1)[0]
                        if re.match(r"^[a-z_][a-z0-9_]*$", key) and key not in keys:
                            problems.append(f"{where}\n    '{key}' is not a config key")
                if program == "build/trainer" and len(cmd) > 1 and not cmd[1].startswith("-"):
                    if placeholder or not cmd[1].endswith((".yml", ".yaml")):
                        continue
                    args = [a for a in cmd[1:] if not a.startswith("--")]
                    if not os.path.exists(os.path.join(REPO, "configs", args[0])) and not os.path.exists(
                            os.path.join(REPO, args[0])):
                        continue  # a config the docs create on the way (e.g. runs/x/config.yml)
                    if any(a.startswith("load_parameters_path=") and not os.path.isdir(
                            os.path.join(REPO, a.split("=", 1)[1])) for a in args):
                        continue  # a model directory scripts/prepare_model.sh makes
                    env = dict(os.environ, HOME=os.environ.get("HOME", "/tmp"))
                    r = run([os.path.join(BUILD, "trainer"), *args, "--print-config"], env=env)
                    if expect_error and r.returncode != 2:
                        problems.append(f"{where}\n    shown as a bad-input example, but exited {r.returncode}")
                    elif not expect_error and r.returncode != 0:
                        problems.append(f"{where}\n    --print-config exited {r.returncode}: {r.stderr.strip()[-300:]}")
    problems += generated_files()
    exact = 0
    for doc in docs:
        for lineno, command, expected in exact_examples(doc):
            problems += check_exact(os.path.relpath(doc, REPO), lineno, command, expected)
            exact += 1
    for p in problems:
        print("FAIL", p)
    print(f"doc_commands: {checked} commands checked in {len(docs)} files, 2 generated files and {exact} exact "
          f"examples compared, {len(problems)} problems")
    return 1 if problems or checked < 10 or exact < 2 else 0


if __name__ == "__main__":
    sys.exit(main())

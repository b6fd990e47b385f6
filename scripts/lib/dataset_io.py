"""What the prepare_* scripts share: rows read from JSONL, JSON or Parquet with the label an error names (FILE:LINE,
or FILE:row N for Parquet), the tokenizer (a Hugging Face model directory or a SentencePiece model), the checks on
messages and token ids, and the atomic write of the output (its directory created).

Bad input ends the program with exit 2 and one line on stderr (`fail`); a row's own problem is a `BadRow(field,
what)`, which the caller prefixes with the row's label.
"""
import argparse
import json
import os
import sys

EXIT_BAD_INPUT = 2
MAX_ID = 2**32  # ids are stored as uint32
NEWLINE = b"\n"


class BadRow(Exception):
    """A problem with one row: str() is `field: what` (or `what` when no single field is to blame)."""

    def __init__(self, field, what):
        super().__init__(f"{field}: {what}" if field else what)


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def parse_args(doc, who):
    """The prepare scripts' shared command line: IN OUT [--tokenizer DIR] [--max-length N] [--long truncate|drop];
    returns (args, the Tokenizer or None)."""
    ap = argparse.ArgumentParser(prog=who, description=doc.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--tokenizer")
    ap.add_argument("--max-length", type=int, default=0)
    ap.add_argument("--long", choices=["truncate", "drop"], default="truncate")
    args = ap.parse_args()
    if args.max_length < 0 or args.max_length == 1:
        fail(f"{who}: --max-length must be 0 (off) or >= 2")
    return args, Tokenizer(args.tokenizer, who) if args.tokenizer else None


# ---- rows ------------------------------------------------------------------------------------------------------------

def read_rows(path):
    """Yields (label, row) for each row of PATH: a Parquet file (by its magic; a null column is left out of its row,
    rows counted from 0), a JSON file holding a list of objects (the first character is `[`), or JSON Lines (blank
    lines skipped). A line that is not JSON exits 2 naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if data[:4] == b"PAR1":
        yield from _parquet_rows(path)
        return
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        fail(f"{path}:{data.count(NEWLINE, 0, e.start) + 1}: not UTF-8 text")
    if text.lstrip()[:1] == "[":
        yield from _json_list_rows(path, text)
        return
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as e:
                hint = " (a .json file holds one list of objects)" if path.endswith(".json") else ""
                at = "" if e.msg.endswith(" at") else " at"  # "Unterminated string starting at" has its own
                fail(f"{path}:{number}: not JSON: {e.msg}{at} column {e.colno}{hint}")


def _json_list_rows(path, text):
    """The elements of a JSON list, each labelled with the line it starts on."""
    decoder = json.JSONDecoder()
    line, counted = 1, 0

    def at(pos):
        nonlocal line, counted
        line += text.count("\n", counted, pos)
        counted = pos
        return f"{path}:{line}"

    def skip(pos):
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    pos = skip(text.index("[") + 1)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        try:
            row, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            fail(f"{at(e.pos)}: not JSON: {e.msg}")
        yield at(pos), row
        pos = skip(end)
        if pos < len(text) and text[pos] == "]":
            if text[skip(pos + 1):]:
                fail(f"{at(skip(pos + 1))}: not JSON: text after the list's end")
            return
        if pos >= len(text) or text[pos] != ",":
            fail(f"{at(pos)}: not JSON: expected ',' or ']' after a list element")
        pos = skip(pos + 1)


def _parquet_rows(path):
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        fail(f"{path}: reading Parquet needs pyarrow in the venv (scripts/lib/setup.sh installs it)")
    try:
        batches = pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=1024)
        n = 0
        for batch in batches:
            for row in batch.to_pylist():  # a null is an absent field: a column another row's form fills
                yield f"{path}:row {n}", {k: x for k, x in row.items() if x is not None}
                n += 1
    except (pyarrow.ArrowException, OSError) as e:
        fail(f"{path}: not a Parquet file pyarrow can read: {e}")


# ---- fields ----------------------------------------------------------------------------------------------------------

def need(row, key, kind=str):
    if key not in row or row[key] is None:
        raise BadRow(key, "missing")
    if not isinstance(row[key], kind):
        raise BadRow(key, f"must be a {kind.__name__}, got {type(row[key]).__name__}")
    return row[key]


def messages(value, field, roles=None):
    """VALUE checked as a list of {"role": str, "content": str} (other keys kept, for the chat template); ROLES, when
    given, are the only roles allowed."""
    if not isinstance(value, list):
        raise BadRow(field, f"must be a list of messages, got {type(value).__name__}")
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise BadRow(f"{field}[{i}]", f"must be an object {{\"role\", \"content\"}}, got {type(m).__name__}")
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                raise BadRow(f"{field}[{i}].{key}", f"must be a string, got {type(m.get(key)).__name__}")
        if roles and m["role"] not in roles:
            raise BadRow(f"{field}[{i}].role", f"{m['role']!r}: must be {' or '.join(roles)}")
    return list(value)


def token_ids(value, field, vocab_size=None):
    """VALUE checked as a list of token ids: integers in [0, vocab_size), or in [0, 2^32) without a tokenizer."""
    if not isinstance(value, list):
        raise BadRow(field, f"must be a list of token ids, got {type(value).__name__}")
    limit = vocab_size or MAX_ID
    for i, t in enumerate(value):
        if not isinstance(t, int) or isinstance(t, bool) or t < 0 or t >= limit:
            where = f"the tokenizer's vocabulary [0, {vocab_size})" if vocab_size else "[0, 2^32)"
            raise BadRow(f"{field}[{i}]", f"{t!r} is not a token id in {where}")
    return list(value)


def common_prefix(a, b):
    """How many leading ids A and B share (TRL's common_prefix_length)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# ---- the tokenizer ---------------------------------------------------------------------------------------------------

class Tokenizer:
    """A Hugging Face model directory (tokenizer.json, the chat template) or a SentencePiece tokenizer.model.
    encode(text): the text's ids as the tokenizer gives them, its special tokens (a BOS) included; prompt_answers(prompt,
    answers) and chat_answers(prompt, answers): TRL's tokenize step for text and for messages; eos; vocab_size;
    render(messages, generation_prompt); chat(messages); continuation(prompt, answer); prompts_cut: how many prompts
    prompt_answers and chat_answers cut (their end not shared with prompt + answer)."""

    def __init__(self, path, who):
        self.hf = None
        self.sp = None
        self.prompts_cut = 0
        if os.path.isfile(path) and not path.endswith(".model"):
            fail(f"{who}: --tokenizer {path}: a file; --tokenizer takes the model's directory (the one holding "
                 f"tokenizer.json): --tokenizer {os.path.dirname(path) or '.'}")
        sp_file = path if os.path.isfile(path) else os.path.join(path, "tokenizer.model")
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "tokenizer.json")):
            from hf_tokenizer import load_tokenizer  # the venv's transformers; tokenizer.json and the chat template
            self.hf = load_tokenizer(path)
            self.eos = self.hf.eos_token_id
            self.vocab_size = len(self.hf)
        elif os.path.exists(sp_file):
            try:
                import sentencepiece
            except ImportError:
                fail(f"{who}: --tokenizer {path}: a SentencePiece model needs the sentencepiece package in the venv")
            self.sp = sentencepiece.SentencePieceProcessor(model_file=sp_file)
            self.eos = self.sp.eos_id() if self.sp.eos_id() >= 0 else None
            self.vocab_size = self.sp.get_piece_size()
            self.bos = [self.sp.bos_id()] if self.sp.bos_id() >= 0 else []
        else:
            fail(f"{who}: --tokenizer {path}: neither tokenizer.json nor a SentencePiece model there (--tokenizer "
                 "takes the model's directory)")

    def encode(self, text):
        """TEXT's ids as TRL's tokenize step gets them: the tokenizer called on the whole string, with the special
        tokens it adds itself (a BOS, whether add_bos_token or the post-processor adds it); a SentencePiece model's
        BOS when it has one."""
        if self.hf:
            return list(self.hf(text=text)["input_ids"])
        return self.bos + list(self.sp.encode(text))

    def with_eos(self, text):
        """TEXT's ids with the EOS at the end, as TRL adds it: appended to the text unless the text already ends with
        it (a SentencePiece model does not read its EOS from text: the id is appended)."""
        if self.sp:
            return self.encode(text) + ([self.eos] if self.eos is not None else [])
        eos = self.hf.eos_token
        return self.encode(text if not eos or text.endswith(eos) else text + eos)

    def prompt_answers(self, prompt, answers):
        """(prompt ids, [answer ids]) as TRL 1.16's tokenize step splits text rows (DPOTrainer; SFTTrainer's
        prompt/completion): the prompt and each prompt + answer (EOS added as in with_eos) encoded as one string; the
        prompt keeps the tokens its own encoding shares with every joint one, and each answer is the rest of its joint
        encoding. Where the prompt's last tokens merge with the answer's first (a prompt ending in a space, under a
        byte-level BPE), they are left out of the prompt, as in TRL, and counted in prompts_cut."""
        return self._split(self.encode(prompt), [self.with_eos(prompt + a) for a in answers])

    def chat_answers(self, prompt, answers, field):
        """(prompt ids, [answer ids]) as TRL 1.16 splits conversational rows: the prompt rendered with the generation
        prompt, each prompt + answer rendered whole, split where the renderings diverge (a template that renders the
        prompt alone differently, as Qwen3's empty think block, leaves that end out of the prompt, as in TRL)."""
        return self._split(self.render(prompt, True, field), [self.render(prompt + a, False, field) for a in answers])

    def _split(self, head, joint):
        n = min(common_prefix(head, j) for j in joint)
        self.prompts_cut += n < len(head)
        return head[:n], [j[n:] for j in joint]

    def render(self, turns, generation_prompt, field):
        """The chat template's token ids for TURNS (with the assistant header after them when GENERATION_PROMPT)."""
        if self.hf is None or not self.hf.chat_template:
            raise BadRow(field, "messages need --tokenizer with a chat template (a Hugging Face model directory)")
        out = self.hf.apply_chat_template(turns, tokenize=True, add_generation_prompt=generation_prompt)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    def continuation(self, prompt, answer, field):
        """(prompt ids, answer ids) for an assistant turn of a conversation: the turns before it rendered with the
        generation prompt, and what rendering them with the turn adds after it. A template whose rendering of the
        turns before is not a prefix of the whole is refused (pre-tokenize instead)."""
        head = self.render(prompt, True, field) if prompt else []
        whole = self.render(prompt + answer, False, field)
        if whole[: len(head)] != head:
            raise BadRow(field, "the chat template renders the prompt differently once the answer follows; it "
                                "cannot split prompt from answer (pre-tokenize the rows instead)")
        return head, whole[len(head):]

    def chat(self, turns, field):
        """Token ids of the conversation and a target flag per token: the assistant turns' own tokens. Each assistant
        turn's span is the rendering of the turns up to it minus the rendering, with a generation prompt, of the turns
        before it."""
        ids = self.render(turns, False, field)
        flags = [0] * len(ids)
        for i, m in enumerate(turns):
            if m["role"] != "assistant":
                continue
            before, upto = self.continuation(turns[:i], turns[i: i + 1], field)
            if ids[: len(before) + len(upto)] != before + upto:
                raise BadRow(field, f"the chat template renders turn {i} differently once later turns follow; it "
                                    "cannot mark the assistant's tokens (pre-tokenize with input_ids and labels)")
            for j in range(len(before), len(before) + len(upto)):
                flags[j] = 1
        return ids, flags


# ---- the output ------------------------------------------------------------------------------------------------------

def write_atomically(path, chunks, who):
    """Writes the byte strings CHUNKS to PATH through PATH.tmp, fsync and rename, creating PATH's directory."""
    tmp = path + ".tmp"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.isfile(tmp):
            os.remove(tmp)
        fail(f"{who}: cannot write {path}: {e.strerror or e}")

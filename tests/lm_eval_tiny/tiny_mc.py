"""The data of the tiny multiple-choice task (tests/evaluate_test.py): tiny_mc.jsonl beside this file, read offline.
lm-eval calls `load` through the task YAMLs' `custom_dataset: !function tiny_mc.load`."""
import os

import datasets

HERE = os.path.dirname(os.path.abspath(__file__))
# The tiny tokenizer's words (ids 2..63 after <pad> and <eos>); every word of tiny_mc.jsonl is one of them.
WORDS = ("a an the this that one two three four five red blue green black white big small old new cat dog fox owl "
         "bird fish cow horse sheep mouse bee tree river hill sea road house city boat king queen sun moon star rain "
         "snow wind runs sees eats finds likes has is was and or not under over near fast what").split()


def load(**kwargs):
    return datasets.load_dataset("json", data_files={"test": os.path.join(HERE, "tiny_mc.jsonl")})


def tokenizer():
    """The tiny model's tokenizer: one id per word (split on whitespace), <pad> 0 and <eos> 1, 64 ids in all."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"<pad>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="<eos>")

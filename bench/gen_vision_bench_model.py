#!/usr/bin/env python3
"""Writes a random-weight LLaVA model directory for the vision bench (no download).

  python3 bench/gen_vision_bench_model.py OUT_DIR [--layout new|old] [--seed N]

The vision tower has the shape of CLIP ViT-L/14-336 (llava-1.5's tower): hidden
1024, 24 layers, 16 heads, FFN 4096, quick_gelu, 336x336 images in 14x14 patches
(576 patches + the class row), vision_feature_layer -2 (23 layers run),
"default" strategy (576 tokens per image), a 2-layer gelu projector with biases.
The decoder is deliberately small (Llama, hidden 1024, 2 layers, vocab 4096) so
compiling and running stay cheap: the bench measures the tower.

The files are those of tests/gen_llava_fixtures.py's llava-1.5 style fixture
(same helpers, imported from tests/): config.json, generation_config.json,
model.safetensors in the transformers-4.x key layout of --layout ("new": 4.52+,
"old": before), a byte-level BPE tokenizer with <image> and <pad> added tokens,
preprocessor_config.json (CLIPImageProcessor at 336), processor_config.json and
llava-hf's chat_template.json. The weights are transformers' own random init
(seeded), not trained: only the timings mean anything.

Needs torch, transformers, tokenizers and safetensors (bench only, never CI).
"""

import argparse
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

TOKENIZER_VOCAB = 512  # what the training text of tests/gen_model_fixtures.py supports
MODEL_VOCAB = 4096     # embedding / lm_head rows (the ids past the tokenizer's are unused)


def require_hf():
    missing = []
    for mod in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        sys.exit("error: the vision bench needs the python packages " + ", ".join(missing) +
                 " (pip install torch transformers tokenizers safetensors); they are a "
                 "bench-only dependency, not installed by scripts/install-deps.sh")


def spec(layout):
    import gen_llava_fixtures as glf
    size = 336
    return dict(
        layout=layout,
        tokenizer=dict(style="gpt2", specials=["<s>", "</s>", "<image>", "<pad>"], bos="<s>"),
        bos="<s>", eos="</s>", pad="<pad>", unk=None,
        # CLIP ViT-L/14-336; like llava-1.5-7b-hf's config, hidden_act and
        # layer_norm_eps are left to CLIP's defaults (quick_gelu, 1e-5).
        vision=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                    num_hidden_layers=24, num_attention_heads=16, image_size=size,
                    patch_size=14, projection_dim=768),
        vision_config_omit=["hidden_act", "layer_norm_eps"],
        text_arch="llama",
        text=dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=2,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=64,
                  rope_theta=10000.0, max_position_embeddings=2048, rms_norm_eps=1e-5,
                  tie_word_embeddings=False),
        llava=dict(vision_feature_select_strategy="default", vision_feature_layer=-2,
                   projector_hidden_act="gelu", multimodal_projector_bias=True),
        num_additional_image_tokens=1,
        image_processor=dict(glf.CLIP_PROCESSOR, crop_size={"height": size, "width": size},
                             size={"shortest_edge": size}),
        processor_files="preprocessor_config.json",
        chat_template_file="chat_template.json", chat_template=glf.llava_hf_template,
    )


def make(out, layout, seed):
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlavaForConditionalGeneration
    import gen_llava_fixtures as glf
    import gen_model_fixtures as gm
    s = spec(layout)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    ts = s["tokenizer"]
    raw = gm.train_tokenizer(ts["style"], ts["specials"], TOKENIZER_VOCAB)
    gm.set_bos_post_processor(raw, ts["bos"])
    glf.write_tokenizer(out, s, raw)
    glf.write_processor_files(out, s)
    tok = AutoTokenizer.from_pretrained(out)
    ids = {k: tok.convert_tokens_to_ids(s[k]) for k in ("bos", "eos", "pad")}
    ids["image"] = tok.convert_tokens_to_ids("<image>")
    cfg = glf.build_config(s, ids)
    cfg.text_config.vocab_size = MODEL_VOCAB
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration._from_config(cfg, dtype=torch.float32)
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=ids["bos"], eos_token_id=ids["eos"],
                                               pad_token_id=ids["pad"])
    model.save_pretrained(out, safe_serialization=True)
    glf.write_checkpoint(out, model, layout)
    glf.rewrite_config(out, s)
    n = glf.tokens_per_image(s)
    print(f"wrote {out}: CLIP-L/14-336 tower ({s['vision']['num_hidden_layers']} layers, "
          f"{n} tokens per image), Llama decoder hidden {s['text']['hidden_size']} x "
          f"{s['text']['num_hidden_layers']} layers, vocab {MODEL_VOCAB}, layout {layout}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="model directory to (re)write")
    ap.add_argument("--layout", choices=["new", "old"], default="new",
                    help="checkpoint key layout: transformers >= 4.52 (new) or before (old)")
    ap.add_argument("--seed", type=int, default=8008)
    a = ap.parse_args()
    require_hf()
    make(a.out, a.layout, a.seed)


if __name__ == "__main__":
    main()

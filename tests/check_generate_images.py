#!/usr/bin/env python3
"""`xrt generate --image ... --dry-run` against HF: compiles the three tiny LLaVA fixtures
(tests/fixtures/llava) and, for every reference case with images, checks that the prompt ids
xrt makes (raw prompt, or --chat with the images in the user turn) are HF's input_ids and the
image spans sit on HF's image token positions; then the CLI's image errors (a text model, an
undecodable file, a missing file, a count mismatch) name the image and exit 1.

usage: check_generate_images.py XCC XRT SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = ["llava_clip_llama", "llava_clip_qwen2_full", "llava_siglip"]


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    xcc, xrt, src = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    fixtures = src / "tests/fixtures/llava"
    images = fixtures / "images"
    failures = []
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            art = f"{tmp}/{model}.xpk"
            subprocess.run([xcc, "compile", str(fixtures / model), "-o", art, "-q"], check=True)
            ref = json.loads((fixtures / model / "reference.json").read_text())
            for case in ref["cases"]:
                if not case["images"]:
                    continue
                cmd = [xrt, "generate", art, "--dry-run"]
                if case["prompt"] is None:
                    # The chat cases are one user turn: the images, then one text part.
                    (msg,) = case["messages"]
                    texts = [p["text"] for p in msg["content"] if p["type"] == "text"]
                    cmd += ["--chat", "--prompt", texts[0]]
                else:
                    cmd += ["--prompt", case["prompt"]]
                for f in case["images"]:
                    cmd += ["--image", str(images / f)]
                out = run(cmd)
                name = f"{model}/{case['name']}"
                if out.returncode != 0:
                    failures.append(f"{name}: exit {out.returncode}: {out.stderr}")
                    continue
                got = json.loads(out.stdout)
                if got["prompt_ids"] != case["input_ids"]:
                    failures.append(f"{name}: prompt ids {got['prompt_ids']} != HF's {case['input_ids']}")
                positions = [im["offset"] + i for im in got["images"] for i in range(im["length"])]
                if positions != case["image_token_positions"]:
                    failures.append(f"{name}: image positions {positions} != HF's")
                checked += 1

        art = f"{tmp}/llava_clip_llama.xpk"
        text_art = f"{tmp}/text.xpk"
        subprocess.run([xcc, "compile", str(src / "tests/fixtures/models/qwen2_bias"), "-o", text_art,
                        "-q"], check=True)
        bad = Path(tmp) / "broken.png"
        bad.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
        cat = str(images / "chelsea_rgb.jpg")
        errors = [
            ([text_art, "--prompt", "<image>", "--image", cat],
             f"--image {cat}: the model does not accept images"),
            ([art, "--prompt", "<image>", "--image", str(bad)],
             f"--image {bad}: cannot decode the image"),
            ([art, "--prompt", "<image>", "--image", f"{tmp}/missing.png"],
             f"--image {tmp}/missing.png: cannot open the file"),
            ([art, "--prompt", "<image> <image>", "--image", cat],
             "the prompt has 2 image tokens ('<image>') but the request has 1 image"),
        ]
        for args, message in errors:
            out = run([xrt, "generate", "--dry-run"] + args)
            if out.returncode != 1 or message not in out.stderr:
                failures.append(f"{args}: exit {out.returncode}, stderr {out.stderr!r}; "
                                f"expected exit 1 and {message!r}")
    for f in failures:
        print("FAIL", f)
    print(f"{checked} cases with images checked, {len(failures)} failures")
    return 1 if failures or checked < 9 else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes tests/fixtures/images/: small real photographs in every decoder path, the RGB
Pillow + transformers' convert_to_rgb make of them, and the pixel_values of HF's slow
(PIL-backend) CLIP / SigLIP image processors, for runtime/vision's tests.

    pip install Pillow==13.0.0 numpy==2.4.6 scikit-image==0.26.0 transformers==5.23.0
    python3 tests/gen_image_fixtures.py

No torch needed. Deterministic: re-running with the same versions rewrites identical files.
The photographs come from scikit-image's bundled data (astronaut, rocket: public domain;
coffee, chelsea, camera: CC0); see tests/fixtures/README.md.

Layout of tests/fixtures/images/:
  <name>.<png|jpg|webp>        the encoded test image
  <name>.rgb                   (e.g. camera_gray.jpg.rgb) Pillow's decode after
                               convert_to_rgb: height*width*3 bytes
  <name>.<config>.f32          HF pixel_values (3 x H x W float32, little-endian) for the
                               small configs
  configs/<config>/            preprocessor_config.json or processor_config.json, as read
                               by both transformers (AutoImageProcessor, backend="pil")
                               and ParseImageProcessorConfig
  expected.json                per image: size, Pillow mode, convert_to_rgb compositing;
                               per image and large config: the SHA-256 of HF's float32
                               pixel_values and 256 sampled (index, value) pairs
"""
import hashlib
import io
import json
import os
import shutil
import struct
import tempfile
import zlib

import numpy as np
import PIL
from PIL import Image
import skimage
import skimage.data
import transformers
from transformers import AutoImageProcessor
from transformers.image_transforms import convert_to_rgb

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "images")

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# name -> (file name, json, whether its full pixel_values are stored)
CONFIGS = {
    # llava-hf/llava-1.5-7b-hf's preprocessor_config.json
    "clip_336": ("preprocessor_config.json", {
        "crop_size": {"height": 336, "width": 336}, "do_center_crop": True,
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": CLIP_MEAN, "image_processor_type": "CLIPImageProcessor",
        "image_std": CLIP_STD, "processor_class": "LlavaProcessor", "resample": 3,
        "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 336}}, False),
    # the processor_config.json layout (fields under "image_processor")
    "clip_small": ("processor_config.json", {
        "image_processor": {
            "crop_size": {"height": 32, "width": 32}, "do_center_crop": True,
            "do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
            "do_resize": True, "image_mean": CLIP_MEAN,
            "image_processor_type": "CLIPImageProcessor", "image_std": CLIP_STD,
            "resample": 3, "rescale_factor": 0.00392156862745098,
            "size": {"shortest_edge": 32}},
        "processor_class": "LlavaProcessor"}, True),
    # shortest edge below a non-square crop: center_crop pads with zeros
    "clip_pad": ("preprocessor_config.json", {
        "crop_size": {"height": 24, "width": 30}, "image_processor_type": "CLIPImageProcessor",
        "size": {"shortest_edge": 20}}, True),
    # google/siglip-so400m style (class defaults for what is absent), 224 x 224
    "siglip_224": ("preprocessor_config.json", {
        "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "SiglipImageProcessor",
        "image_std": [0.5, 0.5, 0.5], "processor_class": "SiglipProcessor", "resample": 3,
        "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224}}, False),
    "siglip_small": ("preprocessor_config.json", {
        "image_processor_type": "SiglipImageProcessor", "size": {"height": 24, "width": 40}},
        True),
}


# ---- a PNG writer for what Pillow cannot write (16-bit RGB(A), Adam7, 2-bit gray + tRNS) --

def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(
        ">I", zlib.crc32(tag + data) & 0xffffffff)


def pack_rows(samples, bit_depth):
    """samples: (h, w*channels) integer array -> filtered (filter 0) scanlines."""
    out = b""
    for row in samples:
        if bit_depth == 16:
            data = row.astype(">u2").tobytes()
        elif bit_depth == 8:
            data = row.astype(np.uint8).tobytes()
        else:
            per = 8 // bit_depth
            padded = np.zeros(-(-len(row) // per) * per, dtype=np.uint32)
            padded[:len(row)] = row
            groups = padded.reshape(-1, per)
            data = bytes(int(sum(int(v) << (8 - bit_depth * (i + 1)) for i, v in enumerate(g)))
                         for g in groups)
        out += b"\x00" + data
    return out


def write_png(path, pixels, color_type, bit_depth, interlace=False, plte=None, trns=None):
    """pixels: (h, w, channels) integer array of sample values."""
    h, w, ch = pixels.shape
    if interlace:
        raw = b""
        for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                               (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            sub = pixels[y0::dy, x0::dx]
            if sub.size:
                raw += pack_rows(sub.reshape(sub.shape[0], -1), bit_depth)
    else:
        raw = pack_rows(pixels.reshape(h, w * ch), bit_depth)
    data = b"\x89PNG\r\n\x1a\n"
    data += png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0,
                                           1 if interlace else 0))
    if plte is not None:
        data += png_chunk(b"PLTE", bytes(plte))
    if trns is not None:
        data += png_chunk(b"tRNS", trns)
    data += png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


# ---- the test images --------------------------------------------------------------------

def photo(name, box, size):
    """A crop (left, top, right, bottom) of a scikit-image photograph, resized."""
    a = getattr(skimage.data, name)()
    return Image.fromarray(a).crop(box).resize(size, Image.Resampling.LANCZOS)


def alpha_ramp(w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = (x * 255 // max(w - 1, 1)).astype(np.uint8)
    a[: h // 4, : w // 4] = 0  # a fully transparent corner
    a[-(h // 4):, -(w // 4):] = 255
    return a


def make_images():
    imgs = {}

    def save(name, im, fmt, **kw):
        path = os.path.join(OUT, name)
        im.save(path, fmt, **kw)
        imgs[name] = path

    save("astronaut_landscape.png", photo("astronaut", (0, 64, 512, 448), (96, 72)), "PNG")
    save("coffee_portrait.jpg", photo("coffee", (150, 0, 417, 400), (60, 90)), "JPEG",
         quality=90)
    save("chelsea_square_lossy.webp", photo("chelsea", (80, 0, 380, 300), (64, 64)), "WEBP",
         quality=80)
    save("rocket_tiny.png", photo("rocket", (200, 100, 440, 300), (24, 20)), "PNG")
    tall = photo("astronaut", (200, 0, 201, 512), (1, 150))
    save("strip_tall.png", tall, "PNG")
    save("strip_wide.jpg", photo("rocket", (0, 200, 640, 201), (150, 1)), "JPEG", quality=95)
    rocket = photo("rocket", (100, 0, 600, 427), (45, 31))
    save("rocket_odd_422.jpg", rocket, "JPEG", quality=85, subsampling=1)
    save("rocket_progressive.jpg", photo("rocket", (0, 0, 640, 427), (70, 50)), "JPEG",
         quality=75, progressive=True)

    coffee = photo("coffee", (0, 50, 600, 425), (80, 50)).convert("RGBA")
    coffee.putalpha(Image.fromarray(alpha_ramp(80, 50)))
    save("coffee_rgba.png", coffee, "PNG")

    camera = photo("camera", (0, 0, 512, 512), (50, 70))
    save("camera_gray.png", camera, "PNG")
    save("camera_gray.jpg", photo("camera", (0, 64, 512, 448), (64, 48)), "JPEG", quality=90)
    la = photo("camera", (100, 100, 400, 400), (40, 40)).convert("LA")
    la.putalpha(Image.fromarray(alpha_ramp(40, 40)))
    save("camera_la.png", la, "PNG")
    # 16-bit gray: values 0..765, so both Pillow's pass-through (< 256) and its clipping
    # (>= 256 -> 255) of I;16 -> RGB occur.
    cam16 = np.array(photo("camera", (0, 0, 512, 512), (48, 36))).astype(np.uint16) * 3
    save("camera_gray16.png", Image.fromarray(cam16), "PNG")

    chelsea16 = np.array(photo("chelsea", (0, 0, 451, 300), (40, 30))).astype(np.uint16)
    chelsea16 = chelsea16 * 257 + (np.arange(40)[None, :, None] * 37 % 256).astype(np.uint16)
    p = os.path.join(OUT, "chelsea_rgb16.png")
    write_png(p, chelsea16, 2, 16)
    imgs["chelsea_rgb16.png"] = p
    astro = np.array(photo("astronaut", (100, 0, 500, 400), (37, 29))).astype(np.uint16) * 257
    a16 = (alpha_ramp(37, 29).astype(np.uint16) * 257)[:, :, None]
    p = os.path.join(OUT, "astronaut_rgba16_interlaced.png")
    write_png(p, np.concatenate([astro, a16], axis=2), 6, 16, interlace=True)
    imgs["astronaut_rgba16_interlaced.png"] = p
    # 2-bit gray with tRNS on value 2 (Pillow compares the raw tRNS value with the scaled
    # 0/85/170/255 pixels, so nothing becomes transparent), Adam7 interlaced.
    g2 = (np.array(photo("camera", (0, 0, 512, 512), (33, 21))) // 64).astype(np.uint8)
    p = os.path.join(OUT, "camera_gray2_trns_interlaced.png")
    write_png(p, g2[:, :, None], 0, 2, interlace=True, trns=struct.pack(">H", 2))
    imgs["camera_gray2_trns_interlaced.png"] = p
    # 8-bit gray with tRNS on a value that occurs
    g8 = np.array(photo("camera", (0, 0, 512, 512), (30, 20)))
    p = os.path.join(OUT, "camera_gray_trns.png")
    write_png(p, g8[:, :, None], 0, 8, trns=struct.pack(">H", int(g8[5, 5])))
    imgs["camera_gray_trns.png"] = p

    pal = photo("rocket", (0, 0, 640, 427), (60, 40)).quantize(16, dither=Image.Dither.NONE)
    trns = bytes([255, 0, 128, 64] + [255] * 2)  # partial alpha table, shorter than PLTE
    save("rocket_palette_trns.png", pal, "PNG", transparency=trns)
    pal4 = photo("coffee", (0, 0, 600, 400), (45, 30)).quantize(12, dither=Image.Dither.NONE)
    save("coffee_palette4.png", pal4, "PNG", bits=4)
    # RGB with a tRNS color that occurs (a quantized image repeats colors)
    rgbt = pal.convert("RGB")
    save("rocket_rgb_trns.png", rgbt, "PNG", transparency=rgbt.getpixel((10, 10)))

    save("chelsea_cmyk.jpg", photo("chelsea", (0, 0, 451, 300), (50, 40)).convert("CMYK"),
         "JPEG", quality=90)
    astro_rgba = photo("astronaut", (0, 0, 512, 512), (48, 48)).convert("RGBA")
    astro_rgba.putalpha(Image.fromarray(alpha_ramp(48, 48)))
    save("astronaut_lossless_alpha.webp", astro_rgba, "WEBP", lossless=True)
    coffee_a = photo("coffee", (0, 0, 600, 400), (50, 35)).convert("RGBA")
    coffee_a.putalpha(Image.fromarray(alpha_ramp(50, 35)))
    save("coffee_lossy_alpha.webp", coffee_a, "WEBP", quality=70)
    save("camera_lossless.webp", photo("camera", (0, 0, 512, 512), (30, 30)).convert("RGB"),
         "WEBP", lossless=True)
    return imgs


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    imgs = make_images()

    processors = {}
    for cname, (fname, cfg, _) in CONFIGS.items():
        d = os.path.join(OUT, "configs", cname)
        os.makedirs(d)
        with open(os.path.join(d, fname), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        proc = AutoImageProcessor.from_pretrained(d, backend="pil")
        assert type(proc).__name__.endswith("Pil"), type(proc)
        processors[cname] = proc

    expected = {"versions": {"Pillow": PIL.__version__, "numpy": np.__version__,
                             "transformers": transformers.__version__,
                             "scikit-image": skimage.__version__},
                "images": {}}
    rng = np.random.RandomState(0)
    for name in sorted(imgs):
        im = Image.open(imgs[name])
        mode = im.mode
        composited = "A" in im.getbands() or im.info.get("transparency") is not None
        rgb = convert_to_rgb(im, return_numpy=True)
        assert rgb.dtype == np.uint8 and rgb.shape[2] == 3
        stem = name  # e.g. camera_gray.jpg.rgb: two formats of one picture share a stem
        with open(os.path.join(OUT, stem + ".rgb"), "wb") as f:
            f.write(rgb.tobytes())
        entry = {"width": int(rgb.shape[1]), "height": int(rgb.shape[0]), "mode": mode,
                 "composited": bool(composited), "outputs": {}}
        for cname, proc in processors.items():
            pv = proc(images=Image.open(imgs[name]), return_tensors="np")["pixel_values"]
            pv = np.ascontiguousarray(pv[0], dtype="<f4")
            out = {"shape": list(pv.shape),
                   "sha256": hashlib.sha256(pv.tobytes()).hexdigest()}
            if CONFIGS[cname][2]:
                with open(os.path.join(OUT, f"{stem}.{cname}.f32"), "wb") as f:
                    f.write(pv.tobytes())
            else:
                flat = pv.reshape(-1)
                idx = np.sort(rng.choice(flat.size, 256, replace=False))
                out["samples"] = [[int(i), float(flat[i])] for i in idx]
            entry["outputs"][cname] = out
        expected["images"][name] = entry
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn))
                for dp, _, fns in os.walk(OUT) for fn in fns)
    print(f"{len(imgs)} images, {total / 1e6:.2f} MB in {OUT}")


if __name__ == "__main__":
    main()

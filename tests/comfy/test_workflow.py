"""ComfyUI video emulation, pure half: detection, settings, media, upload names, bodies."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.comfy import (
    KOBOLD_MAX_FRAMES,
    MediaRefs,
    check_upload_name,
    history_entry,
    inspect_workflow,
    is_audio_upload,
    kobold_txt2img,
    resolve_media,
    sdcpp_vid_gen,
)
from router.comfy.media import lora_file_name
from router.comfy.workflow import node_sort_key
from router.errors import BadRequest, PayloadTooLarge

# --------------------------------------------------------------------------- workflows


def n(class_type: str, **inputs: Any) -> dict[str, Any]:
    return {"class_type": class_type, "inputs": inputs}


def ltxv_i2v() -> dict[str, Any]:
    return {
        "38": n("CLIPLoader", clip_name="t5xxl_fp16.safetensors", type="ltxv"),
        "44": n("CheckpointLoaderSimple", ckpt_name="ltx-video-2b-v0.9.5.safetensors"),
        "6": n("CLIPTextEncode", text="a cat walks on a beach", clip=["38", 0]),
        "7": n("CLIPTextEncode", text="blurry, low quality", clip=["38", 0]),
        "78": n("LoadImage", image="cat.png [input]"),
        "79": n("LTXVPreprocess", image=["78", 0], img_compression=40),
        "77": n(
            "LTXVImgToVideo",
            positive=["6", 0],
            negative=["7", 0],
            vae=["44", 2],
            image=["79", 0],
            width=768,
            height=512,
            length=97,
            batch_size=1,
            strength=1.0,
        ),
        "69": n("LTXVConditioning", positive=["77", 0], negative=["77", 1], frame_rate=25),
        "71": n("LTXVScheduler", steps=30, max_shift=2.05, base_shift=0.95, latent=["77", 2]),
        "73": n("KSamplerSelect", sampler_name="euler"),
        "72": n(
            "SamplerCustom",
            model=["44", 0],
            add_noise=True,
            noise_seed=497797676867141,
            cfg=3,
            positive=["69", 0],
            negative=["69", 1],
            sampler=["73", 0],
            sigmas=["71", 0],
            latent_image=["77", 2],
        ),
        "8": n("VAEDecode", samples=["72", 0], vae=["44", 2]),
        "41": n("SaveAnimatedWEBP", images=["8", 0], fps=24, filename_prefix="ltx", quality=90),
    }


def _wan_sampler(model: str, latent: list, noise: str, seed: int, start: int, end: int) -> dict:
    return n(
        "KSamplerAdvanced",
        model=[model, 0],
        add_noise=noise,
        noise_seed=seed,
        steps=4,
        cfg=1,
        sampler_name="euler",
        scheduler="simple",
        positive=["67", 0],
        negative=["67", 1],
        latent_image=latent,
        start_at_step=start,
        end_at_step=end,
        return_with_leftover_noise="enable",
    )


def wan22_flf() -> dict[str, Any]:
    # The high-noise sampler has the larger id: the plan must follow the links, not the ids.
    return {
        "37": n("UNETLoader", unet_name="wan2.2_i2v_high_noise_14B.safetensors"),
        "56": n("UNETLoader", unet_name="wan2.2_i2v_low_noise_14B.safetensors"),
        "38": n("CLIPLoader", clip_name="umt5_xxl.safetensors", type="wan"),
        "39": n("VAELoader", vae_name="wan_2.1_vae.safetensors"),
        "91": n(
            "LoraLoaderModelOnly",
            model=["37", 0],
            lora_name="wan2.2/lightx2v_high.safetensors",
            strength_model=1.0,
        ),
        "92": n(
            "LoraLoaderModelOnly",
            model=["56", 0],
            lora_name="lightx2v_low.safetensors",
            strength_model=0.8,
        ),
        "54": n("ModelSamplingSD3", model=["91", 0], shift=8.0),
        "55": n("ModelSamplingSD3", model=["92", 0], shift=8.0),
        "6": n("CLIPTextEncode", text="a flower blooms", clip=["38", 0]),
        "7": n("CLIPTextEncode", text="static, blurry", clip=["38", 0]),
        "62": n("LoadImage", image="first.png"),
        "68": n("LoadImage", image="last.png"),
        "70": n(
            "ImageScale",
            image=["68", 0],
            upscale_method="lanczos",
            width=640,
            height=640,
            crop="center",
        ),
        "67": n(
            "WanFirstLastFrameToVideo",
            positive=["6", 0],
            negative=["7", 0],
            vae=["39", 0],
            start_image=["62", 0],
            end_image=["70", 0],
            width=640,
            height=640,
            length=81,
            batch_size=1,
        ),
        "64": _wan_sampler("54", ["67", 2], "enable", 42, 0, 2),
        "57": _wan_sampler("55", ["64", 0], "disable", 0, 2, 10000),
        "8": n("VAEDecode", samples=["57", 0], vae=["39", 0]),
        "60": n("CreateVideo", images=["8", 0], fps=16),
        "61": n("SaveVideo", video=["60", 0], filename_prefix="wan", format="auto", codec="auto"),
    }


def wan_s2v() -> dict[str, Any]:
    return {
        "37": n("UNETLoader", unet_name="wan2.2_s2v_14B_bf16.safetensors"),
        "38": n("CLIPLoader", clip_name="umt5_xxl.safetensors", type="wan"),
        "39": n("VAELoader", vae_name="wan_2.1_vae.safetensors"),
        "6": n("CLIPTextEncode", text="a man sings", clip=["38", 0]),
        "7": n("CLIPTextEncode", text="", clip=["38", 0]),
        "52": n("LoadImage", image="singer.png"),
        "58": n("LoadAudio", audio="song.wav"),
        "56": n("AudioEncoderLoader", audio_encoder_name="wav2vec2_large.safetensors"),
        "57": n("AudioEncoderEncode", audio_encoder=["56", 0], audio=["58", 0]),
        "55": n(
            "WanSoundImageToVideo",
            positive=["6", 0],
            negative=["7", 0],
            vae=["39", 0],
            audio_encoder_output=["57", 0],
            ref_image=["52", 0],
            width=640,
            height=640,
            length=77,
            batch_size=1,
        ),
        "3": n(
            "KSampler",
            seed=7,
            steps=10,
            cfg=6.0,
            sampler_name="uni_pc",
            scheduler="simple",
            denoise=1.0,
            model=["37", 0],
            positive=["55", 0],
            negative=["55", 1],
            latent_image=["55", 2],
        ),
        "8": n("VAEDecode", samples=["3", 0], vae=["39", 0]),
        "82": n("CreateVideo", images=["8", 0], audio=["58", 0], fps=16),
        "83": n("SaveVideo", video=["82", 0], filename_prefix="s2v"),
    }


def hunyuan15_i2v() -> dict[str, Any]:
    return {
        "10": n("VAELoader", vae_name="hunyuanvideo15_vae_fp16.safetensors"),
        "11": n("DualCLIPLoader", clip_name1="qwen.safetensors", clip_name2="byt5.safetensors"),
        "12": n("UNETLoader", unet_name="hunyuanvideo1.5_720p_i2v.safetensors"),
        "81": n("CLIPVisionLoader", clip_name="sigclip_vision.safetensors"),
        "44": n("CLIPTextEncode", text="waves crash on rocks", clip=["11", 0]),
        "93": n("CLIPTextEncode", text="distorted", clip=["11", 0]),
        "80": n("LoadImage", image="coast.png"),
        "79": n("CLIPVisionEncode", clip_vision=["81", 0], image=["80", 0], crop="center"),
        "78": n(
            "HunyuanVideo15ImageToVideo",
            positive=["44", 0],
            negative=["93", 0],
            vae=["10", 0],
            start_image=["80", 0],
            clip_vision_output=["79", 0],
            width=848,
            height=480,
            length=121,
            batch_size=1,
        ),
        "77": n("CFGGuider", model=["12", 0], positive=["78", 0], negative=["78", 1], cfg=6.0),
        "76": n("RandomNoise", noise_seed=1234),
        "75": n("KSamplerSelect", sampler_name="euler"),
        "74": n("BasicScheduler", model=["12", 0], scheduler="simple", steps=20, denoise=1.0),
        "73": n(
            "SamplerCustomAdvanced",
            noise=["76", 0],
            guider=["77", 0],
            sampler=["75", 0],
            sigmas=["74", 0],
            latent_image=["78", 2],
        ),
        "8": n("VAEDecode", samples=["73", 0], vae=["10", 0]),
        "101": n("CreateVideo", images=["8", 0], fps=24),
        "102": n("SaveVideo", video=["101", 0], filename_prefix="hy"),
    }


def svd() -> dict[str, Any]:
    return {
        "15": n("ImageOnlyCheckpointLoader", ckpt_name="svd_xt.safetensors"),
        "14": n("VideoLinearCFGGuidance", model=["15", 0], min_cfg=1.0),
        "23": n("LoadImage", image="mountains.png"),
        "12": n(
            "SVD_img2vid_Conditioning",
            clip_vision=["15", 1],
            init_image=["23", 0],
            vae=["15", 2],
            width=1024,
            height=576,
            video_frames=14,
            motion_bucket_id=127,
            fps=6,
            augmentation_level=0.0,
        ),
        "3": n(
            "KSampler",
            seed=5,
            steps=20,
            cfg=2.5,
            sampler_name="euler",
            scheduler="karras",
            denoise=1.0,
            model=["14", 0],
            positive=["12", 0],
            negative=["12", 1],
            latent_image=["12", 2],
        ),
        "8": n("VAEDecode", samples=["3", 0], vae=["15", 2]),
        "10": n("SaveAnimatedWEBP", images=["8", 0], fps=10, filename_prefix="svd"),
    }


def minimax_ref2va(refs: int = 5, audio: bool = False) -> dict[str, Any]:
    # Loader ids 9, 10, 11 ... so a string sort would put "10" before "9".
    wf: dict[str, Any] = {
        "1": n("UNETLoader", unet_name="minimax_h3_ref2va.safetensors"),
        "2": n("CLIPLoader", clip_name="qwen3vl_minimax_h3.safetensors", type="minimax_h3"),
        "3": n("VAELoader", vae_name="minimax_h3_video_vae_fp16.safetensors"),
        "4": n("CLIPTextEncode", text="two friends talk in a cafe", clip=["2", 0]),
        "5": n("CLIPTextEncode", text="", clip=["2", 0]),
    }
    ref_inputs: dict[str, Any] = {}
    for i in range(refs):
        wf[str(9 + i)] = n("LoadImage", image=f"ref{i}.png")
        ref_inputs[f"ref_image_{i}"] = [str(9 + i), 0]
    if audio:
        wf["30"] = n("VHS_LoadAudioUpload", audio="voice.mp3", start_time=0, duration=0)
        ref_inputs["ref_audio_0"] = ["30", 0]
    wf["40"] = n(
        "MiniMaxH3Ref2VAConditioning",
        positive=["4", 0],
        negative=["5", 0],
        vae=["3", 0],
        width=1280,
        height=704,
        length=121,
        **ref_inputs,
    )
    wf["41"] = n(
        "KSampler",
        seed=99,
        steps=8,
        cfg=1.0,
        sampler_name="res_multistep",
        scheduler="simple",
        denoise=1.0,
        model=["1", 0],
        positive=["40", 0],
        negative=["40", 1],
        latent_image=["40", 2],
    )
    wf["42"] = n("VAEDecode", samples=["41", 0], vae=["3", 0])
    wf["43"] = n("VHS_VideoCombine", images=["42", 0], frame_rate=24, format="video/h264-mp4")
    return wf


def sdxl_still() -> dict[str, Any]:
    return {
        "4": n("CheckpointLoaderSimple", ckpt_name="sd_xl_base_1.0.safetensors"),
        "5": n("EmptyLatentImage", width=1024, height=1024, batch_size=4),
        "6": n("CLIPTextEncode", text="a castle", clip=["4", 1]),
        "7": n("CLIPTextEncode", text="text, watermark", clip=["4", 1]),
        "3": n(
            "KSampler",
            seed=1,
            steps=25,
            cfg=7.0,
            sampler_name="dpmpp_2m",
            scheduler="karras",
            denoise=1.0,
            model=["4", 0],
            positive=["6", 0],
            negative=["7", 0],
            latent_image=["5", 0],
        ),
        "8": n("VAEDecode", samples=["3", 0], vae=["4", 2]),
        "9": n("SaveImage", images=["8", 0], filename_prefix="ComfyUI"),
    }


# --------------------------------------------------------------------------- detection


def test_sdxl_still_image_is_not_a_video_workflow():
    assert inspect_workflow(sdxl_still()) is None


def test_wan_text_to_image_with_one_frame_latent_is_still():
    wf = sdxl_still()
    wf["5"] = n("EmptyHunyuanLatentVideo", width=1280, height=720, length=1, batch_size=1)
    assert inspect_workflow(wf) is None


@pytest.mark.parametrize(
    ("build", "family"),
    [
        (ltxv_i2v, "ltx"),
        (wan22_flf, "wan"),
        (wan_s2v, "wan_s2v"),
        (hunyuan15_i2v, "hunyuan_video"),
        (svd, "svd"),
        (minimax_ref2va, "minimax_h3"),
    ],
)
def test_every_family_is_recognised(build, family):
    plan = inspect_workflow(build())
    assert plan is not None and plan.family == family


@pytest.mark.parametrize(
    "sink", ["SaveAnimatedWEBP", "SaveAnimatedPNG", "SaveVideo", "SaveWEBM", "VHS_VideoCombine"]
)
def test_video_sink_alone_makes_a_video_workflow(sink):
    wf = sdxl_still()
    wf["9"] = n(sink, images=["8", 0])
    wf["5"]["inputs"]["batch_size"] = 1
    plan = inspect_workflow(wf)
    assert plan is not None and plan.family == "generic" and plan.output_ids == ("9",)


def test_frame_count_above_one_makes_a_video_workflow():
    wf = sdxl_still()
    wf["5"] = n("EmptyMochiLatentVideo", width=848, height=480, length=25, batch_size=1)
    plan = inspect_workflow(wf)
    assert plan is not None and plan.frames == 25 and plan.output_ids == ()


def test_batch_size_counts_as_frames_only_on_a_video_latent():
    wf = sdxl_still()
    assert inspect_workflow(wf) is None  # EmptyLatentImage batch_size=4 is four stills
    wf["5"] = n("EmptyCosmosLatentVideo", width=512, height=512, batch_size=9)
    assert inspect_workflow(wf).frames == 9


def test_ltxv_settings_follow_the_links():
    plan = inspect_workflow(ltxv_i2v())
    assert plan.sampler_id == "72"
    assert (plan.prompt, plan.negative_prompt) == ("a cat walks on a beach", "blurry, low quality")
    assert (plan.seed, plan.steps, plan.cfg) == (497797676867141, 30, 3.0)
    assert (plan.sampler_name, plan.scheduler) == ("euler", "normal")
    assert (plan.width, plan.height, plan.frames, plan.fps) == (768, 512, 97, 24.0)
    assert plan.output_ids == ("41",)


def test_wan22_two_samplers_pick_the_upstream_one():
    plan = inspect_workflow(wan22_flf())
    assert plan.sampler_id == "64"
    assert (plan.seed, plan.steps, plan.cfg, plan.scheduler) == (42, 4, 1.0, "simple")
    assert (plan.width, plan.height, plan.frames, plan.fps) == (640, 640, 81, 16.0)
    assert plan.output_ids == ("60", "61")


def test_hunyuan_guider_flow_reads_settings_from_side_nodes():
    plan = inspect_workflow(hunyuan15_i2v())
    assert plan.sampler_id == "77"
    assert (plan.prompt, plan.negative_prompt) == ("waves crash on rocks", "distorted")
    assert (plan.seed, plan.steps, plan.cfg, plan.sampler_name) == (1234, 20, 6.0, "euler")
    assert (plan.width, plan.height, plan.frames, plan.fps) == (848, 480, 121, 24.0)


def test_svd_conditioning_without_text_and_sink_fps():
    plan = inspect_workflow(svd())
    assert (plan.prompt, plan.negative_prompt) == ("", "")
    assert (plan.frames, plan.fps, plan.width, plan.height) == (14, 10.0, 1024, 576)
    assert (plan.cfg, plan.scheduler) == (2.5, "karras")


def test_sampler_is_found_by_shape_with_unknown_class_names():
    wf = {
        "1": n("MysteryModelLoader", path="m.gguf"),
        "2": n("PrimitiveString", value="a red kite"),
        "3": n("FancyTextEncoder", clip=["1", 1], text=["2", 0]),
        "4": n("FancyTextEncoder", clip=["1", 1], text="ugly"),
        "5": n("ConditioningZeroOut", conditioning=["3", 0]),
        "6": n("AcmeVideoLatent", width=320, height=240, frames=17),
        "7": n(
            "TotallyCustomDenoiser",
            model=["1", 0],
            positive=["3", 0],
            negative=["5", 0],
            latent=["6", 0],
            seed=3,
            steps=12,
        ),
        "8": n("SaveWEBM", images=["7", 0], fps=12.5),
    }
    plan = inspect_workflow(wf)
    assert plan.sampler_id == "7"
    assert (plan.prompt, plan.negative_prompt) == ("a red kite", "")
    assert (plan.seed, plan.steps, plan.frames, plan.fps) == (3, 12, 17, 12.5)
    assert (plan.cfg, plan.sampler_name, plan.width) == (8.0, "euler", 320)


def test_basic_guider_without_any_negative():
    wf = {
        "1": n("UNETLoader", unet_name="hunyuan_video_i2v.safetensors"),
        "2": n("TextEncodeHunyuanVideo_ImageToVideo", clip=["1", 0], prompt="a dog runs"),
        "3": n("FluxGuidance", conditioning=["2", 0], guidance=6.0),
        "4": n("HunyuanImageToVideo", positive=["3", 0], width=720, height=480, length=53),
        "5": n("BasicGuider", model=["1", 0], conditioning=["4", 0]),
        "6": n("SamplerCustomAdvanced", guider=["5", 0], latent_image=["4", 1]),
        "7": n("SaveAnimatedWEBP", images=["6", 0]),
    }
    plan = inspect_workflow(wf)
    assert (plan.sampler_id, plan.prompt, plan.negative_prompt) == ("5", "a dog runs", "")
    assert (plan.family, plan.frames, plan.fps) == ("hunyuan_video", 53, 16.0)


def test_seed_above_int64_is_folded_and_negative_means_random():
    wf = svd()
    wf["3"]["inputs"]["seed"] = 2**64 - 1
    assert 0 <= inspect_workflow(wf).seed < 2**63
    wf["3"]["inputs"]["seed"] = -5
    assert inspect_workflow(wf).seed == -1


def test_node_sort_key_is_numeric_for_numeric_ids():
    ids = ["10", "9", "2:1", "abc", "2", "100"]
    assert sorted(ids, key=node_sort_key) == ["2", "2:1", "9", "10", "100", "abc"]


# --------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    "prompt",
    [
        [],
        "x",
        None,
        {},
        {"1": "node"},
        {"1": {"inputs": {}}},
        {"1": {"class_type": "", "inputs": {}}},
        {"1": {"class_type": "KSampler", "inputs": []}},
        {"1": n("VAEDecode", samples=["2", 0])},
        {"1": n("VAEDecode", samples=["1", 0])},
        {"1": n("A", x=["2", 0]), "2": n("B", y=["1", 0])},
        {"1": n("A"), "2": n("B", y=["1", -1])},
        {"1": n("SaveVideo", video="x")},  # a video sink but nothing that samples
        {"1": n("KSampler", positive="p", negative="q", steps=0), "2": n("SaveWEBM")},
        {"1": n("KSampler", positive="p", negative="q", width=100_000), "2": n("SaveWEBM")},
    ],
)
def test_malformed_prompts_are_bad_requests(prompt):
    with pytest.raises(BadRequest):
        inspect_workflow(prompt)


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_arbitrary_json_raises_only_bad_request(value):
    try:
        inspect_workflow(value)
    except BadRequest:
        pass


_CLASSES = st.sampled_from(
    [
        "KSampler",
        "LoadImage",
        "LoadAudio",
        "LoraLoader",
        "ImageScale",
        "CLIPTextEncode",
        "SaveVideo",
        "WanImageToVideo",
        "LTXVImgToVideo",
        "EmptyHunyuanLatentVideo",
        "ConditioningZeroOut",
        "BasicGuider",
    ]
)
_KEYS = st.sampled_from(
    [
        "positive",
        "negative",
        "image",
        "start_image",
        "end_image",
        "conditioning",
        "text",
        "length",
        "seed",
        "steps",
        "width",
        "fps",
        "lora_name",
        "strength_model",
        "audio",
        "model",
    ]
)
_VALUES = st.one_of(
    st.integers(-3, 200),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.booleans(),
    st.tuples(st.integers(0, 7).map(str), st.integers(-1, 2)).map(list),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.integers(0, 7).map(str),
        st.tuples(_CLASSES, st.dictionaries(_KEYS, _VALUES, max_size=6)),
        min_size=1,
        max_size=8,
    )
)
def test_graph_shaped_fuzz_raises_only_bad_request(nodes):
    prompt = {nid: n(cls, **inputs) for nid, (cls, inputs) in nodes.items()}
    try:
        plan = inspect_workflow(prompt)
        if plan is not None:
            resolve_media(prompt, plan)
    except BadRequest:
        pass


# --------------------------------------------------------------------------- media


def media_of(wf: dict[str, Any]) -> MediaRefs:
    plan = inspect_workflow(wf)
    assert plan is not None
    return resolve_media(wf, plan)


def test_ltxv_start_frame_through_preprocess_into_image_input():
    m = media_of(ltxv_i2v())
    assert (m.start_image, m.end_image, m.reference_images) == ("cat.png", None, ())


def test_wan22_frames_through_resize_and_loras_stripped():
    m = media_of(wan22_flf())
    assert (m.start_image, m.end_image, m.reference_images) == ("first.png", "last.png", ())
    assert m.loras == (
        {"path": "lightx2v_high.safetensors", "multiplier": 1.0},
        {"path": "lightx2v_low.safetensors", "multiplier": 0.8},
    )


def test_s2v_reference_doubles_as_start_frame_and_audio_is_collected():
    m = media_of(wan_s2v())
    assert (m.start_image, m.reference_images, m.reference_audio) == (
        "singer.png",
        ("singer.png",),
        ("song.wav",),
    )


def test_svd_init_image_is_the_start_frame():
    assert media_of(svd()).start_image == "mountains.png"


def test_clip_vision_branch_does_not_make_a_second_role():
    m = media_of(hunyuan15_i2v())
    assert (m.start_image, m.reference_images) == ("coast.png", ())


def test_reference_images_follow_numeric_node_order():
    m = media_of(minimax_ref2va(refs=3, audio=True))
    assert m.reference_images == ("ref0.png", "ref1.png", "ref2.png")
    assert m.start_image == "ref0.png"
    assert m.reference_audio == ("voice.mp3",)


def test_unused_loader_is_ignored():
    wf = ltxv_i2v()
    wf["90"] = n("LoadImage", image="stray.png")
    wf["91"] = n("PreviewImage", images=["90", 0])
    assert media_of(wf).reference_images == ()


def test_zero_strength_lora_is_skipped():
    wf = wan22_flf()
    wf["92"]["inputs"]["strength_model"] = 0
    assert [lora["path"] for lora in media_of(wf).loras] == ["lightx2v_high.safetensors"]


@pytest.mark.parametrize(
    "bad",
    [
        "/etc/loras/x.safetensors",
        "\\\\srv\\x.safetensors",
        "C:\\x.safetensors",
        "../x.safetensors",
        "a/../../x.safetensors",
        "",
        "dir/",
        7,
    ],
)
def test_lora_paths_are_refused(bad):
    with pytest.raises(BadRequest):
        lora_file_name(bad)
    wf = wan22_flf()
    wf["91"]["inputs"]["lora_name"] = bad
    with pytest.raises(BadRequest):
        media_of(wf)


def test_lora_subfolders_are_stripped():
    assert lora_file_name("wan\\video\\motion.safetensors") == "motion.safetensors"
    assert lora_file_name("style..v2.safetensors") == "style..v2.safetensors"


def test_media_names_with_paths_are_refused():
    wf = svd()
    wf["23"]["inputs"]["image"] = "../../etc/passwd"
    with pytest.raises(BadRequest):
        media_of(wf)


# --------------------------------------------------------------------------- upload names

S11 = ["../x.png", "a/b.png", "C:x.png", "\x01.png", "-i.wav", 'x";id;".wav']


@pytest.mark.parametrize(
    "name",
    S11
    + [
        "",
        " ",
        "..",
        ".",
        ".hidden.png",
        "a\\b.png",
        "x.png\n",
        "x\u202egnp.exe",
        "a|b.wav",
        "$(id).png",
        "`id`.png",
        "a>b.png",
        "x.png.",
        "x" * 256 + ".png",
        None,
        5,
    ],
)
def test_bad_upload_names_are_refused_with_400(name):
    with pytest.raises(BadRequest) as err:
        check_upload_name(name)
    assert err.value.status == 400


@pytest.mark.parametrize("name", ["cat.png", "my photo (1).png", "ünïcödé.wav", "a-b_c.v2.jpg"])
def test_plain_upload_names_pass(name):
    assert check_upload_name(name) == name


@pytest.mark.parametrize(
    ("filename", "ctype", "audio"),
    [
        ("v.wav", None, True),
        ("v.MP3", "application/octet-stream", True),
        *[(f"v.{e}", "", True) for e in ("flac", "ogg", "opus", "m4a", "aac")],
        ("voice", "audio/x-wav", True),
        ("voice", "Audio/MPEG; charset=binary", True),
        ("cat.png", "image/png", False),
        ("cat", None, False),
        (None, None, False),
        ("clip.mp4", "video/mp4", False),
    ],
)
def test_is_audio_upload(filename, ctype, audio):
    assert is_audio_upload(filename, ctype) is audio


# --------------------------------------------------------------------------- request bodies

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 24
WAV = b"RIFF\x24\0\0\0WAVEfmt " + b"\0" * 20


def store(**files: tuple[bytes, str]):
    def load(name: str) -> tuple[bytes, str]:
        if name not in files:
            raise BadRequest(f"upload {name!r} was never stored")
        return files[name]

    return load


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def images(*names: str) -> dict[str, tuple[bytes, str]]:
    return {name: (PNG + name.encode(), "image") for name in names}


def test_kobold_body_for_wan_first_last_frame():
    wf = wan22_flf()
    plan, media = inspect_workflow(wf), media_of(wf)
    body = kobold_txt2img(plan, media, store(**images("first.png", "last.png")))
    assert body["prompt"] == "a flower blooms" and body["negative_prompt"] == "static, blurry"
    assert (body["width"], body["height"], body["steps"], body["cfg_scale"]) == (640, 640, 4, 1.0)
    assert (body["seed"], body["frames"], body["fps"], body["video_output_type"]) == (42, 81, 16, 1)
    assert body["sampler_name"] == "Euler" and body["scheduler"] == "simple"
    assert body["video_start_frame"] == b64(PNG + b"first.png")
    assert body["video_end_frame"] == b64(PNG + b"last.png")
    assert "extra_images" not in body
    assert body["lora"][0] == {"path": "lightx2v_high.safetensors", "multiplier": 1.0}
    json.dumps(body)


def test_kobold_frames_are_capped():
    wf = ltxv_i2v()
    plan = dataclasses.replace(inspect_workflow(wf), frames=1000)
    body = kobold_txt2img(plan, media_of(wf), store(**images("cat.png")))
    assert body["frames"] == KOBOLD_MAX_FRAMES == 480


def test_kobold_references_then_audio_as_data_url():
    wf = minimax_ref2va(refs=4, audio=True)
    files = images(*(f"ref{i}.png" for i in range(4))) | {
        "voice.mp3": (b"ID3\x04" + b"\0" * 8, "audio")
    }
    body = kobold_txt2img(inspect_workflow(wf), media_of(wf), store(**files))
    extra = body["extra_images"]
    assert extra[:4] == [b64(PNG + f"ref{i}.png".encode()) for i in range(4)]
    assert extra[4] == "data:audio/mpeg;base64," + b64(b"ID3\x04" + b"\0" * 8)
    assert body["video_start_frame"] == extra[0]
    assert body["fps"] == 24 and "sampler_name" not in body  # res_multistep has no A1111 name


def test_kobold_refuses_a_fifth_reference_image():
    wf = minimax_ref2va(refs=5)
    with pytest.raises(BadRequest) as err:
        kobold_txt2img(inspect_workflow(wf), media_of(wf), store(**images()))
    assert err.value.code == "too_many_reference_images"


def test_kobold_s2v_wav_audio():
    wf = wan_s2v()
    files = images("singer.png") | {"song.wav": (WAV, "audio")}
    body = kobold_txt2img(inspect_workflow(wf), media_of(wf), store(**files))
    assert body["extra_images"][1].startswith("data:audio/wav;base64,")


def test_sdcpp_body_for_minimax_references():
    wf = minimax_ref2va(refs=5)
    files = images(*(f"ref{i}.png" for i in range(5)))
    body = sdcpp_vid_gen(inspect_workflow(wf), media_of(wf), store(**files))
    assert body["init_image"] == b64(PNG + b"ref0.png")
    assert len(body["ref_images"]) == 5 and "end_image" not in body
    assert (body["video_frames"], body["fps"], body["width"], body["height"]) == (
        121,
        24,
        1280,
        704,
    )
    assert body["sample_params"] == {
        "sample_steps": 8,
        "guidance": {"txt_cfg": 1.0},
        "sample_method": "res_multistep",
        "scheduler": "simple",
    }
    json.dumps(body)


def test_sdcpp_body_for_wan_first_last_frame_with_loras():
    wf = wan22_flf()
    body = sdcpp_vid_gen(
        inspect_workflow(wf), media_of(wf), store(**images("first.png", "last.png"))
    )
    assert body["init_image"] == b64(PNG + b"first.png")
    assert body["end_image"] == b64(PNG + b"last.png")
    assert [lora["path"] for lora in body["lora"]] == [
        "lightx2v_high.safetensors",
        "lightx2v_low.safetensors",
    ]
    assert body["strength"] == 1.0 and body["seed"] == 42 and "ref_images" not in body


def test_sdcpp_refuses_reference_audio():
    wf = wan_s2v()
    files = images("singer.png") | {"song.wav": (WAV, "audio")}
    with pytest.raises(BadRequest) as err:
        sdcpp_vid_gen(inspect_workflow(wf), media_of(wf), store(**files))
    assert err.value.code == "unsupported_media"


@pytest.mark.parametrize("build_body", [kobold_txt2img, sdcpp_vid_gen])
def test_media_the_router_never_stored_is_refused(build_body):
    wf = svd()
    with pytest.raises(BadRequest, match="never stored"):
        build_body(inspect_workflow(wf), media_of(wf), store())


@pytest.mark.parametrize("build_body", [kobold_txt2img, sdcpp_vid_gen])
def test_audio_upload_loaded_as_image_is_refused(build_body):
    wf = svd()
    with pytest.raises(BadRequest, match="is audio"):
        build_body(inspect_workflow(wf), media_of(wf), store(**{"mountains.png": (WAV, "audio")}))


def test_image_upload_loaded_as_audio_is_refused():
    wf = wan_s2v()
    files = images("singer.png", "song.wav")
    with pytest.raises(BadRequest, match="is image"):
        kobold_txt2img(inspect_workflow(wf), media_of(wf), store(**files))


def test_workflow_media_total_is_capped_and_repeats_count_once():
    wf = minimax_ref2va(refs=2)
    plan, media = inspect_workflow(wf), media_of(wf)
    files = {"ref0.png": (b"a" * 600, "image"), "ref1.png": (b"b" * 400, "image")}
    # ref0 is both the start frame and a reference: 1000 bytes in total, not 1600.
    assert kobold_txt2img(plan, media, store(**files), max_media_bytes=1000)
    with pytest.raises(PayloadTooLarge) as err:
        sdcpp_vid_gen(plan, media, store(**files), max_media_bytes=999)
    assert err.value.status == 413 and err.value.code == "workflow_media_too_large"


# --------------------------------------------------------------------------- history


def test_history_entry_has_a_gifs_mp4_output():
    entry = history_entry("pid-1", "tr_video_00001.mp4", node_id="61", frame_rate=16.0)
    record = entry["pid-1"]
    gif = record["outputs"]["61"]["gifs"][0]
    assert gif["filename"].endswith(".mp4")
    assert (gif["subfolder"], gif["type"], gif["format"]) == ("", "output", "video/h264-mp4")
    assert gif["frame_rate"] == 16.0
    assert record["status"] == {"status_str": "success", "completed": True, "messages": []}
    assert record["prompt"][1] == "pid-1" and record["prompt"][4] == ["61"]
    json.dumps(entry)


def test_history_entry_refuses_a_non_mp4_file():
    with pytest.raises(ValueError):
        history_entry("pid", "clip.webm")

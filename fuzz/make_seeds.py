#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ (small files, committed): truncated fixture
audio and model headers plus synthesized WAV variants. Re-run after changing a target's input
layout: python3 fuzz/make_seeds.py"""
import json
import math
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def wav(tag, bits, rate, channels, data, extensible=False, extra_chunk=b""):
    block = channels * bits // 8
    if extensible:
        guid = struct.pack("<H", tag) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * block, block, bits, 22,
                          bits, 4) + guid
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra_chunk
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def tone(n, scale=12000):
    return [int(scale * math.sin(2 * math.pi * 440 * i / 16000)) for i in range(n)]


pcm16 = struct.pack("<%dh" % 160, *tone(160))
mulaw = bytes((i * 37) & 0xFF for i in range(160))

# fuzz_wav: whole files.
fox = read("tests/fixtures/audio/fox.wav")
hello = read("tests/fixtures/audio/hello.wav")
put("fuzz_wav", "fox_head.wav", fox[:600])
put("fuzz_wav", "hello_head.wav", hello[:300])
put("fuzz_wav", "pcm16.wav", wav(1, 16, 16000, 1, pcm16))
put("fuzz_wav", "pcm8.wav", wav(1, 8, 8000, 1, bytes(range(0, 256, 3))))
put("fuzz_wav", "pcm24.wav", wav(1, 24, 44100, 1, bytes(range(90))))
put("fuzz_wav", "pcm32_stereo.wav", wav(1, 32, 48000, 2, bytes(range(64))))
put("fuzz_wav", "float32.wav", wav(3, 32, 16000, 1, struct.pack("<8f", *[0.1 * i for i in range(8)])))
put("fuzz_wav", "float64.wav", wav(3, 64, 16000, 1, struct.pack("<4d", 0.5, -0.5, 1.0, 0.0)))
put("fuzz_wav", "alaw.wav", wav(6, 8, 8000, 1, mulaw))
put("fuzz_wav", "mulaw.wav", wav(7, 8, 8000, 1, mulaw))
put("fuzz_wav", "extensible.wav", wav(1, 16, 16000, 1, pcm16[:64], extensible=True))
put("fuzz_wav", "list_chunk.wav",
    wav(1, 16, 16000, 1, pcm16[:32], extra_chunk=b"LIST\x05\x00\x00\x00INFOx\x00"))
put("fuzz_wav", "odd_data.wav", wav(1, 16, 16000, 1, pcm16[:33]))

# fuzz_audio_input: [encoding][rate index][channels][model rate index] + [len][bytes]...
def pieces(data, size):
    out = b""
    for i in range(0, len(data), size):
        chunk = data[i:i + size]
        out += bytes([len(chunk)]) + chunk
    return out


w16 = wav(1, 16, 16000, 1, pcm16)
put("fuzz_audio_input", "wav_split7", bytes([0, 0, 0, 0]) + pieces(w16, 7))
put("fuzz_audio_input", "wav_8k_mulaw", bytes([0, 0, 0, 0]) + pieces(wav(7, 8, 8000, 1, mulaw), 50))
put("fuzz_audio_input", "wav_alaw_48k", bytes([0, 0, 0, 2]) + pieces(wav(6, 8, 8000, 1, mulaw), 200))
put("fuzz_audio_input", "wav_float", bytes([0, 0, 0, 0]) +
    pieces(wav(3, 32, 22050, 1, struct.pack("<16f", *[0.01 * i for i in range(16)])), 13))
put("fuzz_audio_input", "raw_pcm16_odd", bytes([0, 3, 0, 0]) + pieces(pcm16, 33))
put("fuzz_audio_input", "raw_pcm16_8k", bytes([0, 1, 0, 0]) + pieces(pcm16, 100))
put("fuzz_audio_input", "raw_mulaw_44k", bytes([1, 7, 0, 0]) + pieces(mulaw, 40))
put("fuzz_audio_input", "raw_alaw_8k", bytes([2, 1, 0, 1]) + pieces(mulaw, 160))
put("fuzz_audio_input", "fox_head", bytes([0, 0, 0, 0]) + pieces(fox[:1200], 255))
# Several channels (the channels byte is the count - 1): raw stereo 16-bit cut mid-frame, a
# 3-channel 8 kHz WAV, a 9-channel WAV header (refused).
put("fuzz_audio_input", "raw_stereo_odd", bytes([0, 3, 1, 0]) + pieces(pcm16, 37))
put("fuzz_audio_input", "wav_3ch_8k", bytes([0, 0, 0, 0]) + pieces(wav(1, 16, 8000, 3, pcm16[:96]), 11))
put("fuzz_audio_input", "wav_9ch", bytes([0, 0, 0, 0]) + pieces(wav(1, 16, 16000, 9, pcm16[:72]), 64))

# fuzz_resample: [in rate index][out rate index] + [count][count floats]...
def floats(n, f=440.0, rate=8000):
    return struct.pack("<%df" % n, *[0.5 * math.sin(2 * math.pi * f * i / rate) for i in range(n)])


put("fuzz_resample", "8k_16k", bytes([0, 2]) + bytes([64]) + floats(64) + bytes([10]) + floats(10))
put("fuzz_resample", "44k_16k", bytes([4, 2]) + bytes([200]) + floats(200, rate=44100))
put("fuzz_resample", "16k_8k_small", bytes([2, 0]) + b"".join(bytes([3]) + floats(3) for _ in range(5)))
put("fuzz_resample", "identity", bytes([2, 2]) + bytes([16]) + floats(16))
put("fuzz_resample", "nan", bytes([1, 5]) + bytes([2]) + struct.pack("<2f", 0.0, float("nan")))

# fuzz_model_config: the fixtures' model.json files.
for name in ("quartznet_small", "quartznet_small_legacy", "jasper_dr_small"):
    put("fuzz_model_config", name + ".json", read("tests/fixtures/%s/model/model.json" % name))
for seed, folder in (("models_default.json", "quartznet_en_tts_small"),
                     ("models_natural.json", "quartznet_en_natural")):
    if os.path.exists(os.path.join(ROOT, "models", folder, "model.json")):
        put("fuzz_model_config", seed, read("models/%s/model.json" % folder))


# fuzz_safetensors: a complete tiny model matching the target's TinyConfig, plus the fixture's
# header with its data cut off.
def safetensors(tensors, metadata=None):
    header, blobs, off = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (shape, values) in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs += raw
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blobs


def bn(prefix, c):
    return {prefix + ".weight": ([c], [1.0] * c), prefix + ".bias": ([c], [0.1] * c),
            prefix + ".running_mean": ([c], [0.0] * c), prefix + ".running_var": ([c], [1.0] * c)}


def vals(n):
    return [((i * 7) % 11 - 5) * 0.05 for i in range(n)]


tiny = {}
tiny["encoder.encoder.0.mconv.0.conv.weight"] = ([8, 1, 3], vals(24))
tiny["encoder.encoder.0.mconv.1.conv.weight"] = ([8, 8, 1], vals(64))
tiny.update(bn("encoder.encoder.0.mconv.2", 8))
tiny["encoder.encoder.1.mconv.0.conv.weight"] = ([8, 8, 1], vals(64))
tiny.update(bn("encoder.encoder.1.mconv.1", 8))
tiny["encoder.encoder.1.res.0.0.conv.weight"] = ([8, 8, 1], vals(64))
tiny.update(bn("encoder.encoder.1.res.0.1", 8))
tiny["decoder.decoder_layers.0.weight"] = ([4, 8, 1], vals(32))
tiny["decoder.decoder_layers.0.bias"] = ([4], [0.0] * 4)
put("fuzz_safetensors", "tiny_model.safetensors", safetensors(tiny, {"format": "pt"}))
put("fuzz_safetensors", "one_tensor.safetensors", safetensors({"x": ([2, 2], [1, 2, 3, 4])}))
st = read("tests/fixtures/quartznet_small/model/model.safetensors")
n = struct.unpack("<Q", st[:8])[0]
put("fuzz_safetensors", "fixture_header_cut.safetensors", st[:8 + min(n, 1500)])
put("fuzz_safetensors", "fixture_header_nodata.safetensors", st[:8 + n])

# fuzz_stream_session: [8 option bytes][encoding][rate] + ops (0-2 push: u16 len + bytes,
# 3 raw push: u8 len + bytes, 4 force final, 5 finish, 6 cancel, 7 destroy).
def push(data):
    out = b""
    for i in range(0, len(data), 4000):
        c = data[i:i + 4000]
        out += bytes([0]) + struct.pack("<H", len(c)) + c
    return out


speech = fox[44:44 + 16000]  # 0.5 s
small = bytes([0, 0, 0, 0, 0, 0, 1, 0])   # 20 ms chunk, no context, interim, 20 ms endpoint
default = bytes([3, 4, 3, 1, 3, 2, 1, 2])  # 800/1600/800, interim, 800 ms endpoint
put("fuzz_stream_session", "small_windows", small + bytes([0, 0]) + push(speech) + bytes([5]))
put("fuzz_stream_session", "default_force_final",
    default + bytes([0, 0]) + push(speech) + bytes([4]) + push(speech[:3000]) + bytes([5]))
put("fuzz_stream_session", "wav_header", small + bytes([0, 3]) + push(fox[:8000]))
put("fuzz_stream_session", "mulaw_8k_cancel",
    bytes([1, 1, 1, 1, 2, 0, 0, 0]) + bytes([1, 1]) + push(mulaw * 10) + bytes([6]))
put("fuzz_stream_session", "unflowed_push_destroy",
    bytes([0, 0, 0, 1, 1, 0, 0, 0]) + bytes([0, 0]) + bytes([3, 200]) + speech[:200] +
    bytes([3, 255]) + speech[200:455] + bytes([7, 0]))
put("fuzz_stream_session", "odd_bytes_44k",
    small + bytes([0, 2]) + bytes([0, 7, 0]) + speech[:7] + bytes([0, 9, 0]) + speech[7:16])


# fuzz_codec: [encoding][model rate index][bound index][piece size] + the stream's bytes.
# Encodings: 0 LINEAR_PCM (sniffed), 1 FLAC, 2 OGGOPUS, 3 MP3; pieces of 1 + 16 * byte.
codecs = "tests/fixtures/codecs/"
put("fuzz_codec", "flac_sniffed", bytes([0, 0, 0, 20]) + read(codecs + "sample_1.flac")[:12000])
put("fuzz_codec", "flac_silence_bound1", bytes([1, 2, 1, 255]) +
    read(codecs + "silence_120s.flac")[:3000])
put("fuzz_codec", "opus_8k", bytes([2, 1, 0, 3]) + read(codecs + "sample_1.opus"))
put("fuzz_codec", "vorbis_sniffed", bytes([0, 0, 2, 0]) + read(codecs + "sample_1.ogg"))
put("fuzz_codec", "mp3_id3", bytes([0, 2, 3, 7]) + read(codecs + "sample_1.mp3"))
put("fuzz_codec", "mp3_stereo_labelled", bytes([3, 0, 0, 60]) +
    read(codecs + "sample_2_44k_stereo_bare.mp3")[:8000])
# fuzz_stream_session: an Ogg Opus stream (encoding index 4, rate 0).
put("fuzz_stream_session", "opus_stream",
    small + bytes([4, 3]) + push(read(codecs + "sample_1.opus")) + bytes([5]))


# fuzz_multipart: [content-type length][content-type][body].
def form(ctype, body):
    c = ctype.encode()
    return bytes([len(c)]) + c + body


b = b"XyZ"
put("fuzz_multipart", "two_parts", form(
    "multipart/form-data; boundary=XyZ",
    b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm1\r\n"
    b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
    b"Content-Type: audio/wav\r\n\r\nRIFF....WAVE\r\n--XyZ--\r\n"))
put("fuzz_multipart", "quoted_boundary_preamble", form(
    'multipart/form-data; boundary="a b\\"c"',
    b"preamble\r\n--a b\"c\r\nContent-Disposition: form-data; name=file\r\n\r\n"
    b"\r\n--a b\"c--"))
put("fuzz_multipart", "unterminated", form(
    "multipart/form-data; boundary=q",
    b"--q\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nno end"))

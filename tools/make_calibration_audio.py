#!/usr/bin/env python3
"""Writes INT8 calibration audio: the first utterances of a training shard as 16 kHz WAV files.

`jasper-transcribe --calibrate_int8` measures a model's activation ranges over audio that sounds
like what it will serve; this cuts that audio from the committed natural-voice training set
(tools/training_data/natural/train, never a test set) so the shipped calibrations can be remade:

    python3 tools/make_calibration_audio.py --out /tmp/calib            # 80 utterances
    build/tools/jasper-transcribe --model_dir=models/NAME --calibrate_int8 /tmp/calib/*.wav
    python3 tools/make_calibration_audio.py --first 80 --count 240 --out /tmp/check
    build/tools/jasper-transcribe --model_dir=models/NAME --check_int8 /tmp/check/*.wav

Needs numpy and Debian's libsndfile1 (Opus), as tools/pack_speech_data.py does.
"""
import argparse
import os
import sys
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pack_speech_data  # noqa: E402


def main():
  here = os.path.dirname(os.path.abspath(__file__))
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--shard", default=os.path.join(here, "training_data", "natural", "train",
                                                  "shard_0000"),
                  help="training shard prefix (.ogg + .tsv)")
  ap.add_argument("--count", type=int, default=80, help="utterances to write")
  ap.add_argument("--first", type=int, default=0,
                  help="index of the first utterance (e.g. 80: audio the shipped calibrations "
                       "did not see, for `jasper-transcribe --check_int8`)")
  ap.add_argument("--out", required=True, help="folder for utt_NNN.wav (created)")
  ap.add_argument("--libsndfile", default="libsndfile.so.1")
  args = ap.parse_args()
  items = pack_speech_data.read_shard(args.shard, pack_speech_data.Sndfile(args.libsndfile))
  os.makedirs(args.out, exist_ok=True)
  seconds = 0.0
  chosen = items[args.first:args.first + args.count]
  for i, (audio, _text, _voice) in enumerate(chosen, start=args.first):
    with wave.open(os.path.join(args.out, f"utt_{i:03d}.wav"), "wb") as w:
      w.setnchannels(1)
      w.setsampwidth(2)
      w.setframerate(pack_speech_data.SR)
      w.writeframes(audio.astype("<i2").tobytes())
    seconds += len(audio) / pack_speech_data.SR
  print(f"{len(chosen)} utterances, {seconds:.1f} s, in {args.out}")


if __name__ == "__main__":
  main()

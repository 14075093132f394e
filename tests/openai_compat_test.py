#!/usr/bin/env python3
"""OpenAI API compatibility: the stock `openai` Python client (PyPI) against jasper-server's HTTP
front, pointed at it by base_url and nothing else.

Checks, for every audio file given (WAV, FLAC, Ogg, MP3): audio.transcriptions.create gives the
transcript the gRPC API gives for the same file (read from jasper-client's JSON output, passed
as --expect FILE=TRANSCRIPT); every response_format (json, text, srt, vtt, verbose_json with
word and segment timestamps); models.list/retrieve; and the errors the client raises: a wrong
API key (AuthenticationError), an unknown model (NotFoundError), a bad response_format and a
file that is not audio (BadRequestError).

Usage: openai_compat_test.py --base_url http://127.0.0.1:PORT/v1 --api_key KEY --model NAME
           --expect FILE=TRANSCRIPT [--expect ...]
Exit status 0 when every check passes. Normally run through tools/http_front_check.sh.
"""

import argparse
import os
import sys

import openai

failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def transcribe(client, path, model, **kwargs):
    with open(path, "rb") as f:
        return client.audio.transcriptions.create(model=model, file=f, **kwargs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base_url", required=True)
    parser.add_argument("--api_key", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--expect", action="append", default=[])
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0,
                           timeout=120)

    models = client.models.list()
    ids = [m.id for m in models.data]
    check(args.model in ids, f"models.list() names {args.model} ({ids})")
    check(client.models.retrieve(args.model).id == args.model, "models.retrieve()")

    for item in args.expect:
        path, want = item.split("=", 1)
        name = os.path.basename(path)
        got = transcribe(client, path, args.model)
        check(got.text == want, f"{name}: json text '{got.text}' == gRPC's '{want}'")
        text = transcribe(client, path, args.model, response_format="text")
        check(text.strip() == want, f"{name}: response_format=text")

    path, want = args.expect[0].split("=", 1)
    srt = transcribe(client, path, args.model, response_format="srt")
    check(srt.startswith("1\n00:00:") and " --> " in srt and want in srt, "response_format=srt")
    vtt = transcribe(client, path, args.model, response_format="vtt")
    check(vtt.startswith("WEBVTT") and want in vtt, "response_format=vtt")
    verbose = transcribe(client, path, args.model, response_format="verbose_json",
                         timestamp_granularities=["word", "segment"], language="en")
    check(verbose.text == want, "verbose_json text")
    check(verbose.duration > 0, f"verbose_json duration {verbose.duration}")
    words = verbose.words or []
    check(" ".join(w.word for w in words) == want, "verbose_json words spell the text")
    check(all(w.start <= w.end for w in words) and
          all(a.end <= b.start for a, b in zip(words, words[1:])), "word times are ordered")
    segments = verbose.segments or []
    check(len(segments) >= 1 and " ".join(s.text for s in segments) == want,
          "verbose_json segments spell the text")

    bad = openai.OpenAI(base_url=args.base_url, api_key="wrong-key-0000", max_retries=0)
    try:
        transcribe(bad, path, args.model)
        check(False, "a wrong API key is refused")
    except openai.AuthenticationError:
        check(True, "a wrong API key is refused (AuthenticationError)")
    try:
        transcribe(client, path, "no-such-model")
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        check("not found" in str(e), "an unknown model is refused (NotFoundError)")
    try:
        transcribe(client, path, args.model, response_format="xml")
        check(False, "a bad response_format is refused")
    except openai.BadRequestError:
        check(True, "a bad response_format is refused (BadRequestError)")
    try:
        client.audio.transcriptions.create(model=args.model,
                                           file=("notes.txt", b"this is not audio at all\n" * 40))
        check(False, "a text file is refused")
    except openai.BadRequestError as e:
        check(True, f"a text file is refused (BadRequestError: {str(e)[:80]})")
    # The server goes on serving.
    check(transcribe(client, path, args.model).text == want, "still serving after the errors")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all OpenAI compatibility checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

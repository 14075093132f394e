#!/usr/bin/env python3
"""WebSocket streaming (docs/HTTP.md): a stock WebSocket client (`websockets`, PyPI) against
jasper-server's /v1/stream. For each file: the start message, the audio in 100 ms binary frames
(4 KiB pieces for compressed files), {"end": true}; interim results arrive before the finals,
the finals' transcript equals the gRPC API's for the same file (--expect FILE=TRANSCRIPT), and
the server closes with 1000. Then the errors: a bad config (error JSON, close 4003), a missing
API key (close 4016), and a second stream on the same server still works.

Usage: websocket_stream_test.py --url ws://127.0.0.1:PORT/v1/stream --api_key KEY
           --expect FILE=TRANSCRIPT [...]
"""

import argparse
import json
import os
import sys

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def stream(url, key, path, config=None):
    """Streams `path`; returns (finals, interims, close code, messages)."""
    with open(path, "rb") as f:
        data = f.read()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    finals, interims, messages = [], 0, []
    with connect(url, additional_headers=headers, max_size=1 << 22) as ws:
        rc = {"enableWordTimeOffsets": True}
        if path.endswith(".mp3"):
            rc["encoding"] = "MP3"  # an MP3 without an ID3 tag is not sniffed
        start = config or {"streamingConfig": {"config": rc, "interimResults": True}}
        try:
            ws.send(json.dumps(start))
            piece = 3200 if path.endswith(".wav") else 4096
            for i in range(0, len(data), piece):
                ws.send(data[i:i + piece])
            ws.send(json.dumps({"end": True}))
        except ConnectionClosed:
            pass  # the server ended the stream early (an error): its close code says why
        try:
            for message in ws:
                m = json.loads(message)
                messages.append(m)
                for r in m.get("results", []):
                    if r.get("isFinal"):
                        finals.append(r["alternatives"][0]["transcript"])
                    else:
                        interims += 1
        except Exception:
            pass
        code = ws.close_code
    return finals, interims, code, messages


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--api_key", default="")
    parser.add_argument("--expect", action="append", default=[])
    args = parser.parse_args()
    for item in args.expect:
        path, want = item.split("=", 1)
        name = os.path.basename(path)
        finals, interims, code, _ = stream(args.url, args.api_key, path)
        got = " ".join(f.strip() for f in finals if f.strip())
        check(got == want, f"{name}: finals '{got}' == gRPC's '{want}'")
        check(code == 1000, f"{name}: closed with 1000 (got {code})")
        if path.endswith(".wav"):
            check(interims > 0, f"{name}: {interims} interim results before the finals")

    path = args.expect[0].split("=", 1)[0]
    _, _, code, messages = stream(args.url, args.api_key, path,
                                  {"streamingConfig": {"config": {"decoder": "nonsense"}}})
    errors = [m for m in messages if "error" in m]
    check(code == 4003, f"a bad config closes with 4003 INVALID_ARGUMENT (got {code})")
    check(errors and errors[0]["error"]["code"] == "INVALID_ARGUMENT", "and says why in JSON")
    _, _, code, messages = stream(args.url, args.api_key, path, {"notAField": 1})
    check(code == 4003, f"an unknown start message closes with 4003 (got {code})")
    if args.api_key:
        _, _, code, _ = stream(args.url, "", path)
        check(code == 4016, f"no API key closes with 4016 UNAUTHENTICATED (got {code})")
    finals, _, code, _ = stream(args.url, args.api_key, path)
    check(code == 1000 and finals, "a stream after the errors works")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all WebSocket checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

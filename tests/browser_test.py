#!/usr/bin/env python3
"""The browser page (GET /) in a real browser: headless Chromium with a fake microphone that
plays a WAV file (--use-file-for-fake-audio-capture), the page's AudioWorklet capture streamed
to /v1/stream, and the transcript that appears on the page. Driven over the Chrome DevTools
Protocol (the `websockets` client); optionally saves a screenshot of the page.

Usage: browser_test.py --chromium PATH --url http://127.0.0.1:PORT/ --wav FILE --expect TEXT
           [--screenshot OUT.png]
Exit status 0 when the page shows the expected transcript (the gRPC API's for FILE) within a
character error rate of 0.1 (the browser resamples the fake microphone, so its samples differ).
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from websockets.sync.client import connect


def char_error_rate(hyp, ref):
    """Levenshtein distance of the characters over the reference's length."""
    prev = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, 1):
        cur = [i] + [0] * len(ref)
        for j, r in enumerate(ref, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (h != r))
        prev = cur
    return prev[-1] / max(1, len(ref))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--wav", required=True)
    parser.add_argument("--expect", required=True)
    parser.add_argument("--screenshot", default="")
    parser.add_argument("--timeout_s", type=float, default=60)
    args = parser.parse_args()

    profile = tempfile.mkdtemp(prefix="jasper-chromium-")
    page_url = args.url + "?autostart=1&stop_after=6"
    browser = subprocess.Popen(
        [args.chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
         "--disable-dev-shm-usage", "--no-first-run", "--mute-audio",
         "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
         f"--use-file-for-fake-audio-capture={args.wav}%noloop",
         "--autoplay-policy=no-user-gesture-required",
         "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--window-size=900,700", page_url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file) and time.time() < deadline:
            time.sleep(0.1)
        if not os.path.exists(port_file):
            print("FAIL chromium did not start (no DevToolsActivePort)")
            return 1
        port = open(port_file).read().split()[0]
        targets = []
        while time.time() < deadline and not targets:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as r:
                targets = [t for t in json.load(r) if t.get("type") == "page"]
            time.sleep(0.1)
        with connect(targets[0]["webSocketDebuggerUrl"], max_size=1 << 26) as cdp:
            next_id = [0]

            def call(method, **params):
                next_id[0] += 1
                cdp.send(json.dumps({"id": next_id[0], "method": method, "params": params}))
                while True:
                    m = json.loads(cdp.recv())
                    if m.get("id") == next_id[0]:
                        return m.get("result", {})

            def text(element_id):
                r = call("Runtime.evaluate",
                         expression=f"document.getElementById('{element_id}').textContent")
                return r.get("result", {}).get("value", "")

            shown, status = "", ""
            end = time.time() + args.timeout_s
            while time.time() < end:
                shown, status = text("final"), text("status")
                if "closed" in status:
                    break
                time.sleep(0.25)
            print(f"page status: '{status}'")
            print(f"page final text: '{shown}'")
            if args.screenshot:
                shot = call("Page.captureScreenshot", format="png")
                with open(args.screenshot, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
                print(f"screenshot: {args.screenshot}")
        # The browser resamples the fake microphone (its device rate to the page's 16 kHz
        # context), so the samples are not the file's: allow a small character error rate.
        cer = char_error_rate(shown.strip(), args.expect.strip())
        ok = cer <= 0.1
        print(("ok   " if ok else "FAIL ") +
              f"the page shows '{shown}', gRPC gives '{args.expect}' for the file (CER {cer:.3f})")
        return 0 if ok else 1
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()


if __name__ == "__main__":
    sys.exit(main())

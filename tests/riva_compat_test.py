#!/usr/bin/env python3
"""Riva wire compatibility: the real `nvidia-riva-client` package against a running jasper-server.

Uses the client library the way NVIDIA's own scripts (transcribe_file.py,
transcribe_file_offline.py) do: the WAV file is sent as-is, header included, and the
RecognitionConfig sets neither encoding nor sample_rate_hertz, so the server has to read the
header. Checks offline and streaming recognition, interim results, word times, the RequestId
echo, max_alternatives (N-best), enable_automatic_punctuation with verbatim_transcripts = false
(what transcribe_file_offline.py --automatic-punctuation --no-verbatim-transcripts sends: the
model must have ITN grammars and a punctuation model, as the shipped one does),
GetRivaSpeechRecognitionConfig (what `--list-models` reads),
an error status, the grpc.health.v1 service and (with grpcio-reflection installed) server
reflection.

Usage: riva_compat_test.py --server 127.0.0.1:PORT --audio FILE.wav [--audio ...]
Exit status 0 when every check passes. Normally run through tools/riva_compat_check.sh.
"""

import argparse
import sys

import grpc
import riva.client
from riva.client.proto import riva_asr_pb2

failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def base_config(word_time_offsets=False):
    # Exactly what transcribe_file.py builds: no encoding, no sample rate.
    return riva.client.RecognitionConfig(
        language_code="en-US",
        max_alternatives=1,
        profanity_filter=False,
        enable_automatic_punctuation=False,
        verbatim_transcripts=True,
        enable_word_time_offsets=word_time_offsets,
    )


def test_list_models(asr):
    response = asr.stub.GetRivaSpeechRecognitionConfig(
        riva_asr_pb2.RivaSpeechRecognitionConfigRequest())
    online = [c for c in response.model_config if c.parameters["type"] == "online"]
    offline = [c for c in response.model_config if c.parameters["type"] == "offline"]
    check(len(online) >= 1, "GetRivaSpeechRecognitionConfig lists an online model")
    check(len(offline) >= 1, "GetRivaSpeechRecognitionConfig lists an offline model")
    check(all(c.parameters["language_code"] == "en-US" for c in response.model_config),
          "every model has language_code en-US")
    return online[0].model_name if online else ""


def test_offline(asr, path, model):
    with open(path, "rb") as f:
        audio = f.read()
    config = base_config(word_time_offsets=True)
    config.model = model
    request_id = riva.client.proto.riva_common_pb2.RequestId(value="offline-1")
    request = riva_asr_pb2.RecognizeRequest(config=config, audio=audio, id=request_id)
    response = asr.stub.Recognize(request, metadata=asr.auth.get_auth_metadata())
    transcript = " ".join(r.alternatives[0].transcript for r in response.results
                          if r.alternatives)
    print(f"     offline {path}: {transcript!r}")
    check(len(response.results) >= 1 and transcript.strip() != "",
          f"offline Recognize of {path} returns a transcript")
    check(response.id.value == "offline-1", "offline response echoes the RequestId")
    words = [w for r in response.results for w in r.alternatives[0].words]
    check(len(words) >= 1 and all(w.end_time >= w.start_time for w in words),
          "offline word time offsets are present and ordered")
    # The library's own helper too.
    response = asr.offline_recognize(audio, base_config())
    check(len(response.results) >= 1, "ASRService.offline_recognize works")
    # N-best, as transcribe_file_offline.py --max-alternatives asks for it: distinct
    # alternatives, the first as with one alternative from beam search.
    config = base_config()
    config.max_alternatives = 3
    response = asr.offline_recognize(audio, config)
    alternatives = [a for r in response.results[:1] for a in r.alternatives]
    texts = [a.transcript for a in alternatives]
    print(f"     max_alternatives=3 {path}: {texts!r}")
    check(1 <= len(alternatives) <= 3, "max_alternatives=3 returns 1 to 3 alternatives")
    check(len(set(texts)) == len(texts), "the alternatives are distinct")
    check(all(0.0 <= a.confidence <= 1.0 for a in alternatives),
          "every alternative has a confidence in [0, 1]")


def test_streaming(asr, path, model):
    config = base_config(word_time_offsets=True)
    config.model = model
    streaming_config = riva.client.StreamingRecognitionConfig(config=config,
                                                              interim_results=True)
    finals, interims = [], 0
    # 1600 frames per chunk = transcribe_file.py's default; the first chunk carries the header.
    with riva.client.AudioChunkFileIterator(path, 1600) as chunks:
        for response in asr.streaming_response_generator(audio_chunks=chunks,
                                                         streaming_config=streaming_config):
            for result in response.results:
                if result.is_final:
                    finals.append(result)
                else:
                    interims += 1
    transcript = " ".join(r.alternatives[0].transcript for r in finals if r.alternatives)
    print(f"     streaming {path}: {transcript!r} ({interims} interim results)")
    check(len(finals) >= 1 and transcript.strip() != "",
          f"streaming recognition of {path} returns a final transcript")
    check(all(r.audio_processed > 0 for r in finals), "final results report audio_processed")


def test_health_and_reflection(channel):
    # grpc.health.v1 through the health proto the Riva client ships.
    from riva.client.proto import health_pb2, health_pb2_grpc
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "nvidia.riva.asr.RivaSpeechRecognition", "jasper.asr.v1.Asr"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
        check(status == health_pb2.HealthCheckResponse.SERVING,
              f"health of {service or '(server)'} is SERVING")
    try:
        from google.protobuf import descriptor_pool
        from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
            ProtoReflectionDescriptorDatabase)
    except ImportError:
        print("skip reflection checks (grpcio-reflection not installed)")
        return
    database = ProtoReflectionDescriptorDatabase(channel)
    services = set(database.get_services())
    wanted = {"jasper.asr.v1.Asr", "nvidia.riva.asr.RivaSpeechRecognition"}
    check(wanted <= services, f"reflection lists {sorted(wanted)} (got {sorted(services)})")
    pool = descriptor_pool.DescriptorPool(database)
    request = pool.FindMessageTypeByName("jasper.asr.v1.StreamingRecognizeRequest")
    check("force_final" in request.fields_by_name,
          "reflection resolves jasper.asr.v1.StreamingRecognizeRequest.force_final")


def test_punctuation(asr, path, model):
    with open(path, "rb") as f:
        audio = f.read()
    config = base_config()
    config.model = model
    plain = " ".join(r.alternatives[0].transcript
                     for r in asr.offline_recognize(audio, config).results if r.alternatives)
    config.enable_automatic_punctuation = True
    config.verbatim_transcripts = False
    results = [r.alternatives[0].transcript
               for r in asr.offline_recognize(audio, config).results if r.alternatives]
    print(f"     punctuated {path}: {results!r}")
    check(len(results) >= 1 and all(t[:1].isupper() and t[-1:] in ".?" for t in results),
          f"--automatic-punctuation: each final of {path} starts with a capital and ends with . or ?")
    bare = " ".join(results).lower().replace(",", "").replace(".", "").replace("?", "")
    check(bare.split() == plain.split() or any(c.isdigit() for c in bare),
          "punctuation changes only capitals and marks (digits aside)")
    streaming = riva.client.StreamingRecognitionConfig(config=config, interim_results=True)
    finals = []
    with riva.client.AudioChunkFileIterator(path, 1600) as chunks:
        for response in asr.streaming_response_generator(audio_chunks=chunks,
                                                         streaming_config=streaming):
            finals += [r.alternatives[0].transcript for r in response.results
                       if r.is_final and r.alternatives]
    check(len(finals) >= 1 and all(t[:1].isupper() and t[-1:] in ".?" for t in finals if t),
          "streaming finals are punctuated too")


def test_errors(asr, path):
    with open(path, "rb") as f:
        audio = f.read()
    config = base_config()
    config.model = "no-such-model"
    try:
        asr.stub.Recognize(riva_asr_pb2.RecognizeRequest(config=config, audio=audio))
        check(False, "an unknown model is rejected")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, f"unknown model -> NOT_FOUND ({e.code()})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--audio", action="append", required=True)
    args = parser.parse_args()
    auth = riva.client.Auth(uri=args.server)
    asr = riva.client.ASRService(auth)
    test_health_and_reflection(auth.channel)
    model = test_list_models(asr)
    for path in args.audio:
        test_offline(asr, path, model)
        test_streaming(asr, path, model)
        test_punctuation(asr, path, model)
    test_errors(asr, args.audio[0])
    print(f"{len(failures)} failed" if failures else "all Riva compatibility checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

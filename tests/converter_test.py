#!/usr/bin/env python3
"""Tests for tools/nemo_to_model.py. Needs python3 + numpy + pyyaml only (no torch, no NeMo).

    python3 tests/converter_test.py [-v]

1. Every fixture under tests/fixtures/*/expected.json that names a .nemo file (`nemo_file`) is
   re-converted with the recorded `converter_args` into a temp dir; the produced model.json and
   model.safetensors tensors must equal the committed tests/fixtures/<name>/model/ ones.
2. The committed safetensors files are well formed (8-byte aligned, sorted, contiguous) and
   expected.safetensors holds the tensors expected.json lists.
3. Bad inputs (truncated tar, missing member, not a tar, corrupt checkpoint, a hostile pickle,
   unsupported architecture, gzip .nemo) give exit status != 0 and one clear "error:" line,
   or for gzip, the same output as the plain tar.
"""

import gzip
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

import numpy as np
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERTER = os.path.join(ROOT, "tools", "nemo_to_model.py")
FIXTURES = os.environ.get("JASPER_FIXTURES_DIR", os.path.join(ROOT, "tests", "fixtures"))

_DTYPES = {"F32": "<f4", "I32": "<i4", "I64": "<i8", "F16": "<f2"}


def read_safetensors(path):
    """Strict, independent reader: returns ({name: array}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) >= 8, f"{path}: too short"
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0, f"{path}: data section not 8-byte aligned"
    assert 8 + n <= len(raw), f"{path}: header past end of file"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), f"{path}: non-string metadata"
    data = raw[8 + n:]
    names = sorted(header)
    offset = 0
    out = {}
    for name in names:  # we write tensors in sorted-name order, back to back
        e = header[name]
        b, end = e["data_offsets"]
        assert b == offset, f"{path}: {name} not contiguous ({b} != {offset})"
        dt = np.dtype(_DTYPES[e["dtype"]])
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        assert end - b == count * dt.itemsize, f"{path}: {name} byte size mismatch"
        out[name] = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"])
        offset = end
    assert offset == len(data), f"{path}: {len(data) - offset} trailing bytes"
    return out, meta


def run_converter(*args):
    p = subprocess.run([sys.executable, CONVERTER] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def fixture_dirs():
    out = []
    if not os.path.isdir(FIXTURES):
        return out
    for name in sorted(os.listdir(FIXTURES)):
        d = os.path.join(FIXTURES, name)
        if os.path.isfile(os.path.join(d, "expected.json")):
            out.append(d)
    return out


def load_meta(d):
    with open(os.path.join(d, "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def converted_fixtures():
    return [d for d in fixture_dirs() if load_meta(d).get("nemo_file")]


def first_nemo():
    for d in converted_fixtures():
        p = os.path.normpath(os.path.join(d, load_meta(d)["nemo_file"]))
        if os.path.isfile(p):
            return p
    return None


def read_members(nemo_path):
    with tarfile.open(nemo_path, "r:*") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def write_tar(path, members, mode="w:"):
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


class ConverterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="converter_test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def assert_fails(self, nemo_path, *needles, extra=()):
        rc, _, err = run_converter(nemo_path, os.path.join(self.tmp, "out"), *extra)
        self.assertNotEqual(rc, 0, f"converter accepted bad input {nemo_path}")
        self.assertIn("error:", err)
        self.assertNotIn("Traceback", err, f"uncaught exception:\n{err}")
        for n in needles:
            self.assertIn(n, err, f"message lacks '{n}':\n{err}")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out", "model.json")))
        return err

    # ---- 1. committed fixtures reproduce -------------------------------------------------

    def test_fixtures_present(self):
        self.assertTrue(converted_fixtures(), f"no fixtures with a .nemo under {FIXTURES}")

    def test_reconvert_matches_committed(self):
        for d in converted_fixtures():
            meta = load_meta(d)
            with self.subTest(fixture=os.path.basename(d)):
                nemo_path = os.path.normpath(os.path.join(d, meta["nemo_file"]))
                self.assertTrue(os.path.isfile(nemo_path), nemo_path)
                out = os.path.join(self.tmp, os.path.basename(d))
                rc, _, err = run_converter(nemo_path, out, *meta["converter_args"])
                self.assertEqual(rc, 0, err)
                with open(os.path.join(out, "model.json"), encoding="utf-8") as f:
                    got_json = json.load(f)
                with open(os.path.join(d, "model", "model.json"), encoding="utf-8") as f:
                    want_json = json.load(f)
                self.assertEqual(got_json, want_json)
                got, _ = read_safetensors(os.path.join(out, "model.safetensors"))
                want, _ = read_safetensors(os.path.join(d, "model", "model.safetensors"))
                self.assertEqual(sorted(got), sorted(want))
                for k in want:
                    self.assertEqual(got[k].dtype, np.float32, k)
                    self.assertTrue(np.array_equal(got[k], want[k]), k)

    def test_model_json_schema(self):
        for d in converted_fixtures():
            with self.subTest(fixture=os.path.basename(d)):
                with open(os.path.join(d, "model", "model.json"), encoding="utf-8") as f:
                    m = json.load(f)
                self.assertEqual(list(m), ["format_version", "name", "sample_rate", "labels",
                                           "preprocessor", "encoder", "decoder"])
                self.assertEqual(m["format_version"], 1)
                pre = m["preprocessor"]
                for key in ("window_size", "window_stride", "n_fft", "features", "window",
                            "preemph", "lowfreq", "highfreq", "log", "log_zero_guard_type",
                            "log_zero_guard_value", "mag_power", "normalize", "pad_to",
                            "pad_value", "mel_norm", "dither", "frame_splicing", "exact_pad",
                            "stft_mode"):
                    self.assertIn(key, pre)
                self.assertIn(pre["stft_mode"], ("legacy", "nemo25"))
                self.assertEqual(pre["stft_mode"], load_meta(d)["stft_mode"])
                self.assertEqual(m["decoder"]["num_classes"], len(m["labels"]))
                self.assertEqual(m["decoder"]["feat_in"], m["encoder"]["jasper"][-1]["filters"])
                tensors, _ = read_safetensors(os.path.join(d, "model", "model.safetensors"))
                self.assertFalse([k for k in tensors if k.endswith("num_batches_tracked")])
                self.assertEqual(tensors["decoder.decoder_layers.0.bias"].shape,
                                 (len(m["labels"]) + 1,))
                self.assertEqual(tensors["preprocessor.featurizer.fb"].shape,
                                 (1, pre["features"], pre["n_fft"] // 2 + 1))

    # ---- 2. expected.safetensors is consistent with expected.json ------------------------

    def test_expected_files(self):
        for d in fixture_dirs():
            meta = load_meta(d)
            with self.subTest(fixture=os.path.basename(d)):
                tensors, _ = read_safetensors(os.path.join(d, "expected.safetensors"))
                self.assertEqual(sorted(tensors), sorted(meta["tensors"]))
                for k, spec in meta["tensors"].items():
                    self.assertEqual(list(tensors[k].shape), spec["shape"], k)
                self.assertEqual(tensors["encoded_lengths"].tolist(), meta["encoded_lengths"])
                self.assertEqual(tensors["feature_lengths"].tolist(), meta["feature_lengths"])

    # ---- 3. bad inputs --------------------------------------------------------------------

    def nemo_or_skip(self):
        p = first_nemo()
        if p is None:
            self.skipTest("no committed .nemo fixture")
        return p

    def test_gzip_nemo_converts_the_same(self):
        src = self.nemo_or_skip()
        gz = os.path.join(self.tmp, "m.nemo")
        with open(src, "rb") as f, gzip.open(gz, "wb") as g:
            g.write(f.read())
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        self.assertEqual(run_converter(src, a, "--stft-mode", "legacy")[0], 0)
        self.assertEqual(run_converter(gz, b, "--stft-mode", "legacy", "--name",
                                       os.path.splitext(os.path.basename(src))[0])[0], 0)
        with open(os.path.join(a, "model.json")) as fa, open(os.path.join(b, "model.json")) as fb:
            self.assertEqual(fa.read(), fb.read())
        ta, _ = read_safetensors(os.path.join(a, "model.safetensors"))
        tb, _ = read_safetensors(os.path.join(b, "model.safetensors"))
        self.assertEqual(sorted(ta), sorted(tb))

    def test_truncated_tar(self):
        src = self.nemo_or_skip()
        with open(src, "rb") as f:
            data = f.read()
        for cut in (len(data) // 2, 700, 100):
            with self.subTest(cut=cut):
                p = os.path.join(self.tmp, f"trunc{cut}.nemo")
                with open(p, "wb") as f:
                    f.write(data[:cut])
                self.assert_fails(p)

    def test_not_a_tar(self):
        p = os.path.join(self.tmp, "junk.nemo")
        with open(p, "wb") as f:
            f.write(b"this is not a tar archive at all" * 40)
        self.assert_fails(p, "not a readable .nemo")

    def test_missing_file(self):
        self.assert_fails(os.path.join(self.tmp, "nope.nemo"), "no such file")

    def test_missing_member(self):
        members = read_members(self.nemo_or_skip())
        for drop in ("./model_weights.ckpt", "./model_config.yaml"):
            with self.subTest(drop=drop):
                p = os.path.join(self.tmp, "missing.nemo")
                write_tar(p, {k: v for k, v in members.items() if k != drop})
                self.assert_fails(p, drop)

    def test_corrupt_checkpoint(self):
        members = read_members(self.nemo_or_skip())
        p = os.path.join(self.tmp, "corrupt.nemo")
        members["./model_weights.ckpt"] = b"PK\x03\x04" + b"\x00" * 200
        write_tar(p, members)
        self.assert_fails(p, "model_weights.ckpt")

    def test_hostile_pickle_refused(self):
        members = read_members(self.nemo_or_skip())
        marker = os.path.join(self.tmp, "pwned")

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps(Evil(), protocol=2))
        members["./model_weights.ckpt"] = buf.getvalue()
        p = os.path.join(self.tmp, "evil.nemo")
        write_tar(p, members)
        self.assert_fails(p, "refusing to unpickle")
        self.assertFalse(os.path.exists(marker))

    def _with_config(self, edit):
        members = read_members(self.nemo_or_skip())
        cfg = yaml.safe_load(members["./model_config.yaml"])
        edit(cfg)
        members["./model_config.yaml"] = yaml.safe_dump(cfg).encode()
        p = os.path.join(self.tmp, "edited.nemo")
        write_tar(p, members)
        return p

    def test_unsupported_architecture(self):
        cases = [
            ("squeeze-excite", lambda c: c["encoder"]["jasper"][1].update(se=True)),
            ("grouped", lambda c: c["encoder"]["jasper"][1].update(groups=2)),
            ("activation", lambda c: c["encoder"].update(activation="swish")),
            ("tokenizer", lambda c: c.update(tokenizer={"dir": "x", "type": "bpe"})),
            ("num_classes", lambda c: c["decoder"].update(num_classes=30)),
        ]
        for needle, edit in cases:
            with self.subTest(case=needle):
                self.assert_fails(self._with_config(edit), needle)

    def test_shape_mismatch(self):
        # A config that disagrees with the checkpoint (filters changed) must be caught.
        def edit(c):
            c["encoder"]["jasper"][-1]["filters"] += 8
            c["decoder"]["feat_in"] += 8
        self.assert_fails(self._with_config(edit), "shape")

    def test_stft_mode_auto_uses_nemo_version(self):
        for version, mode in (("2.4.1", "legacy"), ("2.5.0rc0", "nemo25"), (None, "legacy")):
            with self.subTest(version=version):
                def edit(c, version=version):
                    if version is None:
                        c.pop("nemo_version", None)
                    else:
                        c["nemo_version"] = version
                out = os.path.join(self.tmp, f"auto-{version}")
                rc, _, err = run_converter(self._with_config(edit), out)
                self.assertEqual(rc, 0, err)
                with open(os.path.join(out, "model.json")) as f:
                    self.assertEqual(json.load(f)["preprocessor"]["stft_mode"], mode)

    def test_refuses_to_overwrite_without_force(self):
        src = self.nemo_or_skip()
        out = os.path.join(self.tmp, "o")
        self.assertEqual(run_converter(src, out)[0], 0)
        rc, _, err = run_converter(src, out)
        self.assertNotEqual(rc, 0)
        self.assertIn("--force", err)
        self.assertEqual(run_converter(src, out, "--force")[0], 0)


if __name__ == "__main__":
    unittest.main()

"""Reads a NeMo .nemo archive and its PyTorch checkpoint without torch (for nemo_to_model.py).

read_nemo_archive() takes model_config.yaml and model_weights.ckpt out of a plain or gzipped tar;
load_torch_state_dict() reads the checkpoint (PyTorch's zip format) with zipfile and a restricted
unpickler that builds numpy arrays and refuses every global other than the few PyTorch uses for
plain tensors, so a hostile .nemo cannot run code. Bad input raises ConversionError with a
message for the user. Needs python3 and numpy only.
"""

import collections
import io
import os
import pickle
import re
import tarfile
import zipfile
import zlib

import numpy as np


class ConversionError(Exception):
    """Bad or unsupported input; the message is shown to the user."""


def fail(msg):
    raise ConversionError(msg)


# --------------------------------------------------------------------------------------------
# .nemo archive
# --------------------------------------------------------------------------------------------

def _member_name(name):
    name = name.replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def read_nemo_archive(path):
    """Returns (config_yaml_bytes, ckpt_bytes, member_names) from a plain or gzipped tar."""
    if not os.path.isfile(path):
        fail(f"{path}: no such file")
    wanted = {"model_config.yaml": None, "model_weights.ckpt": None}
    names = []
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                name = _member_name(member.name)
                names.append(name)
                if name in wanted and member.isfile():
                    f = tar.extractfile(member)
                    data = f.read()
                    if len(data) != member.size:
                        fail(f"{path}: member {member.name} is truncated "
                             f"({len(data)} of {member.size} bytes)")
                    wanted[name] = data
    except ConversionError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        detail = " ".join(str(e).split())
        fail(f"{path}: not a readable .nemo tar archive (plain or gzip); truncated or corrupt? "
             f"({detail})")
    missing = [k for k, v in wanted.items() if v is None]
    if missing:
        fail(f"{path}: archive lacks member(s) {', '.join('./' + m for m in missing)} "
             f"(has: {', '.join(names[:20]) or 'nothing'})")
    return wanted["model_config.yaml"], wanted["model_weights.ckpt"], names


# --------------------------------------------------------------------------------------------
# PyTorch checkpoint (zip + pickle) without torch
# --------------------------------------------------------------------------------------------

# torch.<Name>Storage -> numpy dtype. BFloat16 is read as raw uint16 and widened by hand.
_STORAGE_DTYPES = {
    "FloatStorage": np.dtype("<f4"),
    "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype("<u2"),
    "DoubleStorage": np.dtype("<f8"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


class _StorageType:
    def __init__(self, name):
        self.name = name
        self.dtype = _STORAGE_DTYPES[name]

    def __repr__(self):
        return f"torch.{self.name}"


class _Storage:
    def __init__(self, storage_type, key, numel, data):
        self.storage_type = storage_type
        self.key = key
        self.numel = numel
        self.data = data  # bytes


class _Array:
    """A tensor read from the checkpoint: numpy array + source storage kind."""

    def __init__(self, array, storage_name):
        self.array = array
        self.storage_name = storage_name


def _check_int_list(value, what):
    if not isinstance(value, (tuple, list)) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        fail(f"checkpoint: tensor {what} is not a list of ints: {value!r}")
    return list(value)


def _rebuild_tensor(storage, storage_offset, size, stride, *unused):
    if not isinstance(storage, _Storage):
        fail("checkpoint: tensor rebuilt from something that is not a storage")
    if not isinstance(storage_offset, int) or storage_offset < 0:
        fail(f"checkpoint: bad storage offset {storage_offset!r}")
    size = _check_int_list(size, "size")
    stride = _check_int_list(stride, "stride")
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride):
        fail(f"checkpoint: bad tensor geometry size={size} stride={stride}")
    dt = storage.storage_type.dtype
    flat = np.frombuffer(storage.data, dtype=dt, count=storage.numel)
    if any(s == 0 for s in size):
        arr = np.zeros(size, dtype=dt)
    else:
        last = storage_offset + sum((n - 1) * st for n, st in zip(size, stride))
        if last >= storage.numel:
            fail(f"checkpoint: tensor (offset {storage_offset}, size {size}, stride {stride}) "
                 f"reads past its storage '{storage.key}' of {storage.numel} elements")
        base = flat[storage_offset:]
        arr = np.lib.stride_tricks.as_strided(
            base, shape=tuple(size), strides=tuple(st * dt.itemsize for st in stride),
            writeable=False).copy()
    return _Array(arr, storage.storage_type.name)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    return _rebuild_tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, *state):
    if not isinstance(data, _Array):
        fail("checkpoint: parameter wraps something that is not a tensor")
    return data


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles a torch.save()d state dict; every other global is refused."""

    _ALLOWED = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    }

    def __init__(self, fileobj, read_record, byteorder):
        super().__init__(fileobj)
        self._read_record = read_record
        self._byteorder = byteorder
        self._storages = {}

    def find_class(self, module, name):
        fn = self._ALLOWED.get((module, name))
        if fn is not None:
            return fn
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(
            f"refusing to unpickle global '{module}.{name}' (only plain tensor state dicts "
            f"are accepted)")

    def persistent_load(self, pid):
        if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage"
                or not isinstance(pid[1], _StorageType) or not isinstance(pid[2], str)
                or not isinstance(pid[4], int) or pid[4] < 0):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid
        if not re.fullmatch(r"[0-9A-Za-z_.]+", key):
            raise pickle.UnpicklingError(f"bad storage key {key!r}")
        cached = self._storages.get(key)
        if cached is not None:
            return cached
        data = self._read_record(key)
        need = numel * storage_type.dtype.itemsize
        if len(data) < need:
            raise pickle.UnpicklingError(
                f"storage '{key}' has {len(data)} bytes, needs {need} ({numel} x {storage_type})")
        data = data[:need]
        if self._byteorder == "big" and storage_type.dtype.itemsize > 1:
            data = np.frombuffer(data, dtype=storage_type.dtype.newbyteorder(">")).astype(
                storage_type.dtype).tobytes()
        storage = _Storage(storage_type, key, numel, data)
        self._storages[key] = storage
        return storage


def load_torch_state_dict(ckpt_bytes):
    """Returns an ordered {name: _Array} from torch.save(state_dict) bytes (zip format)."""
    if not zipfile.is_zipfile(io.BytesIO(ckpt_bytes)):
        if ckpt_bytes[:2] == b"\x80\x02":
            fail("model_weights.ckpt uses PyTorch's legacy (pre-1.6, non-zip) serialization, "
                 "which this converter does not read; re-save it with a newer torch")
        fail("model_weights.ckpt is not a PyTorch zip checkpoint")
    try:
        zf = zipfile.ZipFile(io.BytesIO(ckpt_bytes))
        pkl_names = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pkl_names) != 1:
            fail(f"model_weights.ckpt: expected one data.pkl, found {len(pkl_names)}")
        prefix = pkl_names[0][: -len("data.pkl")]
        byteorder = "little"
        if prefix + "byteorder" in zf.namelist():
            byteorder = zf.read(prefix + "byteorder").decode("ascii", "replace").strip()
            if byteorder not in ("little", "big"):
                fail(f"model_weights.ckpt: unknown byteorder '{byteorder}'")

        def read_record(key):
            name = prefix + "data/" + key
            try:
                return zf.read(name)
            except KeyError:
                raise pickle.UnpicklingError(f"storage record '{name}' missing from the zip")

        unpickler = _RestrictedUnpickler(io.BytesIO(zf.read(pkl_names[0])), read_record,
                                         byteorder)
        obj = unpickler.load()
    except ConversionError:
        raise
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, TypeError,
            AttributeError, IndexError, KeyError, zlib.error, OSError) as e:
        fail(f"model_weights.ckpt could not be read: {e}")
    if isinstance(obj, dict) and set(obj.keys()) == {"state_dict"}:
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        fail(f"model_weights.ckpt holds a {type(obj).__name__}, expected a state dict")
    out = collections.OrderedDict()
    for k, v in obj.items():
        if not isinstance(k, str) or not isinstance(v, _Array):
            fail(f"model_weights.ckpt: entry {k!r} is not a named tensor")
        out[k] = v
    return out

"""A PEP 517 and PEP 660 build backend for kiln_client, standard library only.

It builds a pure-Python wheel of the kiln_client package, an editable wheel (a .pth
file naming this directory), and an sdist. The name and version are read from
pyproject.toml's [project] table.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "kiln_client"


def _project() -> dict:
    with open(os.path.join(_ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if table is None:
        raise RuntimeError("pyproject.toml has no [project] table")
    fields = dict(re.findall(r'^(\w[\w-]*)\s*=\s*"([^"]*)"\s*$', table.group(1), re.M))
    for key in ("name", "version"):
        if key not in fields:
            raise RuntimeError(f"pyproject.toml's [project] has no {key}")
    return fields


def _dist(p: dict) -> str:
    return re.sub(r"[-_.]+", "_", p["name"]).lower() + "-" + p["version"]


def _metadata(p: dict) -> bytes:
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if "description" in p:
        lines.append("Summary: " + p["description"])
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    return ("\n".join(lines) + "\n").encode()


def _wheel(p: dict) -> bytes:
    return b"Wheel-Version: 1.0\nGenerator: kiln_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _sources() -> list:
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(_ROOT, _PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, _ROOT).replace(os.sep, "/"), full))
    return out


def _write_wheel(directory: str, files: list) -> str:
    """Writes a wheel of files, (archive name, bytes) pairs, with its dist-info."""
    p = _project()
    dist = _dist(p)
    info = dist + ".dist-info"
    files = files + [(info + "/METADATA", _metadata(p)), (info + "/WHEEL", _wheel(p))]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    filename = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return filename


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    info = _dist(p) + ".dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "wb") as f:
        f.write(_metadata(p))
    with open(os.path.join(metadata_directory, info, "WHEEL"), "wb") as f:
        f.write(_wheel(p))
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for name, full in _sources():
        with open(full, "rb") as f:
            files.append((name, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(_PACKAGE + ".pth", (_ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    dist = _dist(p)
    filename = dist + ".tar.gz"
    members = [("pyproject.toml", os.path.join(_ROOT, "pyproject.toml")),
               ("_build/kiln_build.py", os.path.abspath(__file__))] + _sources()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for name, full in members:
            t.add(full, arcname=dist + "/" + name, recursive=False)
        pkg_info = _metadata(p)
        ti = tarfile.TarInfo(dist + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return filename

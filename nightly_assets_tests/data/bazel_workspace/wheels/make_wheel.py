"""Writes a pure-Python wheel: make_wheel.py OUT.whl DISTRIBUTION VERSION SOURCE.py...

Each source goes in the package named after the distribution, with fixed timestamps, so the same
inputs give the same bytes (what a remote cache needs).
"""

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

out, distribution, version, *sources = sys.argv[1:]
package = distribution
info = f"{distribution}-{version}.dist-info"
files = {f"{package}/{Path(source).name}": Path(source).read_bytes() for source in sources}
files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n".encode()
wheel_file = "Wheel-Version: 1.0\nGenerator: make_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
files[f"{info}/WHEEL"] = wheel_file.encode()
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append(f"{info}/RECORD,,")
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
Path(out).parent.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
    for name, data in files.items():
        wheel.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)

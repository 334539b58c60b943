"""What the consumer scripts share: decoded values made JSON, and the
data files under a folder."""

import decimal
import os


def plain(value):
    """A decoded value as JSON: bytes as {"hex": ...}, decimals as
    {"decimal": "<text>"}."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    return value


def files_under(root, extension):
    """The files under `root` whose names end in `extension`, in name
    order; folders starting with '.' (the sink's staging) left out."""
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        paths += [os.path.join(folder, f) for f in files if f.endswith(extension)]
    return sorted(paths, key=os.path.basename)

"""Reads Avro object container files with fastavro, which needs nothing
but the file: the writer schema is in its header.

    python avro_files.py <folder>

Reads every *.avro file under <folder> (the staging folder left out), in
name order, and prints one JSON line per file:
{"file", "codec", "schema", "records"}, records as fastavro decodes them,
made JSON: bytes as {"hex": ...}, decimals as {"decimal": "<text>"}.
"""

import decimal
import json
import os
import sys

import fastavro


def plain(value):
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    return value


def main():
    root = sys.argv[1]
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        paths += [os.path.join(folder, f) for f in files if f.endswith(".avro")]
    for path in sorted(paths, key=os.path.basename):
        with open(path, "rb") as f:
            reader = fastavro.reader(f)
            records = [plain(r) for r in reader]
            print(json.dumps({
                "file": os.path.relpath(path, root),
                "codec": reader.codec,
                "schema": reader.writer_schema,
                "records": records,
            }))


if __name__ == "__main__":
    main()

"""Reads Avro object container files with fastavro, which needs nothing
but the file: the writer schema is in its header.

    python avro_files.py <folder>

Reads every *.avro file under <folder> (the staging folder left out), in
name order, and prints one JSON line per file:
{"file", "codec", "schema", "records"}, records as fastavro decodes them,
made JSON: bytes as {"hex": ...}, decimals as {"decimal": "<text>"}.
"""

import json
import os
import sys

import fastavro

from plain import files_under, plain


def main():
    root = sys.argv[1]
    for path in files_under(root, ".avro"):
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

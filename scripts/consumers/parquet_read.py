"""Reads Parquet files with pyarrow, as a data platform's reader would.

    python parquet_read.py <folder>

Reads every *.parquet file under <folder> (the staging folder left out),
in name order, and prints one JSON line per file:
{"file", "fields", "rows"}. Each field is {"name", "type", "logical"}:
the Arrow type pyarrow reads and the Parquet logical type of the column.
Rows are objects made JSON: decimals as text, bytes as hex, dates as days
since 1970-01-01, times of day and timestamps as microseconds (since
midnight, since the epoch).
"""

import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from plain import files_under


def column_values(column):
    kind = column.type
    if pa.types.is_timestamp(kind) or pa.types.is_time(kind):
        factor = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 0.001}[kind.unit]
        width = pa.int64() if pa.types.is_timestamp(kind) or kind.bit_width == 64 else pa.int32()
        return [None if v is None else int(v * factor) for v in column.cast(width).to_pylist()]
    if pa.types.is_date32(kind):
        return column.cast(pa.int32()).to_pylist()
    if pa.types.is_decimal(kind):
        return [None if v is None else str(v) for v in column.to_pylist()]
    if pa.types.is_binary(kind):
        return [None if v is None else v.hex() for v in column.to_pylist()]
    if isinstance(kind, pa.BaseExtensionType):
        return column_values(column.storage)
    return column.to_pylist()


def main():
    root = sys.argv[1]
    for path in files_under(root, ".parquet"):
        parquet = pq.ParquetFile(path)
        table = parquet.read()
        logical = {parquet.schema.column(i).name: str(parquet.schema.column(i).logical_type)
                   for i in range(len(parquet.schema))}
        fields = [{"name": f.name, "type": str(f.type), "logical": logical.get(f.name)} for f in table.schema]
        columns = {name: column_values(table.column(name).combine_chunks()) for name in table.column_names}
        rows = [{name: columns[name][i] for name in table.column_names} for i in range(table.num_rows)]
        print(json.dumps({"file": os.path.relpath(path, root), "fields": fields, "rows": rows}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Size limits the codebase keeps: no Rust file over 600 lines, and no
function over 100 lines outside tests. Prints each breach; exits 1 if any.

A function runs from its `fn` line to the first later line that closes it
at the same indent. Test code (files under tests/ or benches/, a
`tests.rs` module, and the body of a `#[cfg(test)]` module) counts for the file limit only."""

import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FN_LINES = 100
FN = re.compile(r"^(\s*)(pub(\([^)]*\))? )?(const )?(async )?(unsafe )?(extern \"C\" )?fn \w+")


def breaches(path, rel):
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    if len(lines) > MAX_FILE_LINES:
        found.append(f"{rel}: {len(lines)} lines (limit {MAX_FILE_LINES}); split it")
    if "/tests/" in f"/{rel}" or "/benches/" in f"/{rel}" or rel.endswith("/tests.rs"):
        return found
    test_from = len(lines)
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].lstrip().startswith("mod "):
            test_from = i
            break
    for i, line in enumerate(lines[:test_from]):
        m = FN.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        for j in range(i + 1, test_from):
            if lines[j].startswith(indent + "}") and not lines[j].startswith(indent + " "):
                length = j - i + 1
                if length > MAX_FN_LINES:
                    name = line.strip().split("(")[0]
                    found.append(f"{rel}:{i + 1}: `{name}` is {length} lines (limit {MAX_FN_LINES}); split it")
                break
    return found


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / "crates").rglob("*.rs")):
        found += breaches(path, path.relative_to(root).as_posix())
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

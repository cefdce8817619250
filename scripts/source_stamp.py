"""Keeps a warm build's objects current across copies of the tree: `save STAMP` records every build input's content
hash and mtime (csrc/, setup.py); `restore STAMP` gives each input whose content still matches its recorded mtime
back, so that ninja rebuilds only what changed. scripts/gpu_check.sh uses it on the GPU machine, whose tree arrives
with fresh mtimes at every call while its build/ folder is kept.

    python scripts/source_stamp.py save build/.source_stamp
    python scripts/source_stamp.py restore build/.source_stamp     # no stamp: nothing to do
"""
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def inputs():
    yield "setup.py"
    for d, _, files in os.walk(os.path.join(ROOT, "csrc")):
        for f in files:
            yield os.path.relpath(os.path.join(d, f), ROOT)


def digest(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def main(argv):
    what, stamp = argv
    stamp = os.path.join(ROOT, stamp)
    if what == "save":
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        record = {p: [digest(p), os.stat(os.path.join(ROOT, p)).st_mtime] for p in inputs()}
        with open(stamp, "w") as f:
            json.dump(record, f)
        return 0
    if what != "restore":
        raise SystemExit(f"source_stamp.py: save or restore, not {what!r}")
    if not os.path.exists(stamp):
        return 0
    with open(stamp) as f:
        record = json.load(f)
    kept = 0
    for p in inputs():
        if p in record and digest(p) == record[p][0]:
            os.utime(os.path.join(ROOT, p), (record[p][1], record[p][1]))
            kept += 1
    print(f"source_stamp: {kept} unchanged build inputs keep their last build's mtime")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

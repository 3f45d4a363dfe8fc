#!/usr/bin/env python3
"""Writes the WebDataset shards tests/core/webdataset_test.cc reads, with Python's own tarfile
(an implementation independent of core/io/tar_reader.cc):

  tests/testdata/webdataset/shard-000.tar   PAX format: samples n0000..n0002 (jpg, cls, json),
                                            a folder entry, a sample whose path is over 100
                                            characters (a pax 'path' record)
  tests/testdata/webdataset/shard-001.tar   GNU format: samples n0003..n0004 (GNU long name for
                                            n0004's path), a file without extension (skipped)
  tests/testdata/webdataset/no-cls.tar      sample n0009 has jpg but no cls

Sample n's jpg holds bytes (n * 37 + i) % 256 for i < 700 + n, cls holds str(n % 10), json holds
'{"n": n}'. Deterministic (fixed mtimes, owners); run from the repository root.
"""
import io
import os
import tarfile

OUT = "tests/testdata/webdataset"
LONG = "train/" + "d" * 60 + "/" + "e" * 50


def member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    info.uid = info.gid = 0
    info.uname = info.gname = "sluice"
    tar.addfile(info, io.BytesIO(data))


def sample(tar, key, n, fields=("jpg", "cls", "json")):
    values = {
        "jpg": bytes((n * 37 + i) % 256 for i in range(700 + n)),
        "cls": str(n % 10).encode(),
        "json": ('{"n": %d}' % n).encode(),
    }
    for f in fields:
        member(tar, "%s.%s" % (key, f), values[f])


def main():
    os.makedirs(OUT, exist_ok=True)
    with tarfile.open(os.path.join(OUT, "shard-000.tar"), "w", format=tarfile.PAX_FORMAT) as tar:
        d = tarfile.TarInfo("train")
        d.type = tarfile.DIRTYPE
        d.mtime = 1700000000
        tar.addfile(d)
        for n in range(3):
            sample(tar, "train/n%04d" % n, n)
        sample(tar, LONG + "/n0100", 100)
    with tarfile.open(os.path.join(OUT, "shard-001.tar"), "w", format=tarfile.GNU_FORMAT) as tar:
        sample(tar, "train/n0003", 3)
        member(tar, "train/README", b"no extension: not part of a sample")
        sample(tar, LONG + "/n0004", 4)
    with tarfile.open(os.path.join(OUT, "no-cls.tar"), "w", format=tarfile.USTAR_FORMAT) as tar:
        sample(tar, "train/n0008", 8)
        sample(tar, "train/n0009", 9, fields=("jpg", "json"))


if __name__ == "__main__":
    main()
